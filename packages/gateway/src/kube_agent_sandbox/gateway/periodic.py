"""A coroutine the gateway runs every few seconds in the background (a manager Runnable)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Periodic:
    """Calls ``tick`` every ``interval`` seconds between :meth:`start` and :meth:`stop`.

    A failing tick is logged and the next one runs: one bad pass must not end the loop.

    Args:
        name: the task's name (and the log's).
        interval: seconds between the end of one tick and the start of the next.
        tick: what to run.
    """

    def __init__(self, name: str, interval: float, tick: Callable[[], Awaitable[object]]) -> None:
        self.name = name
        self.interval = interval
        self._tick = tick
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Tick every :attr:`interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self._tick()
            except Exception:
                log.exception("%s failed", self.name)

    async def start(self) -> None:
        """Start the loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the loop and wait for it (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
