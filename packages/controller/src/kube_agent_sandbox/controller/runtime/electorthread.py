"""Leader election on a thread and event loop of its own, so reconcile load cannot starve it.

A leader must renew its Lease within the renew deadline or step down. Renewing on the event
loop that also runs a hundred reconcile workers means each renewal waits behind whatever
those workers queued: on a loaded machine (the failover test saw it with a 10 s deadline) the
leader misses its deadline, exits, and the next leader does the same. client-go renews in a
goroutine of its own, which Go's scheduler runs regardless; here the elector gets a thread,
with its own loop and its own API client (created by a factory inside that loop, as aiohttp
sessions belong to the loop that made them). The GIL hands it a turn every few milliseconds
however busy the main loop is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from kube_agent_sandbox.controller.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElector,
    run_elected,
)
from kube_agent_sandbox.controller.runtime.metrics import RuntimeMetrics
from kube_agent_sandbox.controller.runtime.types import Client

T = TypeVar("T")

ClientFactory = Callable[[], Client]
"""Builds the elector's API client; called on the elector's thread."""


class ElectorThread:
    """A :class:`LeaderElector` driven on its own thread; same coroutine API, awaited anywhere.

    Args:
        client_factory: builds the elector's client on its thread (closed there by
            :meth:`close` when it has an async ``close``).
        config: lease location and timing (validated here).
        metrics: metric set for ``leader_election_master_status``.

    Raises:
        ValueError: for an invalid ``config``.
    """

    def __init__(
        self,
        client_factory: ClientFactory,
        config: LeaderElectionConfig,
        *,
        metrics: RuntimeMetrics | None = None,
    ) -> None:
        config.validate()
        self.config = config
        self._factory = client_factory
        self._metrics = metrics
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="leader-election", daemon=True
        )
        self._thread.start()
        self._client: Client | None = None
        self._elector: LeaderElector = self._call_sync(self._make())

    async def _make(self) -> LeaderElector:
        self._client = self._factory()
        return LeaderElector(self._client, self.config, metrics=self._metrics)

    def _call_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        # cancelling the awaiting task cancels the coroutine on the elector's loop too
        return await asyncio.wrap_future(future)

    @property
    def is_leader(self) -> bool:
        """True while this candidate holds the Lease."""
        return self._elector.is_leader

    async def acquire(self) -> None:
        """See :meth:`LeaderElector.acquire`."""
        await self._call(self._elector.acquire())

    async def renew_until_lost(self) -> None:
        """See :meth:`LeaderElector.renew_until_lost`."""
        await self._call(self._elector.renew_until_lost())

    async def release(self) -> bool:
        """See :meth:`LeaderElector.release`."""
        return await self._call(self._elector.release())

    async def run(self, lead: Callable[[], Awaitable[object]]) -> None:
        """See :meth:`LeaderElector.run`: ``lead()`` runs on the caller's loop."""
        await run_elected(self, lead)

    async def close(self) -> None:
        """Close the elector's client and stop its thread (idempotent)."""
        if not self._thread.is_alive():
            return
        close = getattr(self._client, "close", None)
        if close is not None:
            await self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join, 10)
        if not self._thread.is_alive():
            self._loop.close()
