"""Status conditions as apimachinery's ``meta`` package handles them, on plain JSON dicts.

Clients (the SDK, the claim controller, e2e tests comparing whole statuses) depend on the list
order (order of first insertion) and on ``lastTransitionTime`` moving only when a status flips,
as apimachinery's ``meta.SetStatusCondition`` does; every controller sets its conditions here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Final

from kube_agent_sandbox.controller.runtime.types import Obj

TRUE: Final = "True"
FALSE: Final = "False"
UNKNOWN: Final = "Unknown"

MESSAGE_LIMIT: Final = 32768
"""metav1.Condition's message limit; the API server refuses the whole status write above it."""


def bounded_message(message: str) -> str:
    """``message`` cut to :data:`MESSAGE_LIMIT` UTF-8 bytes, ending in ``...`` when it was cut.

    Messages often quote an API error, and an error about an oversized field quotes the field:
    without the bound, one hostile annotation would keep a status from ever being written.
    Bytes bound both readings of the limit (characters and bytes).
    """
    encoded = message.encode()
    if len(encoded) <= MESSAGE_LIMIT:
        return message
    return encoded[: MESSAGE_LIMIT - 3].decode(errors="ignore") + "..."


def format_time(moment: dt.datetime) -> str:
    """Render a time the way metav1.Time serialises: RFC 3339, UTC, whole seconds."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_condition(
    type_: str, status: str, reason: str, message: str, *, observed_generation: int
) -> Obj:
    """Build a metav1.Condition dict without lastTransitionTime (SetStatusCondition adds it)."""
    cond: Obj = {"type": type_, "status": status}
    if observed_generation:
        cond["observedGeneration"] = observed_generation
    cond["reason"] = reason
    cond["message"] = bounded_message(message)
    return cond


def find_condition(conditions: Sequence[Obj] | None, type_: str) -> Obj | None:
    """Return the condition of the given type, or None."""
    for cond in conditions or ():
        if cond.get("type") == type_:
            return cond
    return None


def is_condition_true(conditions: Sequence[Obj] | None, type_: str) -> bool:
    """True when a condition of this type exists with status True."""
    cond = find_condition(conditions, type_)
    return cond is not None and cond.get("status") == TRUE


def set_status_condition(conditions: list[Obj], new: Obj, *, now: dt.datetime) -> bool:
    """Set ``new`` in ``conditions`` exactly like apimachinery ``meta.SetStatusCondition``.

    A condition of a new type is appended at the end (lastTransitionTime = ``new``'s if set,
    else ``now``). An existing condition is updated in place; its lastTransitionTime changes
    only when the status changes. Reason, message and observedGeneration are overwritten.

    Args:
        conditions: The list to update in place.
        new: The condition to set (lastTransitionTime optional).
        now: The time to stamp on a transition when ``new`` carries none.

    Returns:
        Whether anything changed.
    """
    existing = find_condition(conditions, new["type"])
    ltt = new.get("lastTransitionTime") or format_time(now)
    if existing is None:
        appended = dict(new)
        appended["lastTransitionTime"] = ltt
        conditions.append(appended)
        return True
    changed = False
    if existing.get("status") != new.get("status"):
        existing["status"] = new.get("status")
        existing["lastTransitionTime"] = ltt
        changed = True
    for key in ("reason", "message"):
        if existing.get(key, "") != new.get(key, ""):
            existing[key] = new.get(key, "")
            changed = True
    new_gen = new.get("observedGeneration", 0) or 0
    if (existing.get("observedGeneration", 0) or 0) != new_gen:
        if new_gen:
            existing["observedGeneration"] = new_gen
        else:
            existing.pop("observedGeneration", None)
        changed = True
    return changed


def remove_status_condition(conditions: list[Obj], type_: str) -> bool:
    """Remove the condition of this type; return whether one was removed."""
    before = len(conditions)
    conditions[:] = [cond for cond in conditions if cond.get("type") != type_]
    return len(conditions) != before
