"""SandboxTemplate conversion: v1beta1 ``volumeClaimTemplatesPolicy`` rides in an annotation.

v1alpha1 has no ``volumeClaimTemplatesPolicy``. beta->alpha moves a non-empty value into the
annotation ``api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy`` (and removes that
annotation when the value is empty); alpha->beta validates, consumes and removes it. Every other
field is copied. The v1alpha1 state annotation is written on alpha->beta and stripped, never
read, on beta->alpha (upstream v0.5.6
extensions/api/v1alpha1/sandboxtemplate_conversion.go).
"""

from __future__ import annotations

from kube_agent_sandbox.api.constants import (
    ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE,
    ANNOTATION_V1BETA1_VCT_POLICY,
    VOLUME_CLAIM_TEMPLATES_POLICIES,
)
from kube_agent_sandbox.api.conversion._common import (
    ConversionError,
    Obj,
    annotations_of,
    encode_state,
    ensure_dict,
    go_quote,
    opt_str,
    pop_annotation,
    set_annotation,
)


def to_hub(obj: Obj) -> Obj:
    """Convert a v1alpha1 SandboxTemplate (a private copy, changed in place) to v1beta1.

    Raises:
        ConversionError: the policy annotation holds a value outside the v1beta1 enum.
    """
    annotations = annotations_of(obj)
    policy = None if annotations is None else annotations.get(ANNOTATION_V1BETA1_VCT_POLICY)
    if policy is not None and policy not in VOLUME_CLAIM_TEMPLATES_POLICIES:
        raise ConversionError(
            f"invalid VolumeClaimTemplatesPolicy annotation value: {go_quote(policy)}"
        )
    state = encode_state(obj, ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE)  # annotation included
    spec = ensure_dict(obj, "spec", "spec")
    if policy is not None:
        spec["volumeClaimTemplatesPolicy"] = policy
        pop_annotation(obj, ANNOTATION_V1BETA1_VCT_POLICY)
    set_annotation(obj, ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE, state)
    return obj


def from_hub(obj: Obj) -> Obj:
    """Convert a v1beta1 SandboxTemplate (a private copy, changed in place) to v1alpha1."""
    spec = ensure_dict(obj, "spec", "spec")
    policy = opt_str(spec, "volumeClaimTemplatesPolicy", "spec.volumeClaimTemplatesPolicy")
    spec.pop("volumeClaimTemplatesPolicy", None)
    pop_annotation(obj, ANNOTATION_V1ALPHA1_SANDBOXTEMPLATE_STATE)
    if policy:
        set_annotation(obj, ANNOTATION_V1BETA1_VCT_POLICY, policy)
    else:
        pop_annotation(obj, ANNOTATION_V1BETA1_VCT_POLICY)
    return obj
