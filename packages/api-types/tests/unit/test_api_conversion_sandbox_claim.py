"""Table tests for v1alpha1 <-> v1beta1 conversion of Sandbox and SandboxClaim: every rule of
upstream v0.5.6's ``sandbox_conversion.go`` and ``sandboxclaim_conversion.go``.

Includes the cases of upstream's conversion unit tests (upstream v0.5.6
``*_conversion_test.go``): Sandbox replicas nil/1/0 both ways and from a hub without state,
the SandboxClaim warm-pool derivation table and its hub-only table.
"""

from __future__ import annotations

import json

import pytest
from conversion_support import CORE_A, CORE_B, EXT_A, EXT_B, Obj, state_of

from kube_agent_sandbox.api.constants import (
    ANNOTATION_V1ALPHA1_SANDBOX_STATE,
    ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE,
)
from kube_agent_sandbox.api.conversion import ConversionError, convert
from kube_agent_sandbox.api.conversion.sandboxclaim import is_specific_pool, strip_random_suffix

# --- Sandbox ------------------------------------------------------------------------------------


def alpha_sandbox(replicas: int | None, status_replicas: int | None) -> Obj:
    spec: Obj = {
        "podTemplate": {
            "metadata": {"labels": {"pod-label": "value"}},
            "spec": {"containers": [{"name": "agent", "image": "agent-image:latest"}]},
        },
        "volumeClaimTemplates": [
            {"metadata": {"name": "workspace"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
        ],
        "shutdownTime": "2026-01-01T00:00:00Z",
        "shutdownPolicy": "Delete",
        "service": True,
    }
    if replicas is not None:
        spec["replicas"] = replicas
    status: Obj = {
        "serviceFQDN": "my-sandbox.default.svc.cluster.local",
        "selector": "sandbox=my-sandbox",
        "podIPs": ["10.244.0.5"],
    }
    if status_replicas is not None:
        status["replicas"] = status_replicas
    return {
        "apiVersion": CORE_A,
        "kind": "Sandbox",
        "metadata": {
            "name": "my-sandbox",
            "namespace": "default",
            "labels": {"foo": "bar"},
            "annotations": {"baz": "qux", ANNOTATION_V1ALPHA1_SANDBOX_STATE: "some-old-state"},
        },
        "spec": spec,
        "status": status,
    }


@pytest.mark.parametrize(
    ("replicas", "mode"),
    [(None, "Running"), (1, "Running"), (0, "Suspended")],
    ids=["replicas-nil", "replicas-1", "replicas-0"],
)
def test_sandbox_alpha_to_beta(replicas: int | None, mode: str) -> None:
    src = alpha_sandbox(replicas, 1 if replicas != 0 else 0)
    before = json.dumps(src, sort_keys=True)

    dst = convert(src, CORE_B)

    assert json.dumps(src, sort_keys=True) == before, "the input must not be mutated"
    assert dst["apiVersion"] == CORE_B
    assert dst["spec"]["operatingMode"] == mode
    assert "replicas" not in dst["spec"]
    for key in ("podTemplate", "volumeClaimTemplates", "shutdownTime", "shutdownPolicy"):
        assert dst["spec"][key] == src["spec"][key]
    assert dst["spec"]["service"] is True
    assert dst["status"] == {
        "serviceFQDN": "my-sandbox.default.svc.cluster.local",
        "selector": "sandbox=my-sandbox",
        "podIPs": ["10.244.0.5"],
    }
    assert dst["metadata"]["labels"] == {"foo": "bar"}
    assert dst["metadata"]["annotations"]["baz"] == "qux"
    # The state is the whole v1alpha1 object minus its own (old) state annotation: no nesting.
    state = state_of(dst, ANNOTATION_V1ALPHA1_SANDBOX_STATE)
    expected_state = json.loads(before)
    del expected_state["metadata"]["annotations"][ANNOTATION_V1ALPHA1_SANDBOX_STATE]
    assert state == expected_state


@pytest.mark.parametrize(
    ("replicas", "status_replicas"),
    [(None, 1), (1, 1), (0, 0), (None, None), (1, 0)],
    ids=["nil", "one", "zero", "nil-no-status-replicas", "stale-status"],
)
def test_sandbox_alpha_beta_alpha_is_lossless(
    replicas: int | None, status_replicas: int | None
) -> None:
    src = alpha_sandbox(replicas, status_replicas)
    del src["metadata"]["annotations"][ANNOTATION_V1ALPHA1_SANDBOX_STATE]

    back = convert(convert(src, CORE_B), CORE_A)

    assert back == src
    assert ("replicas" in back["spec"]) == (replicas is not None)


@pytest.mark.parametrize(
    ("mode", "replicas"),
    [("Running", 1), ("Suspended", 0), ("", 1), (None, 1)],
    ids=["running", "suspended", "empty-mode", "absent-mode"],
)
def test_sandbox_beta_to_alpha_without_state(mode: str | None, replicas: int) -> None:
    spec: Obj = {"podTemplate": {"spec": {"containers": []}}}
    if mode is not None:
        spec["operatingMode"] = mode
    src: Obj = {
        "apiVersion": CORE_B,
        "kind": "Sandbox",
        "metadata": {"name": "my-sandbox", "namespace": "default"},
        "spec": spec,
        "status": {"nodeName": "node-1", "service": "my-sandbox"},
    }

    dst = convert(src, CORE_A)

    assert dst["apiVersion"] == CORE_A
    assert dst["spec"] == {"podTemplate": {"spec": {"containers": []}}, "replicas": replicas}
    assert dst["status"] == {"service": "my-sandbox", "replicas": replicas}
    assert "annotations" not in dst["metadata"]


def test_sandbox_beta_to_alpha_omits_an_all_zero_status() -> None:
    src: Obj = {
        "apiVersion": CORE_B,
        "kind": "Sandbox",
        "metadata": {"name": "s"},
        "spec": {"operatingMode": "Suspended"},
    }
    assert "status" not in convert(src, CORE_A)
    running = convert({**src, "spec": {"operatingMode": "Running"}}, CORE_A)
    assert running["status"] == {"replicas": 1}


def hub_with_state(original_alpha: Obj, *, mode: str, status: Obj | None = None) -> Obj:
    hub = convert(original_alpha, CORE_B)
    hub["spec"]["operatingMode"] = mode
    if status is not None:
        hub["status"] = status
    return hub


@pytest.mark.parametrize(
    ("original_replicas", "mode", "expected"),
    [
        (None, "Running", None),
        (1, "Running", 1),
        (0, "Running", 1),  # resumed through v1beta1
        (None, "Suspended", 0),
        (1, "Suspended", 0),  # suspended through v1beta1
        (0, "Suspended", 0),
        (0, "", 1),  # unknown mode: upstream's switch keeps the best-effort value
        (None, "Other", 1),
    ],
)
def test_sandbox_beta_to_alpha_restores_replicas_from_state(
    original_replicas: int | None, mode: str, expected: int | None
) -> None:
    original = alpha_sandbox(original_replicas, 1)
    del original["metadata"]["annotations"][ANNOTATION_V1ALPHA1_SANDBOX_STATE]
    hub = hub_with_state(original, mode=mode)

    dst = convert(hub, CORE_A)

    assert dst["spec"].get("replicas") == expected
    assert ("replicas" in dst["spec"]) == (expected is not None)
    assert ANNOTATION_V1ALPHA1_SANDBOX_STATE not in dst["metadata"]["annotations"]
    assert dst["metadata"]["annotations"] == {"baz": "qux"}


def test_sandbox_status_replicas_comes_from_the_state_even_when_stale() -> None:
    original = alpha_sandbox(0, 0)
    hub = hub_with_state(
        original, mode="Running", status={"nodeName": "n1", "conditions": [{"type": "Ready"}]}
    )

    dst = convert(hub, CORE_A)

    assert dst["spec"]["replicas"] == 1
    assert dst["status"] == {"conditions": [{"type": "Ready"}], "replicas": 0}


def test_sandbox_state_written_by_go_is_accepted() -> None:
    # Go's json.Marshal of the typed object: TypeMeta first, null creationTimestamp, HTML-safe
    # escapes, and no omitempty on status.replicas.
    go_state = (
        '{"kind":"Sandbox","apiVersion":"agents.x-k8s.io/v1alpha1","metadata":{"name":"a\\u003cb",'
        '"namespace":"default","creationTimestamp":null},"spec":{"podTemplate":{"spec":'
        '{"containers":null},"metadata":{}},"replicas":0},"status":{"replicas":0}}'
    )
    hub: Obj = {
        "apiVersion": CORE_B,
        "kind": "Sandbox",
        "metadata": {"name": "a<b", "annotations": {ANNOTATION_V1ALPHA1_SANDBOX_STATE: go_state}},
        "spec": {"operatingMode": "Suspended"},
    }

    dst = convert(hub, CORE_A)

    assert dst["spec"] == {"replicas": 0}
    assert dst["status"] == {"replicas": 0}
    assert "annotations" not in dst["metadata"]


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ("some-old-state", "failed to unmarshal v1alpha1 Sandbox state: "),
        ("[1]", "failed to unmarshal v1alpha1 Sandbox state: expected object, got array"),
        ('{"spec":{"replicas":"1"}}', "state spec.replicas: expected integer, got string"),
        ('{"spec":[]}', "state spec: expected object, got array"),
        ('{"status":{"replicas":true}}', "state status.replicas: expected integer, got boolean"),
    ],
)
def test_sandbox_bad_state_annotation_is_a_conversion_error(state: str, message: str) -> None:
    hub: Obj = {
        "apiVersion": CORE_B,
        "kind": "Sandbox",
        "metadata": {"name": "s", "annotations": {ANNOTATION_V1ALPHA1_SANDBOX_STATE: state}},
        "spec": {"operatingMode": "Running"},
    }
    with pytest.raises(ConversionError) as info:
        convert(hub, CORE_A)
    assert str(info.value).startswith(message)


