"""Property-based round trips of v1alpha1 <-> v1beta1 conversion (hypothesis).

What the spec promises and these properties check:

- alpha -> beta -> alpha is lossless for all four kinds (the state annotation carries what
  v1beta1 cannot express). An old state annotation on the input is dropped, never nested.
- beta -> alpha -> beta is lossless for an object that came from v1alpha1 (it carries the
  state annotation), with the state compared as a JSON value.
- beta -> alpha -> beta for an object born in v1beta1 loses exactly this, and nothing else:
  Sandbox: ``status.nodeName``; an absent, empty or unknown ``operatingMode`` becomes
  ``Running``; a status left empty is dropped.
  SandboxTemplate: an empty ``volumeClaimTemplatesPolicy`` becomes absent.
  SandboxWarmPool: an absent ``replicas`` becomes 1; ``status.observedGeneration`` is dropped.
  SandboxClaim: ``volumeClaimTemplates`` is dropped; ``warmPoolRef`` survives unless it is a
  shadow pool or ``""``/``"none"``/``"default"``, which are re-derived (the sandbox's pool for a
  warm-started claim, else ``shadow-pool-<name>``).
  All kinds gain the v1alpha1 state annotation (= the intermediate v1alpha1 object).
- alpha SandboxWarmPool without the (required) ``replicas`` comes back with ``replicas: 0``.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kube_agent_sandbox.api.constants import (
    ANNOTATION_V1ALPHA1_SANDBOX_STATE,
    ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE,
    ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE,
    ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE,
    ANNOTATION_V1BETA1_VCT_POLICY,
    SHADOW_POOL_PREFIX,
)
from kube_agent_sandbox.api.conversion import convert

Obj = dict[str, Any]

CORE_A = "agents.x-k8s.io/v1alpha1"
CORE_B = "agents.x-k8s.io/v1beta1"
EXT_A = "extensions.agents.x-k8s.io/v1alpha1"
EXT_B = "extensions.agents.x-k8s.io/v1beta1"

STATE = {
    "Sandbox": ANNOTATION_V1ALPHA1_SANDBOX_STATE,
    "SandboxClaim": ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE,
    "SandboxTemplate": ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE,
    "SandboxWarmPool": ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE,
}

# --- Building blocks ----------------------------------------------------------------------------

dns_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?", fullmatch=True)
text = st.text(max_size=12)
string_maps = st.dictionaries(
    st.from_regex(r"[a-z]([-a-z0-9./]{0,14}[a-z0-9])?", fullmatch=True), text, max_size=3
)
nonempty_string_maps = string_maps.filter(bool)
json_scalars = st.none() | st.booleans() | st.integers(-1000, 1000) | text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def optional_keys(draw: st.DrawFn, fields: dict[str, st.SearchStrategy[Any]]) -> Obj:
    """A dict with a random subset of ``fields``, each drawn from its strategy."""
    return {k: draw(s) for k, s in fields.items() if draw(st.booleans())}


@st.composite
def metadata(draw: st.DrawFn, name: str | None = None) -> Obj:
    meta: Obj = {"name": name if name is not None else draw(dns_names)}
    meta |= draw(
        optional_keys(
            {
                "namespace": dns_names,
                "labels": string_maps,
                "annotations": nonempty_string_maps,
                "uid": st.uuids().map(str),
                "resourceVersion": st.integers(1, 10**9).map(str),
                "generation": st.integers(1, 100),
            }
        )
    )
    return meta


conditions = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["Ready", "Suspended", "Finished"])},
        optional={"status": st.sampled_from(["True", "False"]), "reason": dns_names},
    ),
    max_size=2,
)
pod_template = st.fixed_dictionaries(
    {"spec": st.fixed_dictionaries({"containers": st.lists(st.just({"name": "c", "image": "i"}))})},
    optional={"metadata": optional_keys({"labels": string_maps, "annotations": string_maps})},
)
vcts = st.lists(
    st.fixed_dictionaries(
        {"spec": st.just({"accessModes": ["ReadWriteOnce"]})},
        optional={"metadata": optional_keys({"name": dns_names, "labels": string_maps})},
    ),
    max_size=2,
)
unknown_fields = optional_keys({"futureField": json_values})

# --- Objects ------------------------------------------------------------------------------------


@st.composite
def alpha_sandboxes(draw: st.DrawFn) -> Obj:
    spec: Obj = {"podTemplate": draw(pod_template)}
    spec |= draw(
        optional_keys(
            {
                "replicas": st.sampled_from([0, 1]),
                "volumeClaimTemplates": vcts,
                "service": st.booleans(),
                "shutdownTime": st.just("2026-12-01T00:00:00Z"),
                "shutdownPolicy": st.sampled_from(["Delete", "Retain"]),
            }
        )
    )
    spec |= draw(unknown_fields)
    obj: Obj = {"apiVersion": CORE_A, "kind": "Sandbox", "metadata": draw(metadata()), "spec": spec}
    if draw(st.booleans()):
        obj["status"] = draw(
            optional_keys(
                {
                    "replicas": st.sampled_from([0, 1]),
                    "serviceFQDN": text,
                    "service": dns_names,
                    "conditions": conditions,
                    "selector": text,
                    "podIPs": st.lists(st.ip_addresses(v=4).map(str), max_size=2),
                }
            )
        )
    return obj


@st.composite
def beta_sandboxes(draw: st.DrawFn) -> Obj:
    spec: Obj = {"podTemplate": draw(pod_template)}
    spec |= draw(
        optional_keys(
            {
                "operatingMode": st.sampled_from(["Running", "Suspended", "", "Paused"]),
                "volumeClaimTemplates": vcts,
                "service": st.booleans(),
                "shutdownPolicy": st.sampled_from(["Delete", "Retain"]),
            }
        )
    )
    spec |= draw(unknown_fields)
    obj: Obj = {"apiVersion": CORE_B, "kind": "Sandbox", "metadata": draw(metadata()), "spec": spec}
    if draw(st.booleans()):
        obj["status"] = draw(
            optional_keys(
                {
                    "nodeName": dns_names,
                    "service": dns_names,
                    "conditions": conditions,
                    "podIPs": st.lists(st.ip_addresses(v=4).map(str), max_size=2),
                }
            )
        )
    return obj


warm_pool_policies = st.sampled_from(["", "none", "default"]) | dns_names


@st.composite
def claim_status(draw: st.DrawFn, claim_name: str) -> Obj | None:
    if not draw(st.booleans()):
        return None
    sandbox_name = draw(
        st.sampled_from(["", claim_name, "nodash"])
        | st.builds(lambda pool, sfx: f"{pool}-{sfx}", dns_names, st.from_regex(r"[a-z0-9]{5}"))
        | dns_names
    )
    status: Obj = {"sandbox": {"name": sandbox_name}}
    if draw(st.booleans()):
        status["sandbox"]["podIPs"] = ["10.0.0.1"]
    if draw(st.booleans()):
        status["conditions"] = draw(conditions)
    return status


claim_common = {
    "lifecycle": optional_keys(
        {
            "shutdownTime": st.just("2026-12-01T00:00:00Z"),
            "ttlSecondsAfterFinished": st.integers(0, 10**6),
            "shutdownPolicy": st.sampled_from(["Delete", "DeleteForeground", "Retain"]),
        }
    ),
    "env": st.lists(
        st.fixed_dictionaries({"name": dns_names, "value": text}, optional={"containerName": text}),
        max_size=2,
    ),
    "additionalPodMetadata": optional_keys({"labels": string_maps, "annotations": string_maps}),
}


@st.composite
def alpha_claims(draw: st.DrawFn) -> Obj:
    meta = draw(metadata())
    spec: Obj = {"sandboxTemplateRef": {"name": draw(dns_names)}}
    spec |= draw(optional_keys({"warmpool": warm_pool_policies, **claim_common}))
    obj: Obj = {"apiVersion": EXT_A, "kind": "SandboxClaim", "metadata": meta, "spec": spec}
    status = draw(claim_status(meta["name"]))
    if status is not None:
        obj["status"] = status
    return obj


@st.composite
def beta_claims(draw: st.DrawFn) -> Obj:
    meta = draw(metadata())
    pool = draw(
        st.sampled_from(["", "none", "default", SHADOW_POOL_PREFIX])
        | dns_names
        | dns_names.map(lambda n: SHADOW_POOL_PREFIX + n)
    )
    spec: Obj = {"warmPoolRef": {"name": pool}}
    spec |= draw(optional_keys({"volumeClaimTemplates": vcts, **claim_common}))
    obj: Obj = {"apiVersion": EXT_B, "kind": "SandboxClaim", "metadata": meta, "spec": spec}
    status = draw(claim_status(meta["name"]))
    if status is not None:
        obj["status"] = status
    return obj


template_common = {
    "volumeClaimTemplates": vcts,
    "networkPolicy": optional_keys({"ingress": st.just([{}]), "egress": st.just([])}),
    "networkPolicyManagement": st.sampled_from(["Managed", "Unmanaged"]),
    "envVarsInjectionPolicy": st.sampled_from(["Allowed", "Overrides", "Disallowed"]),
    "service": st.booleans(),
}
vct_policies = st.sampled_from(["Disallowed", "Allowed", "Overrides"])


@st.composite
def alpha_templates(draw: st.DrawFn) -> Obj:
    meta = draw(metadata())
    if draw(st.booleans()):
        meta.setdefault("annotations", {})[ANNOTATION_V1BETA1_VCT_POLICY] = draw(vct_policies)
    spec: Obj = {"podTemplate": draw(pod_template)} | draw(optional_keys(template_common))
    return {"apiVersion": EXT_A, "kind": "SandboxTemplate", "metadata": meta, "spec": spec}


@st.composite
def beta_templates(draw: st.DrawFn) -> Obj:
    spec: Obj = {"podTemplate": draw(pod_template)}
    spec |= draw(
        optional_keys({**template_common, "volumeClaimTemplatesPolicy": vct_policies | st.just("")})
    )
    return {
        "apiVersion": EXT_B,
        "kind": "SandboxTemplate",
        "metadata": draw(metadata()),
        "spec": spec,
    }


@st.composite
def warm_pools(draw: st.DrawFn, api_version: str, replicas_required: bool) -> Obj:
    spec: Obj = {"sandboxTemplateRef": {"name": draw(dns_names)}}
    if replicas_required or draw(st.booleans()):
        spec["replicas"] = draw(st.integers(0, 2**31 - 1))
    spec |= draw(
        optional_keys(
            {"updateStrategy": st.fixed_dictionaries({"type": st.sampled_from(["Recreate"])})}
        )
    )
    obj: Obj = {
        "apiVersion": api_version,
        "kind": "SandboxWarmPool",
        "metadata": draw(metadata()),
        "spec": spec,
    }
    if draw(st.booleans()):
        status_fields = {
            "replicas": st.integers(0, 50),
            "readyReplicas": st.integers(0, 50),
            "selector": text,
        }
        if api_version == EXT_B:  # v1beta1 only (upstream v0.5.6)
            status_fields["observedGeneration"] = st.integers(0, 2**63 - 1)
        obj["status"] = draw(optional_keys(status_fields))
    return obj


alpha_objects = st.one_of(
    alpha_sandboxes(), alpha_claims(), alpha_templates(), warm_pools(EXT_A, True)
)

# --- Helpers ------------------------------------------------------------------------------------


def beta_version(obj: Obj) -> str:
    return CORE_B if obj["apiVersion"].startswith("agents.") else EXT_B


def alpha_version(obj: Obj) -> str:
    return CORE_A if obj["apiVersion"].startswith("agents.") else EXT_A


def pop_state(obj: Obj) -> Obj:
    """Remove the kind's state annotation from ``obj`` and return its parsed value."""
    annotations = obj["metadata"]["annotations"]
    state = json.loads(annotations.pop(STATE[obj["kind"]]))
    if not annotations:
        del obj["metadata"]["annotations"]
    assert isinstance(state, dict)
    return state


