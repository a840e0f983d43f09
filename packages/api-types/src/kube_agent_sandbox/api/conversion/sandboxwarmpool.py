"""SandboxWarmPool conversion: ``spec.replicas`` (required in v1alpha1) and the v1beta1-only
``status.observedGeneration``.

alpha->beta copies ``replicas`` (an absent value is Go's zero, 0) and records the v1alpha1 state
annotation; beta->alpha maps an absent ``replicas`` to 1 and strips the state annotation without
reading it (upstream v0.5.6 extensions/api/v1alpha1/sandboxwarmpool_conversion.go).
``updateStrategy``, ``sandboxTemplateRef`` and the status counts and selector are copied
unchanged. ``status.observedGeneration`` (upstream v0.5.6
extensions/api/v1beta1/sandboxwarmpool_types.go) exists only in v1beta1: it is dropped when read
as v1alpha1, and a status written through v1alpha1 carries none (0, omitted).
"""

from __future__ import annotations

from kube_agent_sandbox.api.constants import ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE
from kube_agent_sandbox.api.conversion._common import (
    Obj,
    encode_state,
    ensure_dict,
    opt_dict,
    opt_int32,
    pop_annotation,
    set_annotation,
)


def to_hub(obj: Obj) -> Obj:
    """Convert a v1alpha1 SandboxWarmPool (a private copy, changed in place) to v1beta1."""
    state = encode_state(obj, ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE)
    spec = ensure_dict(obj, "spec", "spec")
    spec["replicas"] = opt_int32(spec, "replicas", "spec.replicas") or 0
    _drop_observed_generation(obj)
    set_annotation(obj, ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE, state)
    return obj


def from_hub(obj: Obj) -> Obj:
    """Convert a v1beta1 SandboxWarmPool (a private copy, changed in place) to v1alpha1."""
    spec = ensure_dict(obj, "spec", "spec")
    replicas = opt_int32(spec, "replicas", "spec.replicas")
    spec["replicas"] = 1 if replicas is None else replicas
    _drop_observed_generation(obj)
    pop_annotation(obj, ANNOTATION_V1ALPHA1_SANDBOXWARMPOOL_STATE)
    return obj


def _drop_observed_generation(obj: Obj) -> None:
    """Remove ``status.observedGeneration``; v1alpha1 has no such field."""
    status = opt_dict(obj, "status", "status")
    if status is not None:
        status.pop("observedGeneration", None)
