"""Opt-in coalescing of recoverable Pod metadata writes (``--sandbox-write-behind-window``).

Upstream v0.5.5 (controllers/writebehind_requeue.go in v0.5.6): when the window is > 0, the
label/annotation merge patch of a Pod the Sandbox already controls is not sent at once. The pass
that first sees the drift skips the patch and asks to be requeued when the window ends; passes
in between skip it too; the first pass at or after the deadline sends one patch, recomputed from
the cache. The workqueue's de-duplication does the coalescing, so only *when* a drift was first
seen is kept here (no payload): losing it on a restart just starts the window again.

The window is capped at :data:`POD_PATCH_BOUND` (1 s): the same patch strips the
``cluster-autoscaler.kubernetes.io/safe-to-evict`` annotation after a warm adoption, and that
must not wait longer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

POD_PATCH_BOUND: Final = 1.0
"""Seconds: the longest a Pod metadata patch may be deferred, whatever the flag says."""

Key = tuple[str, str]


def effective_window(flag: float) -> float:
    """The deferral window actually used: ``min(flag, 1s)``; 0 (off) for a flag <= 0."""
    if flag <= 0:
        return 0.0
    return min(flag, POD_PATCH_BOUND)


class DeferralClock:
    """When the pending deferral of each Sandbox (namespace, name) was first observed.

    Args:
        now: Monotonic seconds (tests pass a settable clock).
    """

    def __init__(self, *, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._first: dict[Key, float] = {}

    def observe(self, key: Key, window: float) -> tuple[bool, float]:
        """Register (or re-read) the pending deferral of ``key``.

        Returns:
            ``(due, wait)``: whether the window has elapsed, else how long remains.
        """
        now = self._now()
        first = self._first.get(key)
        if first is None:
            self._first[key] = now
            return False, window
        deadline = first + window
        if now >= deadline:
            return True, 0.0
        return False, deadline - now

    def clear(self, key: Key) -> None:
        """Forget the pending deferral of ``key`` (nothing pending, or the Sandbox is gone)."""
        self._first.pop(key, None)

    def pending(self, key: Key) -> bool:
        """Whether a deferral of ``key`` is being timed."""
        return key in self._first

    def __len__(self) -> int:
        return len(self._first)


@dataclass
class WriteDeferral:
    """One reconcile pass's view of the clock for one Sandbox.

    Attributes:
        clock: The reconciler's clock.
        key: The Sandbox (namespace, name).
        window: The effective window in seconds (> 0).
        deferred: Whether a write was skipped in this pass.
        wait: The shortest remaining window of the skipped writes.
    """

    clock: DeferralClock
    key: Key
    window: float
    deferred: bool = False
    wait: float = 0.0

    def should_write(self) -> bool:
        """Whether the write must be sent now (window elapsed) or skipped (deferred)."""
        due, wait = self.clock.observe(self.key, self.window)
        if due:
            return True
        if not self.deferred or wait < self.wait:
            self.wait = wait
        self.deferred = True
        return False
