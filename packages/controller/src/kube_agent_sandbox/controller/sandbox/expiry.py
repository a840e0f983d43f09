"""When a Sandbox expires (``spec.shutdownTime``) and when to look again (upstream's
handleSandboxExpiry)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Final

from kube_agent_sandbox.controller.runtime import Obj

log = logging.getLogger(__name__)

MIN_EXPIRY_REQUEUE: Final = 2.0
"""Never requeue for expiry sooner than this (seconds), as upstream."""

IMMEDIATE_REQUEUE: Final = 0.001
"""Requeue delay after marking a Sandbox expired (pass 1 of 2), as upstream's 1 ms."""


def parse_time(value: str) -> dt.datetime:
    """Parse an RFC 3339 timestamp (``Z`` or offset, optional fraction) into an aware datetime."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = dt.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed


def shutdown_time(sandbox: Obj) -> dt.datetime | None:
    """``spec.shutdownTime`` as a datetime; None when unset or unparseable (logged)."""
    raw = sandbox.get("spec", {}).get("shutdownTime")
    if not raw:
        return None
    try:
        return parse_time(str(raw))
    except ValueError:
        meta = sandbox.get("metadata", {})
        log.warning(
            "ignoring unparseable spec.shutdownTime %r of sandbox %s/%s",
            raw,
            meta.get("namespace"),
            meta.get("name"),
        )
        return None


def check_expiry(sandbox: Obj, now: dt.datetime) -> tuple[bool, float | None]:
    """Whether the Sandbox has expired at ``now``, and if not, when to check again.

    Returns:
        ``(True, None)`` once ``now >= shutdownTime``; ``(False, max(remaining, 2 s))`` before
        it; ``(False, None)`` without a shutdownTime.
    """
    deadline = shutdown_time(sandbox)
    if deadline is None:
        return False, None
    if now >= deadline:
        return True, None
    remaining = (deadline - now).total_seconds()
    return False, max(remaining, MIN_EXPIRY_REQUEUE)
