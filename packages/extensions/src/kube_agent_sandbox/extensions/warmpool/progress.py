"""The not-progressing signal of a pool (upstream's setNotProgressing).

A pool whose members are unschedulable past the readiness grace period cannot reach its
target until capacity frees up; it says so once with a Warning event and once more (Normal)
when it recovers. State is per pool, in memory, emitted only on transitions.
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.controller.goduration import format_go_duration
from kube_agent_sandbox.controller.runtime import EventRecorder, Obj, Request

__all__ = [
    "ACTION_RECONCILING",
    "REASON_NOT_PROGRESSING",
    "REASON_PROGRESSING",
    "ProgressSignal",
    "not_progressing_message",
]

REASON_NOT_PROGRESSING: Final = "WarmPoolNotProgressing"
REASON_PROGRESSING: Final = "WarmPoolProgressing"
ACTION_RECONCILING: Final = "Reconciling"
PROGRESSING_MESSAGE: Final = "Warm pool is progressing again"


def not_progressing_message(unschedulable: int, desired: int, *, grace: float) -> str:
    """The note of the ``WarmPoolNotProgressing`` event, grace printed as a Go duration."""
    return (
        f"{unschedulable}/{desired} sandboxes are unschedulable past the "
        f"{format_go_duration(grace)} readiness grace period; holding them instead of "
        "replacing (replacements would be equally unschedulable)"
    )


class ProgressSignal:
    """Remembers which pools are not progressing and emits events on transitions.

    Args:
        recorder: Where events go (reporter ``sandboxwarmpool-controller``).
    """

    def __init__(self, recorder: EventRecorder) -> None:
        self._recorder = recorder
        self._stalled: set[Request] = set()

    def update(self, key: Request, pool: Obj, *, stalled: bool, message: str = "") -> None:
        """Set the state of ``key``; emit an event when it changes."""
        if stalled:
            if key not in self._stalled:
                self._stalled.add(key)
                self._recorder.event(
                    pool,
                    type_="Warning",
                    reason=REASON_NOT_PROGRESSING,
                    action=ACTION_RECONCILING,
                    note=message,
                )
        elif key in self._stalled:
            self._stalled.discard(key)
            self._recorder.event(
                pool,
                type_="Normal",
                reason=REASON_PROGRESSING,
                action=ACTION_RECONCILING,
                note=PROGRESSING_MESSAGE,
            )

    def is_stalled(self, key: Request) -> bool:
        """True while ``key`` is in the not-progressing state."""
        return key in self._stalled

    def forget(self, key: Request) -> None:
        """Drop the state of a deleted pool."""
        self._stalled.discard(key)