def copy(obj: Obj) -> Obj:
    result = json.loads(json.dumps(obj))
    assert isinstance(result, dict)
    return result


# --- alpha -> beta -> alpha ---------------------------------------------------------------------


@given(alpha_objects)
def test_alpha_beta_alpha_is_lossless(alpha: Obj) -> None:
    snapshot = copy(alpha)
    beta = convert(alpha, beta_version(alpha))
    assert alpha == snapshot, "convert must not mutate its input"
    assert beta["apiVersion"] == beta_version(alpha)
    assert json.loads(beta["metadata"]["annotations"][STATE[alpha["kind"]]]) == alpha

    assert convert(beta, alpha_version(alpha)) == alpha


@given(alpha_objects, text)
def test_an_old_state_annotation_is_replaced_not_nested(alpha: Obj, old_state: str) -> None:
    alpha_with_old = copy(alpha)
    alpha_with_old["metadata"].setdefault("annotations", {})[STATE[alpha["kind"]]] = old_state
    beta = convert(alpha_with_old, beta_version(alpha))
    assert json.loads(beta["metadata"]["annotations"][STATE[alpha["kind"]]]) == alpha
    assert convert(beta, alpha_version(alpha)) == alpha


@given(warm_pools(EXT_A, False))
def test_alpha_warm_pool_without_replicas_comes_back_with_zero(alpha: Obj) -> None:
    back = convert(convert(alpha, EXT_B), EXT_A)
    expected = copy(alpha)
    expected["spec"].setdefault("replicas", 0)
    assert back == expected