def test_sandbox_alpha_to_beta_ignores_a_garbage_old_state() -> None:
    src = alpha_sandbox(1, 1)  # carries "some-old-state"
    dst = convert(src, CORE_B)
    assert state_of(dst, ANNOTATION_V1ALPHA1_SANDBOX_STATE)["spec"]["replicas"] == 1


def test_sandbox_unknown_fields_are_preserved_both_ways() -> None:
    src = alpha_sandbox(1, 1)
    src["spec"]["futureField"] = {"a": 1}
    src["extra"] = [1, 2]
    beta = convert(src, CORE_B)
    assert beta["spec"]["futureField"] == {"a": 1}
    assert beta["extra"] == [1, 2]
    alpha = convert(beta, CORE_A)
    assert alpha["spec"]["futureField"] == {"a": 1}


# --- SandboxClaim -------------------------------------------------------------------------------


def alpha_claim(
    *, claim: str, warmpool: str | None, template: str, sandbox: str, ttl: int | None = 300
) -> Obj:
    spec: Obj = {"sandboxTemplateRef": {"name": template}}
    if warmpool is not None:
        spec["warmpool"] = warmpool
    if ttl is not None:
        spec["lifecycle"] = {"ttlSecondsAfterFinished": ttl, "shutdownPolicy": "Retain"}
    obj: Obj = {
        "apiVersion": EXT_A,
        "kind": "SandboxClaim",
        "metadata": {
            "name": claim,
            "namespace": "default",
            "labels": {"foo": "bar"},
            "annotations": {"baz": "qux", ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE: "some-old-state"},
        },
        "spec": spec,
    }
    if sandbox:
        obj["status"] = {"sandbox": {"name": sandbox}}
    return obj


