"""The claim's status: its Ready and Finished conditions and ``status.sandbox`` (upstream's
computeReadyCondition).

A pure function of what the pass found (the Sandbox, an error, whether the claim expired), so
the whole table of situations is unit-tested without an API. Ready is either computed here or
forwarded from the Sandbox (status, reason, message and transition time), always with the
claim's own generation; Finished is the Sandbox's, verbatim.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import (
    Obj,
    create_merge_patch,
    find_condition,
    new_condition,
    remove_status_condition,
    semantic_equal,
    set_status_condition,
)
from kube_agent_sandbox.extensions.claim.errors import ClaimError

FALSE: Final = "False"
TRUE: Final = "True"
MSG_CLAIM_EXPIRED: Final = "Claim expired. Sandbox cleanup initiated."
MSG_SANDBOX_MISSING: Final = "Sandbox does not exist"
MSG_SANDBOX_EXPIRED: Final = "Underlying Sandbox resource has expired independently of the Claim."
MSG_SANDBOX_NOT_READY: Final = "Sandbox is not ready"


def generation(obj: Obj) -> int:
    """``metadata.generation`` (0 when absent)."""
    return int((obj.get("metadata") or {}).get("generation") or 0)


def conditions_of(obj: Obj | None) -> list[Obj]:
    """The ``status.conditions`` list of ``obj`` (empty when absent)."""
    if obj is None:
        return []
    return list((obj.get("status") or {}).get("conditions") or [])


def claim_expired_condition(claim: Obj) -> Obj:
    """Ready False / ClaimExpired."""
    return new_condition(
        c.CONDITION_READY,
        FALSE,
        c.REASON_CLAIM_EXPIRED,
        MSG_CLAIM_EXPIRED,
        observed_generation=generation(claim),
    )


def compute_ready(
    claim: Obj, *, sandbox: Obj | None, error: ClaimError | None, expired: bool
) -> Obj:
    """The claim's Ready condition, first matching row of the spec's table wins.

    Args:
        claim: The claim.
        sandbox: The Sandbox the pass found, adopted or created.
        error: The error of the pass, if any.
        expired: Whether the claim has expired.

    Returns:
        The condition (a forwarded one carries the Sandbox's lastTransitionTime).
    """
    gen = generation(claim)
    if error is not None:
        return new_condition(
            c.CONDITION_READY, FALSE, error.reason, error.ready_message, observed_generation=gen
        )
    if expired:
        return claim_expired_condition(claim)
    if sandbox is None:
        return new_condition(
            c.CONDITION_READY,
            FALSE,
            c.REASON_SANDBOX_MISSING,
            MSG_SANDBOX_MISSING,
            observed_generation=gen,
        )
    ready = find_condition(conditions_of(sandbox), c.CONDITION_READY)
    if ready is not None and ready.get("reason") == c.REASON_SANDBOX_EXPIRED:
        return new_condition(
            c.CONDITION_READY,
            FALSE,
            c.REASON_SANDBOX_EXPIRED,
            MSG_SANDBOX_EXPIRED,
            observed_generation=gen,
        )
    if ready is not None:
        forwarded = new_condition(
            c.CONDITION_READY,
            str(ready.get("status") or FALSE),
            str(ready.get("reason") or ""),
            str(ready.get("message") or ""),
            observed_generation=gen,
        )
        if ready.get("lastTransitionTime"):
            forwarded["lastTransitionTime"] = ready["lastTransitionTime"]
        return forwarded
    return new_condition(
        c.CONDITION_READY,
        FALSE,
        c.REASON_SANDBOX_NOT_READY,
        MSG_SANDBOX_NOT_READY,
        observed_generation=gen,
    )


def sandbox_ref(sandbox: Obj) -> Obj:
    """``status.sandbox`` for a found Sandbox: its name and pod IPs."""
    ref: Obj = {"name": (sandbox.get("metadata") or {}).get("name", "")}
    ips = (sandbox.get("status") or {}).get("podIPs")
    if ips:
        ref["podIPs"] = list(ips)
    return ref


def apply_status(
    claim: Obj,
    *,
    sandbox: Obj | None,
    error: ClaimError | None,
    expired: bool,
    now: dt.datetime,
) -> Obj:
    """Compute the claim's new status from its current one (``computeAndSetStatus``).

    Returns:
        The new status (the claim is not changed).
    """
    status: dict[str, Any] = dict(claim.get("status") or {})
    conditions = [dict(cond) for cond in status.get("conditions") or ()]
    set_status_condition(
        conditions, compute_ready(claim, sandbox=sandbox, error=error, expired=expired), now=now
    )
    if sandbox is not None:
        finished = find_condition(conditions_of(sandbox), c.CONDITION_FINISHED)
        if finished is not None:
            set_status_condition(conditions, dict(finished), now=now)
        else:
            remove_status_condition(conditions, c.CONDITION_FINISHED)
    elif not expired:
        remove_status_condition(conditions, c.CONDITION_FINISHED)
    status["conditions"] = conditions
    if sandbox is not None:
        status["sandbox"] = sandbox_ref(sandbox)
    elif error is None or not error.keeps_binding:
        status.pop("sandbox", None)
    return status


def _sorted(status: Obj) -> Obj:
    out = {k: v for k, v in status.items() if v not in (None, {}, [], "")}
    conditions = status.get("conditions")
    if conditions:
        out["conditions"] = sorted(conditions, key=lambda cond: str(cond.get("type", "")))
    else:
        out.pop("conditions", None)
    return out


def status_write(old: Obj | None, new: Obj, *, resource_version: str | None) -> Obj | None:
    """The merge patch of the status subresource, or None when nothing changed.

    Conditions are compared and written sorted by type (upstream's ``updateStatus``); the
    patch carries the claim's resourceVersion so a write based on a stale claim fails with
    409 instead of overwriting a newer status.
    """
    before, after = _sorted(old or {}), _sorted(new)
    if semantic_equal(before, after):
        return None
    diff = create_merge_patch(before, after)
    if not diff:
        return None
    if "conditions" in after:
        diff["conditions"] = after["conditions"]
    patch: Obj = {"status": diff}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch


def is_ready(status: Obj | None) -> bool:
    """True when the status has Ready=True."""
    cond = find_condition((status or {}).get("conditions"), c.CONDITION_READY)
    return cond is not None and cond.get("status") == TRUE