# --- beta -> alpha -> beta ----------------------------------------------------------------------


@given(alpha_objects)
def test_beta_alpha_beta_is_lossless_with_state(alpha: Obj) -> None:
    beta = convert(alpha, beta_version(alpha))
    again = convert(convert(beta, alpha_version(alpha)), beta_version(alpha))
    assert pop_state(again) == pop_state(beta)
    assert again == beta


def expected_sandbox(beta: Obj) -> Obj:
    expected = copy(beta)
    mode = expected["spec"].get("operatingMode")
    expected["spec"]["operatingMode"] = "Suspended" if mode == "Suspended" else "Running"
    status = expected.get("status")
    if status is not None:
        status.pop("nodeName", None)
        if not status:
            del expected["status"]
    return expected


def expected_claim(beta: Obj) -> Obj:
    expected = copy(beta)
    spec = expected["spec"]
    spec.pop("volumeClaimTemplates", None)
    pool = spec["warmPoolRef"]["name"]
    if pool.startswith(SHADOW_POOL_PREFIX) or pool in ("", "none", "default"):
        sandbox = expected.get("status", {}).get("sandbox", {}).get("name", "")
        if sandbox and sandbox != expected["metadata"]["name"]:
            pool = sandbox.rpartition("-")[0] if "-" in sandbox else sandbox
        elif not pool.startswith(SHADOW_POOL_PREFIX):
            pool = SHADOW_POOL_PREFIX + pool
    spec["warmPoolRef"] = {"name": pool}
    return expected


