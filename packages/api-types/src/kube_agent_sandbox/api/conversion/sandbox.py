"""Sandbox conversion: v1alpha1 ``spec.replicas`` (0 or 1) <-> v1beta1 ``spec.operatingMode``.

Rules (upstream v0.5.6 api/v1alpha1/sandbox_conversion.go): alpha->beta maps ``replicas == 0``
to ``Suspended`` and anything else (absent or 1) to ``Running``, drops ``status.replicas`` and
leaves ``status.nodeName`` empty, and stores the whole v1alpha1 object in the state annotation.
beta->alpha maps ``Suspended`` to ``replicas: 0`` and everything else to 1, sets
``status.replicas`` to the same best-effort value, and when the state annotation is present (it
is removed) restores ``spec.replicas`` and ``status.replicas`` from it.
"""

from __future__ import annotations

from kube_agent_sandbox.api.constants import (
    ANNOTATION_V1ALPHA1_SANDBOX_STATE,
    OPERATING_MODE_RUNNING,
    OPERATING_MODE_SUSPENDED,
)
from kube_agent_sandbox.api.conversion._common import (
    Obj,
    decode_state,
    encode_state,
    ensure_dict,
    opt_dict,
    opt_int32,
    opt_str,
    pop_annotation,
    set_annotation,
)

_KIND = "Sandbox"


def to_hub(obj: Obj) -> Obj:
    """Convert a v1alpha1 Sandbox (a private copy, changed in place) to v1beta1."""
    state = encode_state(obj, ANNOTATION_V1ALPHA1_SANDBOX_STATE)
    spec = ensure_dict(obj, "spec", "spec")
    replicas = opt_int32(spec, "replicas", "spec.replicas")
    spec.pop("replicas", None)
    spec["operatingMode"] = OPERATING_MODE_SUSPENDED if replicas == 0 else OPERATING_MODE_RUNNING

    status = opt_dict(obj, "status", "status")
    if status is not None:
        opt_int32(status, "replicas", "status.replicas")
        status.pop("replicas", None)
        status.pop("nodeName", None)  # new in v1beta1: always empty after conversion
        if not status:
            del obj["status"]  # Go omits a zero-valued status
    elif "status" in obj:
        del obj["status"]

    set_annotation(obj, ANNOTATION_V1ALPHA1_SANDBOX_STATE, state)
    return obj


def from_hub(obj: Obj) -> Obj:
    """Convert a v1beta1 Sandbox (a private copy, changed in place) to v1alpha1."""
    spec = ensure_dict(obj, "spec", "spec")
    mode = opt_str(spec, "operatingMode", "spec.operatingMode") or ""
    spec.pop("operatingMode", None)
    best_effort = 0 if mode == OPERATING_MODE_SUSPENDED else 1
    spec["replicas"] = best_effort

    status = opt_dict(obj, "status", "status")
    status = {} if status is None else status
    status.pop("nodeName", None)
    obj.pop("status", None)

    state_text = pop_annotation(obj, ANNOTATION_V1ALPHA1_SANDBOX_STATE)
    if state_text is None:
        status["replicas"] = best_effort
        if status != {"replicas": 0}:  # Go omits an all-zero status (omitzero)
            obj["status"] = status
        return obj

    original = decode_state(state_text, _KIND)
    original_spec = opt_dict(original, "spec", "state spec")
    original_replicas = opt_int32(original_spec, "replicas", "state spec.replicas")
    if mode == OPERATING_MODE_SUSPENDED:
        spec["replicas"] = 0
    elif mode == OPERATING_MODE_RUNNING:
        if original_replicas is None:
            del spec["replicas"]  # the original left it unset (the CRD default applies)
        elif original_replicas != 0:
            spec["replicas"] = original_replicas
        else:
            spec["replicas"] = 1
    # Any other mode (e.g. empty) keeps the best-effort value, as upstream's switch does.

    original_status = opt_dict(original, "status", "state status")
    restored = opt_int32(original_status, "replicas", "state status.replicas") or 0
    if restored != 0 or (original_status is not None and "replicas" in original_status):
        status["replicas"] = restored
    if status or "status" in original:
        obj["status"] = status
    return obj
