"""When a claim expires and what happens then (upstream's checkExpiration).

A claim expires at ``spec.lifecycle.shutdownTime``, or ``ttlSecondsAfterFinished`` after its
own ``Finished`` condition (mirrored from the Sandbox) turned True, whichever comes first.
Without ``spec.lifecycle`` it never expires. Also the strict RFC 3339 parser the claim code
uses for the timestamps it reads (lifecycle times, condition times, latency annotations):
Go's ``time.Parse(time.RFC3339Nano, …)`` rejects what Python's ``fromisoformat`` accepts
beyond RFC 3339 (dates alone, no zone, a space separator, basic format), so the grammar is
checked first.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, meta

log = logging.getLogger(__name__)

POLICY_RETAIN: Final = "Retain"
POLICY_DELETE: Final = "Delete"
POLICY_DELETE_FOREGROUND: Final = "DeleteForeground"
_POLICIES: Final = frozenset({POLICY_RETAIN, POLICY_DELETE, POLICY_DELETE_FOREGROUND})

# Go's RFC 3339 layout: upper-case T and Z, an optional fraction of any length after "." (or
# "," which Go's general parser also takes), ±hh:mm offsets.
_RFC3339: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:\d{2})",
    re.ASCII,
)


def parse_rfc3339(value: str) -> dt.datetime:
    """Parse an RFC 3339 timestamp as Go's ``time.Parse(time.RFC3339Nano, …)`` accepts it.

    Accepts ``Z`` or a ``±hh:mm`` offset (hours ≤ 23, minutes ≤ 59) and an optional fraction
    of any length after ``.`` or ``,`` (truncated to microseconds; Go keeps nanoseconds).

    Args:
        value: The text, e.g. ``2026-08-05T21:16:33.123456+00:00`` or ``2026-08-05T21:16:33Z``.

    Returns:
        An aware datetime.

    Raises:
        ValueError: not an RFC 3339 date-time, or an impossible date or time.
    """
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {value!r}")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    if zone == "Z":
        tz = dt.UTC
    else:
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            raise ValueError(f"time zone offset out of range: {value!r}")
        offset = dt.timedelta(hours=hours, minutes=minutes)
        tz = dt.timezone(-offset if zone[0] == "-" else offset)
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    return dt.datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tzinfo=tz
    )


def parse_time_or_none(value: Any) -> dt.datetime | None:
    """:func:`parse_rfc3339` of a field value; None when it is missing or not a valid time."""
    if not value or not isinstance(value, str):
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        return None


def _lifecycle(claim: Obj) -> dict[str, Any] | None:
    spec = claim.get("spec")
    life = spec.get("lifecycle") if isinstance(spec, dict) else None
    return life if isinstance(life, dict) else None


def finished_at(claim: Obj) -> dt.datetime | None:
    """When the claim's own ``Finished`` condition turned True (None if not True or no time)."""
    status = claim.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions or ():
        if isinstance(condition, dict) and condition.get("type") == c.CONDITION_FINISHED:
            if condition.get("status") != "True":
                return None
            return parse_time_or_none(condition.get("lastTransitionTime"))
    return None


def expire_at(claim: Obj) -> dt.datetime | None:
    """When the claim expires: the earliest of its shutdown time and finished time + TTL.

    The TTL counts only when ``ttlSecondsAfterFinished`` is set and the claim's ``Finished``
    condition is True with a transition time. An unparseable ``shutdownTime`` (the API server
    validates it, so only a hand-made object) is ignored with a warning.

    Returns:
        The expiry time, or None without ``spec.lifecycle`` or when neither rule applies.
    """
    life = _lifecycle(claim)
    if life is None:
        return None
    deadline: dt.datetime | None = None
    raw = life.get("shutdownTime")
    if raw:
        deadline = parse_time_or_none(raw)
        if deadline is None:
            m = meta(claim)
            log.warning(
                "ignoring unparseable spec.lifecycle.shutdownTime %r of claim %s/%s",
                raw,
                m.get("namespace"),
                m.get("name"),
            )
    ttl = life.get("ttlSecondsAfterFinished")
    if ttl is None or isinstance(ttl, bool) or not isinstance(ttl, int):
        return deadline
    finished = finished_at(claim)
    if finished is None:
        return deadline
    ttl_deadline = finished + dt.timedelta(seconds=ttl)
    if deadline is None or ttl_deadline < deadline:
        return ttl_deadline
    return deadline


def is_expired(claim: Obj, now: dt.datetime) -> bool:
    """True once ``now`` has reached :func:`expire_at` (``now`` must be timezone-aware)."""
    deadline = expire_at(claim)
    return deadline is not None and now >= deadline


def time_left(claim: Obj, now: dt.datetime) -> float | None:
    """Seconds until the claim expires; 0.0 once expired; None when it never expires."""
    deadline = expire_at(claim)
    if deadline is None:
        return None
    if now >= deadline:
        return 0.0
    return (deadline - now).total_seconds()


def shutdown_policy(claim: Obj) -> str:
    """``spec.lifecycle.shutdownPolicy``: ``Retain`` (default), ``Delete`` or ``DeleteForeground``.

    An unknown value (the CRD's enum prevents it) counts as ``Retain``, the safe choice.
    """
    life = _lifecycle(claim) or {}
    policy = life.get("shutdownPolicy")
    return policy if isinstance(policy, str) and policy in _POLICIES else POLICY_RETAIN