def expected_template(beta: Obj) -> Obj:
    expected = copy(beta)
    if expected["spec"].get("volumeClaimTemplatesPolicy") == "":
        del expected["spec"]["volumeClaimTemplatesPolicy"]
    return expected


def expected_warm_pool(beta: Obj) -> Obj:
    expected = copy(beta)
    expected["spec"].setdefault("replicas", 1)
    expected.get("status", {}).pop("observedGeneration", None)  # v1alpha1 has no such field
    return expected


def check_beta_round_trip(beta: Obj, expected: Obj) -> None:
    snapshot = copy(beta)
    alpha = convert(beta, alpha_version(beta))
    assert beta == snapshot, "convert must not mutate its input"
    assert alpha["apiVersion"] == alpha_version(beta)
    again = convert(alpha, beta_version(beta))
    assert pop_state(again) == alpha
    assert again == expected


@given(beta_sandboxes())
def test_beta_sandbox_round_trip_loses_only_documented_fields(beta: Obj) -> None:
    check_beta_round_trip(beta, expected_sandbox(beta))


@given(beta_claims())
def test_beta_claim_round_trip_loses_only_documented_fields(beta: Obj) -> None:
    check_beta_round_trip(beta, expected_claim(beta))


@given(beta_templates())
def test_beta_template_round_trip_loses_only_documented_fields(beta: Obj) -> None:
    check_beta_round_trip(beta, expected_template(beta))


@given(warm_pools(EXT_B, False))
def test_beta_warm_pool_round_trip_loses_only_documented_fields(beta: Obj) -> None:
    check_beta_round_trip(beta, expected_warm_pool(beta))
