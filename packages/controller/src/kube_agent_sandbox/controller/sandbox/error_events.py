"""Warning events when a Sandbox's Ready condition turns into an error.

A MultiplePods Warning is upstream's (once per episode: upstream v0.5.6
controllers/sandbox_controller.go, recordMultiplePodsEvent); the
ReconcilerError Warning is a deliberate addition listed in docs/guides/upstream-differences.md,
because ``kubectl describe`` showing the error is the quickest way to see why a Sandbox is not
Ready. One Warning per distinct error: a lagging cache that shows the old status again must
not repeat it.
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import EventRecorder, Obj, find_condition, truncate_note

_ERROR_REASONS: Final = (c.REASON_RECONCILER_ERROR, c.REASON_MULTIPLE_PODS)

Key = tuple[str, str]


class ErrorEvents:
    """Emits a Warning when Ready turns into (another) error, at most once per error.

    Args:
        recorder: Receives the events; None records nothing.
    """

    def __init__(self, recorder: EventRecorder | None) -> None:
        self._recorder = recorder
        # Last Warning emitted per Sandbox, so a lagging cache (old status read again) does
        # not repeat it. Dropped once the Sandbox is no longer in error or is gone.
        self._last: dict[Key, tuple[str, str]] = {}

    def forget(self, key: Key) -> None:
        """Drop what is remembered of a Sandbox (deleted, or terminating)."""
        self._last.pop(key, None)

    def record(self, key: Key, cached: Obj, old_status: Obj, sandbox: Obj) -> None:
        """Emit a Warning on ``cached`` if ``sandbox``'s Ready is a new error.

        Args:
            key: ``(namespace, name)`` of the Sandbox.
            cached: The Sandbox as read (the event's regarding object).
            old_status: The status at the start of the pass.
            sandbox: The working copy with the status computed by the pass.
        """
        new = find_condition(sandbox.get("status", {}).get("conditions"), c.CONDITION_READY)
        if new is None or new.get("reason") not in _ERROR_REASONS:
            self._last.pop(key, None)
            return
        current = (str(new.get("reason", "")), str(new.get("message", "")))
        old = find_condition(old_status.get("conditions"), c.CONDITION_READY)
        old_pair = (old.get("reason"), old.get("message")) if old is not None else None
        last = self._last.get(key)
        if current[0] == c.REASON_MULTIPLE_PODS:
            # Upstream: once per episode, i.e. only when Ready was not MultiplePods before
            # (a changed pod count is not a new episode).
            if (old_pair and old_pair[0] == current[0]) or (last and last[0] == current[0]):
                return
        elif old_pair == current or last == current:
            return
        if self._recorder is None:
            return
        self._last[key] = current
        self._recorder.event(
            cached,
            type_="Warning",
            reason=current[0],
            action=c.EVENT_ACTION_RECONCILING,
            note=truncate_note(current[1]),
        )