CLAIM_CASES = [
    # (id, claim, warmpool, template, sandbox, expected warmPoolRef, ttl)
    ("cold-specific-pool", "my-claim", "my-pool", "my-template", "my-claim", "my-pool", 300),
    ("cold-none", "my-claim", "none", "my-template", "my-claim", "shadow-pool-my-template", 300),
    (
        "cold-default",
        "my-claim",
        "default",
        "my-template",
        "my-claim",
        "shadow-pool-my-template",
        300,
    ),
    ("warm-specific-pool", "my-claim", "my-pool", "my-template", "my-pool-abcde", "my-pool", 300),
    ("warm-default", "my-claim", "default", "my-template", "my-pool-abcde", "my-pool", 300),
    ("no-sandbox-specific", "my-claim", "my-pool", "my-template", "", "my-pool", 300),
    ("no-sandbox-empty-policy", "my-claim", "", "my-template", "", "shadow-pool-my-template", 300),
    ("ttl-unset-no-policy", "my-claim", None, "my-template", "", "shadow-pool-my-template", None),
    ("warm-none", "my-claim", "none", "my-template", "pool-x-abcde", "pool-x", 300),
    ("warm-no-dash", "my-claim", None, "my-template", "nodash", "nodash", 300),
]


@pytest.mark.parametrize(
    ("claim", "warmpool", "template", "sandbox", "expected", "ttl"),
    [case[1:] for case in CLAIM_CASES],
    ids=[case[0] for case in CLAIM_CASES],
)
def test_claim_alpha_to_beta_and_back(
    claim: str, warmpool: str | None, template: str, sandbox: str, expected: str, ttl: int | None
) -> None:
    src = alpha_claim(claim=claim, warmpool=warmpool, template=template, sandbox=sandbox, ttl=ttl)
    before = json.dumps(src, sort_keys=True)

    dst = convert(src, EXT_B)

    assert json.dumps(src, sort_keys=True) == before
    assert dst["spec"]["warmPoolRef"] == {"name": expected}
    assert "sandboxTemplateRef" not in dst["spec"]
    assert "warmpool" not in dst["spec"]
    assert dst["spec"].get("lifecycle") == src["spec"].get("lifecycle")
    state = state_of(dst, ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE)
    assert ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE not in state["metadata"]["annotations"]
    assert state["spec"] == src["spec"]

    back = convert(dst, EXT_A)

    expected_back = json.loads(before)
    del expected_back["metadata"]["annotations"][ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE]
    assert back == expected_back


