"""SandboxClaim conversion: v1alpha1 template + warm pool policy <-> v1beta1 ``warmPoolRef``.

alpha->beta derives ``spec.warmPoolRef.name`` (upstream v0.5.6
extensions/api/v1alpha1/sandboxclaim_conversion.go):

1. ``spec.warmpool`` names a specific pool (not ``""``, ``"none"``, ``"default"``) -> that name;
2. else, if the claim was warm-started (``status.sandbox.name`` set and different from the
   claim's name) -> the sandbox name without its random suffix (text after the last ``-``);
3. else -> ``shadow-pool-<sandboxTemplateRef.name>``.

beta->alpha maps ``shadow-pool-<t>`` back to template ``t`` with policy ``default`` and any
other pool name ``p`` to template ``p`` with policy ``p`` (lossy). When the v1alpha1 state
annotation is present (it is removed) and the hub's pool still "matches" the original, the
original ``sandboxTemplateRef`` and ``warmpool`` are restored; otherwise ``warmpool`` becomes
the hub's pool name and the original template reference is kept. ``volumeClaimTemplates`` does
not exist in v1alpha1 and is dropped on beta->alpha.
"""

from __future__ import annotations

from kube_agent_sandbox.api.constants import (
    ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE,
    SHADOW_POOL_PREFIX,
    WARM_POOL_POLICY_DEFAULT,
    WARM_POOL_POLICY_NONE,
)
from kube_agent_sandbox.api.conversion._common import (
    Obj,
    decode_state,
    encode_state,
    ensure_dict,
    opt_dict,
    opt_str,
    pop_annotation,
    set_annotation,
)

_KIND = "SandboxClaim"


def is_specific_pool(policy: str | None) -> bool:
    """True when a v1alpha1 ``warmpool`` value names a pool rather than a policy."""
    return policy not in (None, "", WARM_POOL_POLICY_NONE, WARM_POOL_POLICY_DEFAULT)


def strip_random_suffix(name: str) -> str:
    """Drop the text after the last ``-`` (the suffix ``generateName`` appended), if any."""
    head, sep, _ = name.rpartition("-")
    return head if sep else name


def _sandbox_name(obj: Obj) -> str:
    status = opt_dict(obj, "status", "status")
    sandbox = opt_dict(status, "sandbox", "status.sandbox") if status is not None else None
    return opt_str(sandbox, "name", "status.sandbox.name") or ""


def _template_name(spec: Obj | None, path: str) -> str:
    ref = opt_dict(spec, "sandboxTemplateRef", f"{path}.sandboxTemplateRef") if spec else None
    return opt_str(ref, "name", f"{path}.sandboxTemplateRef.name") or ""


def to_hub(obj: Obj) -> Obj:
    """Convert a v1alpha1 SandboxClaim (a private copy, changed in place) to v1beta1."""
    state = encode_state(obj, ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE)
    spec = ensure_dict(obj, "spec", "spec")
    template = _template_name(spec, "spec")
    policy = opt_str(spec, "warmpool", "spec.warmpool")
    metadata = opt_dict(obj, "metadata", "metadata")
    claim_name = opt_str(metadata, "name", "metadata.name") or ""
    sandbox_name = _sandbox_name(obj)

    if policy is not None and is_specific_pool(policy):
        pool = policy  # a specific pool
    elif sandbox_name and sandbox_name != claim_name:
        pool = strip_random_suffix(sandbox_name)  # warm-started from that pool
    else:
        pool = SHADOW_POOL_PREFIX + template
    spec.pop("sandboxTemplateRef", None)
    spec.pop("warmpool", None)
    spec["warmPoolRef"] = {"name": pool}
    set_annotation(obj, ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE, state)
    return obj


def _matches(actual: str, expected: str, sandbox_name: str) -> bool:
    if actual in (expected, SHADOW_POOL_PREFIX + expected):
        return True
    return bool(sandbox_name) and actual in (sandbox_name, strip_random_suffix(sandbox_name))


def from_hub(obj: Obj) -> Obj:
    """Convert a v1beta1 SandboxClaim (a private copy, changed in place) to v1alpha1."""
    spec = ensure_dict(obj, "spec", "spec")
    ref = opt_dict(spec, "warmPoolRef", "spec.warmPoolRef")
    pool = opt_str(ref, "name", "spec.warmPoolRef.name") or ""
    spec.pop("warmPoolRef", None)
    spec.pop("volumeClaimTemplates", None)  # v1beta1 only
    if pool.startswith(SHADOW_POOL_PREFIX):
        spec["sandboxTemplateRef"] = {"name": pool[len(SHADOW_POOL_PREFIX) :]}
        spec["warmpool"] = WARM_POOL_POLICY_DEFAULT
    else:
        spec["sandboxTemplateRef"] = {"name": pool}
        spec["warmpool"] = pool

    state_text = pop_annotation(obj, ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE)
    if state_text is None:
        return obj

    original = decode_state(state_text, _KIND)
    original_spec = opt_dict(original, "spec", "state spec")
    original_policy = opt_str(original_spec, "warmpool", "state spec.warmpool")
    original_template = _template_name(original_spec, "state spec")
    if original_policy is not None and is_specific_pool(original_policy):
        expected = original_policy
    else:
        expected = original_template

    if _matches(pool, expected, _sandbox_name(obj)):
        _restore(spec, original_spec, "warmpool")
    else:
        spec["warmpool"] = pool  # the pool was changed through v1beta1
    _restore(spec, original_spec, "sandboxTemplateRef")
    return obj


def _restore(spec: Obj, original_spec: Obj | None, key: str) -> None:
    """Copy ``key`` from the original spec, including its absence."""
    if original_spec is not None and original_spec.get(key) is not None:
        spec[key] = original_spec[key]
    else:
        spec.pop(key, None)
