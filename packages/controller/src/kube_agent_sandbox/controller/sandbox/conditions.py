"""The Sandbox's conditions: Suspended, Finished, PodScheduled and Ready, computed together.

Clients (the SDK, the claim controller, e2e tests comparing whole statuses) depend on the exact
type/status/reason/message strings, so the rules live here in pure functions that unit tests pin
down (upstream v0.5.6 controllers/sandbox_controller.go, computeReadyCondition and the
Suspended/Finished handling; the PodScheduled mirror is described in
docs/guides/upstream-differences.md). The generic condition list operations
(``set_status_condition`` and friends) are the runtime's. The four conditions are computed from
the same inputs, in upstream's order.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import (
    FALSE,
    TRUE,
    UNKNOWN,
    Obj,
    find_condition,
    is_owned_by,
    new_condition,
    remove_status_condition,
    set_status_condition,
)

_CONDITION_STATUSES = frozenset({TRUE, FALSE, UNKNOWN})
# metav1.Condition validation (the CRD's condition schema): a reason the API server accepts.
_REASON_PATTERN = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_REASON_MAX = 1024


def _generation(sandbox: Obj) -> int:
    return int(sandbox.get("metadata", {}).get("generation", 0) or 0)


def _suspended(sandbox: Obj) -> bool:
    return bool(sandbox.get("spec", {}).get("operatingMode") == c.OPERATING_MODE_SUSPENDED)


def compute_suspended(sandbox: Obj, pod: Obj | None, *, pod_failed: bool) -> Obj:
    """The Suspended condition (always present).

    Args:
        sandbox: The Sandbox.
        pod: The Pod found or created for it, if any.
        pod_failed: Whether reconciling the pod produced an error.

    Returns:
        The condition to set.
    """
    gen = _generation(sandbox)
    if not _suspended(sandbox):
        return new_condition(
            c.CONDITION_SUSPENDED,
            FALSE,
            c.REASON_NOT_SUSPENDED,
            "Sandbox is not suspended",
            observed_generation=gen,
        )
    if pod is None and pod_failed:
        return new_condition(
            c.CONDITION_SUSPENDED,
            UNKNOWN,
            c.REASON_POD_STATE_UNKNOWN,
            "Pod state is unknown. Sandbox suspension cannot be confirmed",
            observed_generation=gen,
        )
    if pod is None:
        return new_condition(
            c.CONDITION_SUSPENDED,
            TRUE,
            c.REASON_POD_TERMINATED,
            "Pod has been terminated. Sandbox is suspended",
            observed_generation=gen,
        )
    if not is_owned_by(pod, sandbox):
        return new_condition(
            c.CONDITION_SUSPENDED,
            FALSE,
            c.REASON_POD_NOT_OWNED,
            "Refused to delete pod because it is not owned by this sandbox",
            observed_generation=gen,
        )
    return new_condition(
        c.CONDITION_SUSPENDED,
        FALSE,
        c.REASON_POD_TERMINATING,
        "Pod is terminating. Sandbox is suspending",
        observed_generation=gen,
    )


def compute_finished(sandbox: Obj, pod: Obj | None) -> Obj | None:
    """The Finished condition: only for a terminal pod controlled by this Sandbox."""
    if pod is None or not is_owned_by(pod, sandbox):
        return None
    phase = pod.get("status", {}).get("phase")
    gen = _generation(sandbox)
    if phase == "Succeeded":
        return new_condition(
            c.CONDITION_FINISHED,
            TRUE,
            c.REASON_POD_SUCCEEDED,
            "Pod completed successfully",
            observed_generation=gen,
        )
    if phase == "Failed":
        return new_condition(
            c.CONDITION_FINISHED, TRUE, c.REASON_POD_FAILED, "Pod failed", observed_generation=gen
        )
    return None


def compute_pod_scheduled(sandbox: Obj, pod: Obj | None, *, pod_failed: bool) -> Obj | None:
    """The PodScheduled condition mirrored from the Sandbox's own Pod, or None to remove it.

    The Pod's status, reason and message are copied verbatim, so scheduler reasons such as
    ``Unschedulable`` or ``SchedulingGated`` pass through; an empty reason becomes
    ``PodScheduled`` (status True) or ``PodSchedulingUnknown`` (anything else). Without a Pod
    the condition is removed, unless the Pod could not be determined (an error), which is
    Unknown. A Pod the Sandbox does not control never leaks its state (upstream v0.5.6
    controllers/sandbox_controller.go, computePodScheduledCondition).

    Args:
        sandbox: The Sandbox.
        pod: The Pod found or created for it, if any.
        pod_failed: Whether reconciling the pod produced an error (MultiplePods included).

    Returns:
        The condition to set, or None when it must be removed.
    """
    gen = _generation(sandbox)
    if pod is None and pod_failed:
        return new_condition(
            c.CONDITION_POD_SCHEDULED,
            UNKNOWN,
            c.REASON_POD_SCHEDULING_UNKNOWN,
            "Pod state is unknown. Pod scheduling cannot be determined",
            observed_generation=gen,
        )
    if pod is None or not is_owned_by(pod, sandbox):
        return None
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if not isinstance(cond, dict) or cond.get("type") != "PodScheduled":
            continue
        status = str(cond.get("status") or "")
        if status not in _CONDITION_STATUSES:
            status = UNKNOWN  # the Sandbox CRD would refuse the whole status write
        reason = str(cond.get("reason") or "")
        if len(reason) > _REASON_MAX or not _REASON_PATTERN.match(reason):
            reason = c.REASON_POD_SCHEDULED if status == TRUE else c.REASON_POD_SCHEDULING_UNKNOWN
        message = str(cond.get("message") or "")  # new_condition bounds it
        return new_condition(
            c.CONDITION_POD_SCHEDULED, status, reason, message, observed_generation=gen
        )
    return new_condition(
        c.CONDITION_POD_SCHEDULED,
        UNKNOWN,
        c.REASON_POD_SCHEDULING_UNKNOWN,
        "Pod has not reported a PodScheduled condition yet",
        observed_generation=gen,
    )


def _pod_ready_message(pod: Obj | None) -> tuple[str, bool]:
    if pod is None:
        return "Pod does not exist", False
    status: dict[str, Any] = pod.get("status") or {}
    phase = status.get("phase") or ""
    message = f"Pod exists with phase: {phase}"
    if phase != "Running":
        return message, False
    message = "Pod is Running but not Ready"
    for cond in status.get("conditions") or ():
        if cond.get("type") != "Ready":
            continue
        if cond.get("status") == TRUE:
            if not status.get("podIPs"):
                return "Pod is Ready but has no podIPs yet", False
            return "Pod is Ready", True
        break
    return message, False


def compute_ready(
    sandbox: Obj,
    *,
    pod: Obj | None,
    service: Obj | None,
    error_text: str | None,
    multiple_pods_text: str | None = None,
    waiting: Obj | None = None,
) -> Obj:
    """The Ready condition, evaluated in upstream's order (upstream v0.5.6
    controllers/sandbox_controller.go, computeReadyCondition).

    Args:
        sandbox: The Sandbox.
        pod: The Pod found or created, if any.
        service: The Service found, created or adopted, if any.
        error_text: Joined text of every reconcile error, or None.
        multiple_pods_text: Set when several pods are controlled by the Sandbox.
        waiting: The Ready condition of a Sandbox whose Pod waits for its snapshot's image
            (fromsnapshot.py); it comes after errors and a suspend.

    Returns:
        The condition to set.
    """
    gen = _generation(sandbox)
    if multiple_pods_text is not None:
        return new_condition(
            c.CONDITION_READY,
            FALSE,
            c.REASON_MULTIPLE_PODS,
            multiple_pods_text,
            observed_generation=gen,
        )
    if error_text is not None:
        return new_condition(
            c.CONDITION_READY,
            FALSE,
            c.REASON_RECONCILER_ERROR,
            "Error seen: " + error_text,
            observed_generation=gen,
        )
    if _suspended(sandbox):
        message = "Sandbox is suspending" if pod is not None else "Sandbox is suspended"
        return new_condition(
            c.CONDITION_READY, FALSE, c.REASON_SANDBOX_SUSPENDED, message, observed_generation=gen
        )
    if waiting is not None:
        return waiting
    phase = (pod or {}).get("status", {}).get("phase")
    if pod is not None and phase == "Succeeded":
        return new_condition(
            c.CONDITION_READY,
            FALSE,
            c.REASON_POD_SUCCEEDED,
            "Pod completed successfully",
            observed_generation=gen,
        )
    if pod is not None and phase == "Failed":
        return new_condition(
            c.CONDITION_READY, FALSE, c.REASON_POD_FAILED, "Pod failed", observed_generation=gen
        )
    message, pod_ready = _pod_ready_message(pod)
    wanted = sandbox.get("spec", {}).get("service")
    required = bool(wanted) if wanted is not None else service is not None
    service_ready = True
    if required:
        service_ready = service is not None
        message += "; Service Exists" if service_ready else "; Service does not exist"
    if pod_ready and service_ready:
        return new_condition(
            c.CONDITION_READY, TRUE, c.REASON_DEPENDENCIES_READY, message, observed_generation=gen
        )
    return new_condition(
        c.CONDITION_READY, FALSE, c.REASON_DEPENDENCIES_NOT_READY, message, observed_generation=gen
    )


def expired_condition(sandbox: Obj) -> Obj:
    """Ready False / SandboxExpired."""
    return new_condition(
        c.CONDITION_READY,
        FALSE,
        c.REASON_SANDBOX_EXPIRED,
        "Sandbox has expired",
        observed_generation=_generation(sandbox),
    )


def set_expired(conditions: list[Obj], sandbox: Obj, *, now: dt.datetime) -> None:
    """Mark ``conditions`` expired: Ready False/SandboxExpired, PodScheduled removed.

    Expiry tears the Pod down without passing through the pod step, so a mirrored
    PodScheduled would go stale; Finished (and Suspended) are kept (see the PodScheduled row
    of docs/guides/upstream-differences.md).
    """
    set_status_condition(conditions, expired_condition(sandbox), now=now)
    remove_status_condition(conditions, c.CONDITION_POD_SCHEDULED)


def is_marked_expired(sandbox: Obj) -> bool:
    """True when the Ready condition already carries reason SandboxExpired."""
    ready = find_condition(sandbox.get("status", {}).get("conditions"), c.CONDITION_READY)
    return ready is not None and ready.get("reason") == c.REASON_SANDBOX_EXPIRED


def apply_conditions(
    sandbox: Obj,
    *,
    pod: Obj | None,
    pod_failed: bool,
    service: Obj | None,
    error_text: str | None,
    multiple_pods_text: str | None,
    now: dt.datetime,
    kept: Obj | None = None,
    waiting: Obj | None = None,
) -> None:
    """Compute Suspended, Finished and PodScheduled (both optional) and Ready; set them.

    The order of application fixes the list order of a fresh Sandbox ([Suspended,
    PodScheduled, Ready]); a Finished or PodScheduled condition that is not computed is
    removed. Suspended is never removed. ``kept`` replaces the Suspended condition while a
    suspended Sandbox's Pod is kept to save its state (keepstate.py); ``waiting`` replaces Ready
    while no Pod is made until the snapshot's image is resolved (fromsnapshot.py).
    """
    status = sandbox.setdefault("status", {})
    if status.get("conditions") is None:
        status["conditions"] = []
    conditions: list[Obj] = status["conditions"]
    suspended = kept if kept is not None else compute_suspended(sandbox, pod, pod_failed=pod_failed)
    set_status_condition(conditions, suspended, now=now)
    finished = compute_finished(sandbox, pod)
    if finished is not None:
        set_status_condition(conditions, finished, now=now)
    scheduled = compute_pod_scheduled(sandbox, pod, pod_failed=pod_failed)
    if scheduled is not None:
        set_status_condition(conditions, scheduled, now=now)
    ready = compute_ready(
        sandbox,
        pod=pod,
        service=service,
        error_text=error_text,
        multiple_pods_text=multiple_pods_text,
        waiting=waiting,
    )
    set_status_condition(conditions, ready, now=now)
    if finished is None:
        remove_status_condition(conditions, c.CONDITION_FINISHED)
    if scheduled is None:
        remove_status_condition(conditions, c.CONDITION_POD_SCHEDULED)