@pytest.mark.parametrize(
    ("pool", "warmpool", "template"),
    [
        ("my-pool", "my-pool", "my-pool"),
        ("", "", ""),
        ("shadow-pool-my-template", "default", "my-template"),
        ("shadow-pool-", "default", ""),
    ],
    ids=["specific", "empty", "shadow", "shadow-empty-template"],
)
def test_claim_beta_to_alpha_without_state(pool: str, warmpool: str, template: str) -> None:
    src: Obj = {
        "apiVersion": EXT_B,
        "kind": "SandboxClaim",
        "metadata": {"name": "my-claim", "namespace": "default"},
        "spec": {
            "warmPoolRef": {"name": pool},
            "env": [{"name": "A", "value": "1", "containerName": "c"}],
            "additionalPodMetadata": {"labels": {"l": "v"}},
            "volumeClaimTemplates": [{"metadata": {"name": "w"}, "spec": {}}],
        },
        "status": {"sandbox": {"name": "my-claim", "podIPs": ["10.0.0.1"]}},
    }

    dst = convert(src, EXT_A)

    assert dst["spec"] == {
        "sandboxTemplateRef": {"name": template},
        "warmpool": warmpool,
        "env": [{"name": "A", "value": "1", "containerName": "c"}],
        "additionalPodMetadata": {"labels": {"l": "v"}},
    }
    assert dst["status"] == src["status"]


