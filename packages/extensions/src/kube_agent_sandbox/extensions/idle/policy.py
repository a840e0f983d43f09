"""Reading the idle policy annotations of a Sandbox into one checked value.

Every reader of the policy (the reconciler here, the gateway's tracker and resumer) must agree
on what a value means, and every bad value must come back as a clear problem rather than an
exception, so that one Sandbox with a typo never stops the controller.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.goduration import DurationError, parse_go_duration

__all__ = [
    "MIN_IDLE_TIMEOUT",
    "POLICY_KEYS",
    "IdlePolicy",
    "parse_policy",
    "parse_time",
]

MIN_IDLE_TIMEOUT: Final = 60.0
"""The shortest idle timeout accepted, in seconds (shorter ones are refused, not rounded)."""

POLICY_KEYS: Final = (
    c.ANNOTATION_IDLE_TIMEOUT,
    c.ANNOTATION_ON_IDLE,
    c.ANNOTATION_AUTO_RESUME,
    c.ANNOTATION_BUSY_CPU_MILLICORES,
)
"""The annotations a template or claim may default onto its Sandboxes (``pause-at`` is an
absolute time and ``suspended-by`` is the controller's own record, so neither is defaulted)."""


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """The idle policy of one Sandbox.

    Attributes:
        idle_timeout: Seconds without activity before acting; None when off.
        on_idle: ``Suspend`` or ``Delete``.
        auto_resume: Whether the gateway may resume it on traffic.
        busy_cpu_millicores: CPU usage above which an idle sandbox is kept; None for no veto.
        pause_at: When to suspend regardless of activity (E2B pause-on-timeout); None if unset.
        problems: One human-readable line per refused annotation value (those values are
            treated as absent).
    """

    idle_timeout: float | None = None
    on_idle: str = c.ON_IDLE_SUSPEND
    auto_resume: bool = False
    busy_cpu_millicores: int | None = None
    pause_at: dt.datetime | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def active(self) -> bool:
        """Whether anything is scheduled (an idle timeout or a pause-at deadline)."""
        return self.idle_timeout is not None or self.pause_at is not None


def parse_time(text: str) -> dt.datetime:
    """Parse an RFC 3339 time (``Z`` or an offset, optional fraction) into an aware datetime.

    Raises:
        ValueError: not RFC 3339, or no time zone.
    """
    value = dt.datetime.fromisoformat(text.strip())
    if value.tzinfo is None:
        raise ValueError("no time zone offset")
    return value.astimezone(dt.UTC)


def _idle_timeout(raw: str, *, minimum: float, problems: list[str]) -> float | None:
    try:
        seconds = parse_go_duration(raw.strip())
    except DurationError:
        problems.append(
            f"{c.ANNOTATION_IDLE_TIMEOUT}={raw!r} is not a Go duration (e.g. 15m, 1h30m)"
        )
        return None
    if seconds == 0:
        return None
    if seconds < 0:
        problems.append(f"{c.ANNOTATION_IDLE_TIMEOUT}={raw!r} is negative")
        return None
    if seconds < minimum:
        problems.append(
            f"{c.ANNOTATION_IDLE_TIMEOUT}={raw!r} is shorter than the minimum of {minimum:g}s"
        )
        return None
    return seconds


def parse_policy(
    annotations: Mapping[str, str] | None, *, minimum: float = MIN_IDLE_TIMEOUT
) -> IdlePolicy:
    """Read the policy annotations; bad values become ``problems`` and count as absent.

    Args:
        annotations: The Sandbox's annotations (after defaulting).
        minimum: The shortest idle timeout accepted, in seconds.

    Returns:
        The policy.
    """
    annotations = annotations or {}
    problems: list[str] = []
    idle: float | None = None
    raw = annotations.get(c.ANNOTATION_IDLE_TIMEOUT)
    if raw is not None and raw.strip():
        idle = _idle_timeout(raw, minimum=minimum, problems=problems)

    on_idle = c.ON_IDLE_SUSPEND
    raw = annotations.get(c.ANNOTATION_ON_IDLE)
    if raw is not None and raw.strip():
        if raw.strip() in (c.ON_IDLE_SUSPEND, c.ON_IDLE_DELETE):
            on_idle = raw.strip()
        else:
            problems.append(
                f"{c.ANNOTATION_ON_IDLE}={raw!r} is neither {c.ON_IDLE_SUSPEND} nor "
                f"{c.ON_IDLE_DELETE}; using {c.ON_IDLE_SUSPEND}"
            )

    busy: int | None = None
    raw = annotations.get(c.ANNOTATION_BUSY_CPU_MILLICORES)
    if raw is not None and raw.strip():
        text = raw.strip().removesuffix("m")
        if text.isdigit():
            busy = int(text)
        else:
            problems.append(
                f"{c.ANNOTATION_BUSY_CPU_MILLICORES}={raw!r} is not a whole number of millicores"
            )

    pause_at: dt.datetime | None = None
    raw = annotations.get(c.ANNOTATION_PAUSE_AT)
    if raw is not None and raw.strip():
        try:
            pause_at = parse_time(raw)
        except ValueError:
            problems.append(
                f"{c.ANNOTATION_PAUSE_AT}={raw!r} is not an RFC 3339 time "
                "(e.g. 2026-01-02T15:04:05Z)"
            )

    return IdlePolicy(
        idle_timeout=idle,
        on_idle=on_idle,
        auto_resume=annotations.get(c.ANNOTATION_AUTO_RESUME, "").strip() == "true",
        busy_cpu_millicores=busy,
        pause_at=pause_at,
        problems=tuple(problems),
    )
