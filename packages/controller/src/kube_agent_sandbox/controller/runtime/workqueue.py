"""The work queue between event handlers and reconcile workers (client-go semantics).

Events arrive far more often than reconciles are needed. The queue keeps each key at most once
(``dirty``), never hands a key to a second worker while one processes it (``processing``; a key
added meanwhile is re-queued when the first worker calls :meth:`WorkQueue.done`), delays re-adds
(:meth:`WorkQueue.add_after`) and retries through a rate limiter.

Difference from client-go: after :meth:`WorkQueue.shutdown` :meth:`WorkQueue.get` stops handing
out queued keys at once (a stopping controller takes no new work; level-triggered reconcilers
see the state again on the next start).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from kube_agent_sandbox.controller.runtime.metrics import RuntimeMetrics, default_metrics
from kube_agent_sandbox.controller.runtime.ratelimit import (
    Clock,
    RateLimiter,
    default_controller_rate_limiter,
)

T = TypeVar("T", bound=Hashable)


class QueueShutDown(Exception):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down."""


class WorkQueue(Generic[T]):
    """A deduplicating, rate-limited, delaying work queue for one controller.

    Args:
        name: the ``name`` label of the workqueue metrics.
        rate_limiter: retry policy; controller-runtime's default when omitted.
        metrics: metric set to record into; the process default when omitted.
        clock: monotonic clock for the duration metrics.
    """

    def __init__(
        self,
        name: str,
        *,
        rate_limiter: RateLimiter | None = None,
        metrics: RuntimeMetrics | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.name = name
        self.rate_limiter = rate_limiter or default_controller_rate_limiter()
        self._clock = clock
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: dict[T, float] = {}  # item -> start time
        self._added_at: dict[T, float] = {}
        self._waiting: dict[T, tuple[float, asyncio.TimerHandle]] = {}
        self._getters: deque[asyncio.Future[None]] = deque()
        self._idle: asyncio.Event | None = None
        self._shutting_down = False
        m = metrics or default_metrics()
        self._m_depth = m.workqueue_depth.labels(name=name)
        self._m_adds = m.workqueue_adds_total.labels(name=name)
        self._m_queue_dur = m.workqueue_queue_duration_seconds.labels(name=name)
        self._m_work_dur = m.workqueue_work_duration_seconds.labels(name=name)
        self._m_retries = m.workqueue_retries_total.labels(name=name)
        m.workqueue_longest_running_processor_seconds.labels(name=name).set_function(
            self._longest_running
        )
        m.workqueue_unfinished_work_seconds.labels(name=name).set_function(self._unfinished_work)

    # -- state ------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Number of keys waiting to be handed out (not counting delayed or processing ones)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        """True once :meth:`shutdown` was called."""
        return self._shutting_down

    def processing(self) -> frozenset[T]:
        """Keys handed to workers and not yet marked done."""
        return frozenset(self._processing)

    def delayed(self) -> frozenset[T]:
        """Keys waiting for an :meth:`add_after` delay to pass."""
        return frozenset(self._waiting)

    # -- adding -----------------------------------------------------------------------------
    def add(self, item: T) -> None:
        """Queue ``item`` unless already queued; if it is processing, queue it after done."""
        if self._shutting_down or item in self._dirty:
            return
        self._m_adds.inc()
        self._dirty.add(item)
        self._added_at.setdefault(item, self._clock())
        if item in self._processing:
            return
        self._queue.append(item)
        self._m_depth.set(len(self._queue))
        self._wake_one()

    def add_after(self, item: T, delay: float) -> None:
        """Queue ``item`` after ``delay`` seconds; an earlier pending deadline wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        existing = self._waiting.get(item)
        if existing is not None:
            if existing[0] <= deadline:
                return
            existing[1].cancel()
        handle = loop.call_at(deadline, self._fire_delayed, item)
        self._waiting[item] = (deadline, handle)

    def add_rate_limited(self, item: T, *, max_delay: float | None = None) -> None:
        """Queue ``item`` after the delay its rate limiter gives (counts a retry).

        Args:
            item: the key to retry.
            max_delay: seconds at most to wait, however long the limiter's delay (the limiter
                still counts the failure); None: the limiter's delay as is.
        """
        self._m_retries.inc()
        delay = self.rate_limiter.when(item)
        if max_delay is not None:
            delay = min(delay, max_delay)
        self.add_after(item, delay)

    def forget(self, item: T) -> None:
        """Reset the retry history of ``item`` (after a successful reconcile)."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """How many rate-limited retries ``item`` had since it was last forgotten."""
        return self.rate_limiter.num_requeues(item)

    def _fire_delayed(self, item: T) -> None:
        self._waiting.pop(item, None)
        self.add(item)

    # -- taking -----------------------------------------------------------------------------
    async def get(self) -> T:
        """Wait for a key and mark it processing; the caller must call :meth:`done`.

        Raises:
            QueueShutDown: when the queue is shut down.
        """
        while True:
            if self._shutting_down:
                raise QueueShutDown(self.name)
            if self._queue:
                break
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut in self._getters:
                    self._getters.remove(fut)
                elif fut.done() and not fut.cancelled():
                    self._wake_one()  # pass our wake-up on
                raise
        item = self._queue.popleft()
        self._m_depth.set(len(self._queue))
        now = self._clock()
        added = self._added_at.pop(item, None)
        if added is not None:
            self._m_queue_dur.observe(now - added)
        self._processing[item] = now
        self._dirty.discard(item)
        return item

    def done(self, item: T) -> None:
        """Mark ``item`` finished; if it was added while processing, queue it again."""
        started = self._processing.pop(item, None)
        if started is not None:
            self._m_work_dur.observe(self._clock() - started)
        if item in self._dirty and not self._shutting_down:
            self._queue.append(item)
            self._m_depth.set(len(self._queue))
            self._wake_one()
        if not self._processing and self._idle is not None:
            self._idle.set()

    def _wake_one(self) -> None:
        while self._getters:
            fut = self._getters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    # -- stopping ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Refuse new keys, drop delayed ones, and make every :meth:`get` raise."""
        self._shutting_down = True
        for _, handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
        while self._getters:
            fut = self._getters.popleft()
            if not fut.done():
                fut.set_result(None)

    async def shutdown_with_drain(self, grace: float | None = None) -> bool:
        """Shut down, then wait until no key is processing.

        Args:
            grace: seconds to wait at most; ``None`` waits forever.

        Returns:
            True if all processing finished in time.
        """
        self.shutdown()
        if not self._processing:
            return True
        self._idle = asyncio.Event()
        try:
            async with asyncio.timeout(grace):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    # -- metrics ----------------------------------------------------------------------------
    def _longest_running(self) -> float:
        if not self._processing:
            return 0.0
        return self._clock() - min(self._processing.values())

    def _unfinished_work(self) -> float:
        now = self._clock()
        return sum(now - started for started in self._processing.values())