def claim_hub(original: Obj, *, pool: str, sandbox: str | None = None) -> Obj:
    hub = convert(original, EXT_B)
    hub["spec"]["warmPoolRef"] = {"name": pool}
    if sandbox is not None:
        hub["status"] = {"sandbox": {"name": sandbox}}
    return hub


@pytest.mark.parametrize(
    ("original_policy", "original_template", "pool", "sandbox", "expected_policy"),
    [
        # Matches: the original template ref and policy come back.
        ("my-pool", "t", "my-pool", "", "my-pool"),
        ("my-pool", "t", "shadow-pool-my-pool", "", "my-pool"),
        (None, "t", "shadow-pool-t", "", None),
        ("default", "t", "t", "", "default"),
        ("none", "t", "pool-a-xyz12", "pool-a-xyz12", "none"),  # equal to the sandbox name
        ("none", "t", "pool-a", "pool-a-xyz12", "none"),  # equal to its stripped form
        # No match: the pool was changed through v1beta1.
        ("my-pool", "t", "other-pool", "", "other-pool"),
        (None, "t", "other-pool", "pool-a-xyz12", "other-pool"),
        ("default", "t", "shadow-pool-u", "", "shadow-pool-u"),
    ],
)
def test_claim_beta_to_alpha_with_state(
    original_policy: str | None,
    original_template: str,
    pool: str,
    sandbox: str,
    expected_policy: str | None,
) -> None:
    original = alpha_claim(
        claim="c", warmpool=original_policy, template=original_template, sandbox=""
    )
    del original["metadata"]["annotations"][ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE]
    hub = claim_hub(original, pool=pool, sandbox=sandbox)

    dst = convert(hub, EXT_A)

    assert dst["spec"]["sandboxTemplateRef"] == {"name": original_template}
    assert dst["spec"].get("warmpool") == expected_policy
    assert ("warmpool" in dst["spec"]) == (expected_policy is not None)
    assert dst["metadata"]["annotations"] == {"baz": "qux"}


def test_claim_state_without_template_ref_restores_its_absence() -> None:
    hub: Obj = {
        "apiVersion": EXT_B,
        "kind": "SandboxClaim",
        "metadata": {
            "name": "c",
            "annotations": {ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE: '{"spec":{}}'},
        },
        "spec": {"warmPoolRef": {"name": "shadow-pool-"}},
    }
    assert convert(hub, EXT_A)["spec"] == {}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ("{", "failed to unmarshal v1alpha1 SandboxClaim state: "),
        ('{"spec":{"warmpool":1}}', "state spec.warmpool: expected string, got number"),
        (
            '{"spec":{"sandboxTemplateRef":"t"}}',
            "state spec.sandboxTemplateRef: expected object, got string",
        ),
    ],
)
def test_claim_bad_state_annotation_is_a_conversion_error(state: str, message: str) -> None:
    hub: Obj = {
        "apiVersion": EXT_B,
        "kind": "SandboxClaim",
        "metadata": {"name": "c", "annotations": {ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE: state}},
        "spec": {"warmPoolRef": {"name": "p"}},
    }
    with pytest.raises(ConversionError) as info:
        convert(hub, EXT_A)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("name", "stripped"),
    [("my-pool-abcde", "my-pool"), ("nodash", "nodash"), ("a-", "a"), ("-x", ""), ("", "")],
)
def test_strip_random_suffix(name: str, stripped: str) -> None:
    assert strip_random_suffix(name) == stripped


@pytest.mark.parametrize(
    ("policy", "specific"),
    [(None, False), ("", False), ("none", False), ("default", False), ("p", True)],
)
def test_is_specific_pool(policy: str | None, specific: bool) -> None:
    assert is_specific_pool(policy) is specific
