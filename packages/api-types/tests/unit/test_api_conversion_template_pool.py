"""Table tests for v1alpha1 <-> v1beta1 conversion of SandboxTemplate and SandboxWarmPool, plus
dispatch, bad input and Go quoting (upstream v0.5.6's ``*_conversion.go``).

Includes the cases of upstream's conversion unit tests for the template policy annotation and
warm pool replicas.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conversion_support import CORE_A, CORE_B, EXT_A, EXT_B, Obj, state_of

from kube_agent_sandbox.api.constants import (
    ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE,
    ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE,
    ANNOTATION_V1BETA1_VCT_POLICY,
)
from kube_agent_sandbox.api.conversion import ConversionError, convert
from kube_agent_sandbox.api.conversion._common import go_quote

# --- SandboxTemplate ----------------------------------------------------------------------------


def alpha_template(annotations: dict[str, str] | None) -> Obj:
    obj: Obj = {
        "apiVersion": EXT_A,
        "kind": "SandboxTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
            "networkPolicy": {"egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]},
            "networkPolicyManagement": "Unmanaged",
            "envVarsInjectionPolicy": "Allowed",
            "service": False,
        },
    }
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    return obj


@pytest.mark.parametrize("policy", ["Disallowed", "Allowed", "Overrides"])
def test_template_policy_annotation_becomes_the_field(policy: str) -> None:
    src = alpha_template({ANNOTATION_V1BETA1_VCT_POLICY: policy, "keep": "me"})

    dst = convert(src, EXT_B)

    assert dst["spec"]["volumeClaimTemplatesPolicy"] == policy
    assert ANNOTATION_V1BETA1_VCT_POLICY not in dst["metadata"]["annotations"]
    assert dst["metadata"]["annotations"]["keep"] == "me"
    # The state holds the v1alpha1 object as written, annotation included.
    state = state_of(dst, ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE)
    assert state["metadata"]["annotations"][ANNOTATION_V1BETA1_VCT_POLICY] == policy
    assert convert(dst, EXT_A) == src


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Bogus", 'invalid VolumeClaimTemplatesPolicy annotation value: "Bogus"'),
        ("", 'invalid VolumeClaimTemplatesPolicy annotation value: ""'),
        ("allowed", 'invalid VolumeClaimTemplatesPolicy annotation value: "allowed"'),
        ('a"b\n', 'invalid VolumeClaimTemplatesPolicy annotation value: "a\\"b\\n"'),
    ],
)
def test_template_invalid_policy_annotation(value: str, message: str) -> None:
    with pytest.raises(ConversionError) as info:
        convert(alpha_template({ANNOTATION_V1BETA1_VCT_POLICY: value}), EXT_B)
    assert str(info.value) == message


def test_template_without_annotation_converts_field_by_field() -> None:
    src = alpha_template(None)
    dst = convert(src, EXT_B)
    assert dst["spec"] == src["spec"]
    assert list(dst["metadata"]["annotations"]) == [ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE]
    assert convert(dst, EXT_A) == src


def beta_template(policy: str | None, annotations: dict[str, str] | None = None) -> Obj:
    obj = alpha_template(annotations)
    obj["apiVersion"] = EXT_B
    if policy is not None:
        obj["spec"]["volumeClaimTemplatesPolicy"] = policy
    return obj


def test_template_beta_to_alpha_moves_the_policy_into_the_annotation() -> None:
    dst = convert(beta_template("Overrides"), EXT_A)
    assert "volumeClaimTemplatesPolicy" not in dst["spec"]
    assert dst["metadata"]["annotations"] == {ANNOTATION_V1BETA1_VCT_POLICY: "Overrides"}


@pytest.mark.parametrize("policy", [None, ""])
def test_template_beta_to_alpha_removes_a_stale_policy_annotation(policy: str | None) -> None:
    src = beta_template(policy, {ANNOTATION_V1BETA1_VCT_POLICY: "Allowed", "x": "y"})
    dst = convert(src, EXT_A)
    assert dst["metadata"]["annotations"] == {"x": "y"}
    assert "volumeClaimTemplatesPolicy" not in dst["spec"]


def test_template_beta_to_alpha_strips_but_never_restores_the_state() -> None:
    stale_state = json.dumps(alpha_template({"old": "annotation"}) | {"spec": {"old": True}})
    src = beta_template("Allowed", {ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE: stale_state})
    dst = convert(src, EXT_A)
    assert dst["spec"] == alpha_template(None)["spec"]
    assert dst["metadata"]["annotations"] == {ANNOTATION_V1BETA1_VCT_POLICY: "Allowed"}


def test_template_beta_to_alpha_accepts_a_garbage_state() -> None:
    src = beta_template(None, {ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE: "not json"})
    assert "annotations" not in convert(src, EXT_A)["metadata"]


# --- SandboxWarmPool ----------------------------------------------------------------------------


def warm_pool(api_version: str, replicas: int | None) -> Obj:
    spec: Obj = {"sandboxTemplateRef": {"name": "t"}, "updateStrategy": {"type": "Recreate"}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": api_version,
        "kind": "SandboxWarmPool",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": spec,
        "status": {"replicas": 2, "readyReplicas": 1, "selector": "a=b"},
    }


@pytest.mark.parametrize(("replicas", "expected"), [(3, 3), (0, 0), (None, 0)])
def test_warm_pool_alpha_to_beta(replicas: int | None, expected: int) -> None:
    src = warm_pool(EXT_A, replicas)
    dst = convert(src, EXT_B)
    assert dst["spec"] == {**src["spec"], "replicas": expected}
    assert dst["status"] == src["status"]
    assert state_of(dst, ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE) == src


@pytest.mark.parametrize(("replicas", "expected"), [(5, 5), (0, 0), (None, 1)])
def test_warm_pool_beta_to_alpha(replicas: int | None, expected: int) -> None:
    src = warm_pool(EXT_B, replicas)
    src["metadata"]["annotations"] = {ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE: "{}", "a": "b"}
    dst = convert(src, EXT_A)
    assert dst["spec"] == {**src["spec"], "replicas": expected}
    assert dst["status"] == src["status"]
    assert dst["metadata"]["annotations"] == {"a": "b"}


def test_warm_pool_round_trip() -> None:
    src = warm_pool(EXT_A, 4)
    assert convert(convert(src, EXT_B), EXT_A) == src


def test_warm_pool_observed_generation_is_dropped_when_read_as_alpha() -> None:
    src = warm_pool(EXT_B, 3)
    src["status"]["observedGeneration"] = 7
    dst = convert(src, EXT_A)
    assert dst["status"] == {"replicas": 2, "readyReplicas": 1, "selector": "a=b"}
    assert src["status"]["observedGeneration"] == 7  # the input is not changed


def test_warm_pool_status_written_through_alpha_has_no_observed_generation() -> None:
    src = warm_pool(EXT_A, 3)
    src["status"]["observedGeneration"] = 7  # cannot pass v1alpha1 admission; dropped anyway
    dst = convert(src, EXT_B)
    assert dst["status"] == {"replicas": 2, "readyReplicas": 1, "selector": "a=b"}


def test_warm_pool_beta_alpha_beta_loses_only_observed_generation() -> None:
    src = warm_pool(EXT_B, 3)
    src["status"]["observedGeneration"] = 7
    again = convert(convert(src, EXT_A), EXT_B)
    again["metadata"].pop("annotations")
    expected = json.loads(json.dumps(src))
    del expected["status"]["observedGeneration"]
    assert again == expected


@pytest.mark.parametrize("to", [EXT_A, EXT_B])
def test_warm_pool_status_that_is_not_an_object_is_refused(to: str) -> None:
    src = warm_pool(EXT_B if to == EXT_A else EXT_A, 3)
    src["status"] = ["x"]
    with pytest.raises(ConversionError, match="status: expected object, got array"):
        convert(src, to)


# --- Dispatch and bad input ---------------------------------------------------------------------


def test_same_version_returns_an_equal_copy() -> None:
    src = warm_pool(EXT_B, 2)
    dst = convert(src, EXT_B)
    assert dst == src
    dst["spec"]["replicas"] = 9
    assert src["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    ("obj", "to", "message"),
    [
        ([], EXT_B, "object: expected a JSON object, got list"),
        ({"kind": "Sandbox"}, CORE_B, "apiVersion: expected a non-empty string, got None"),
        ({"apiVersion": 1, "kind": "Sandbox"}, CORE_B, "apiVersion: expected a non-empty string"),
        ({"apiVersion": "v1", "kind": "Sandbox"}, CORE_B, "apiVersion 'v1' has no API group"),
        (
            {"apiVersion": "agents.x-k8s.io/v2", "kind": "Sandbox"},
            CORE_B,
            "apiVersion 'agents.x-k8s.io/v2': unsupported version 'v2'",
        ),
        (
            {"apiVersion": CORE_A, "kind": "Sandbox"},
            "agents.x-k8s.io/v1",
            "desired apiVersion 'agents.x-k8s.io/v1': unsupported version 'v1'",
        ),
        ({"apiVersion": CORE_A}, CORE_B, "kind: expected a non-empty string, got None"),
        (
            {"apiVersion": CORE_A, "kind": "Pod"},
            CORE_B,
            "no conversion for kind 'Pod' in group 'agents.x-k8s.io'",
        ),
        (
            {"apiVersion": CORE_A, "kind": "SandboxClaim"},
            CORE_B,
            "no conversion for kind 'SandboxClaim' in group 'agents.x-k8s.io'",
        ),
        (
            {"apiVersion": CORE_A, "kind": "Sandbox"},
            EXT_B,
            "cannot convert Sandbox from group 'agents.x-k8s.io' to group "
            "'extensions.agents.x-k8s.io'",
        ),
    ],
)
def test_dispatch_errors(obj: Any, to: str, message: str) -> None:
    with pytest.raises(ConversionError) as info:
        convert(obj, to)
    assert str(info.value).startswith(message)


def _with(base: Obj, path: str, value: Any) -> Obj:
    obj: Obj = json.loads(json.dumps(base))
    node = obj
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return obj


_SANDBOX_A: Obj = {"apiVersion": CORE_A, "kind": "Sandbox", "metadata": {"name": "s"}, "spec": {}}
_SANDBOX_B: Obj = {**_SANDBOX_A, "apiVersion": CORE_B}
_CLAIM_A: Obj = {"apiVersion": EXT_A, "kind": "SandboxClaim", "metadata": {"name": "c"}, "spec": {}}
_CLAIM_B: Obj = {**_CLAIM_A, "apiVersion": EXT_B}
_POOL_A: Obj = {"apiVersion": EXT_A, "kind": "SandboxWarmPool", "metadata": {}, "spec": {}}
_POOL_B: Obj = {**_POOL_A, "apiVersion": EXT_B}
_TEMPLATE_B: Obj = {"apiVersion": EXT_B, "kind": "SandboxTemplate", "spec": {}}


@pytest.mark.parametrize(
    ("base", "path", "value", "to", "message"),
    [
        (_SANDBOX_A, "spec", [], CORE_B, "spec: expected object, got array"),
        (_SANDBOX_A, "spec.replicas", "1", CORE_B, "spec.replicas: expected integer, got string"),
        (_SANDBOX_A, "spec.replicas", True, CORE_B, "spec.replicas: expected integer, got boolean"),
        (_SANDBOX_A, "spec.replicas", 1.0, CORE_B, "spec.replicas: expected integer, got number"),
        (_SANDBOX_A, "spec.replicas", 2**31, CORE_B, "spec.replicas: value 2147483648 does not"),
        (_SANDBOX_A, "status", "x", CORE_B, "status: expected object, got string"),
        (_SANDBOX_A, "status.replicas", [], CORE_B, "status.replicas: expected integer, got"),
        (_SANDBOX_A, "metadata", 7, CORE_B, "metadata: expected object, got number"),
        (
            _SANDBOX_A,
            "metadata.annotations",
            {"a": 1},
            CORE_B,
            "metadata.annotations[a]: expected string, got number",
        ),
        (
            _SANDBOX_A,
            "metadata.annotations",
            ["a"],
            CORE_B,
            "metadata.annotations: expected object, got array",
        ),
        (
            _SANDBOX_B,
            "spec.operatingMode",
            0,
            CORE_A,
            "spec.operatingMode: expected string, got number",
        ),
        (_SANDBOX_B, "status", [], CORE_A, "status: expected object, got array"),
        (_CLAIM_A, "spec.warmpool", 3, EXT_B, "spec.warmpool: expected string, got number"),
        (
            _CLAIM_A,
            "spec.sandboxTemplateRef",
            "t",
            EXT_B,
            "spec.sandboxTemplateRef: expected object, got string",
        ),
        (
            _CLAIM_A,
            "spec.sandboxTemplateRef.name",
            False,
            EXT_B,
            "spec.sandboxTemplateRef.name: expected string, got boolean",
        ),
        (_CLAIM_A, "metadata.name", 5, EXT_B, "metadata.name: expected string, got number"),
        (_CLAIM_A, "status.sandbox", "x", EXT_B, "status.sandbox: expected object, got string"),
        (
            _CLAIM_A,
            "status.sandbox.name",
            1,
            EXT_B,
            "status.sandbox.name: expected string, got number",
        ),
        (_CLAIM_B, "spec.warmPoolRef", [], EXT_A, "spec.warmPoolRef: expected object, got array"),
        (
            _CLAIM_B,
            "spec.warmPoolRef.name",
            {},
            EXT_A,
            "spec.warmPoolRef.name: expected string, got object",
        ),
        (_POOL_A, "spec.replicas", "3", EXT_B, "spec.replicas: expected integer, got string"),
        (_POOL_B, "spec.replicas", -(2**31) - 1, EXT_A, "spec.replicas: value -2147483649 does"),
        (
            _TEMPLATE_B,
            "spec.volumeClaimTemplatesPolicy",
            1,
            EXT_A,
            "spec.volumeClaimTemplatesPolicy: expected string, got number",
        ),
    ],
)
def test_wrong_field_types(base: Obj, path: str, value: Any, to: str, message: str) -> None:
    with pytest.raises(ConversionError) as info:
        convert(_with(base, path, value), to)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("plain", '"plain"'),
        ('q"b\\s', '"q\\"b\\\\s"'),
        ("\t\n\r\a\b\f\v", '"\\t\\n\\r\\a\\b\\f\\v"'),
        ("\x00\x7f", '"\\x00\\x7f"'),
        ("é日本", '"é日本"'),
        ("\u200b", '"\\u200b"'),
        ("\U000e0001", '"\\U000e0001"'),
    ],
)
def test_go_quote_matches_go_percent_q(value: str, quoted: str) -> None:
    assert go_quote(value) == quoted
