"""Follows every Sandbox (or claim) of a namespace through a watch and timestamps what the
benchmark waits for: Ready=True, Suspended=True, deletion.

One LIST and then one WATCH (resumed after the server ends it, re-listed after 410 Gone) feed
per-name state; counters make "all N are Ready" an O(1) check, and per-name marks record when a
state was first seen after :meth:`SandboxTracker.reset`, so latencies are measured from the
moment the benchmark acted to the event that showed the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiClient, ApiError, Resource

log = logging.getLogger(__name__)


def condition_true(obj: dict[str, Any], type_: str) -> bool:
    """Whether ``status.conditions`` has ``type_`` with status True."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return bool(cond.get("status") == "True")
    return False


@dataclass
class _State:
    ready: bool = False
    suspended: bool = False
    marks: dict[str, float] = field(default_factory=dict)


class SandboxTracker:
    """Watch-fed view of the Sandboxes (or other objects with conditions) of one namespace.

    Args:
        client: API client (admin).
        namespace: Namespace to follow.
        resource: What to follow (Sandboxes by default; SandboxClaims have a Ready too).
    """

    def __init__(
        self, client: ApiClient, namespace: str, *, resource: Resource = SANDBOXES
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.resource = resource
        self.objects: dict[str, dict[str, Any]] = {}
        self.states: dict[str, _State] = {}
        self.ready_count = 0
        self.suspended_count = 0
        self.events = 0
        self.deleted_at: dict[str, float] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rv: str | None = None

    @property
    def present(self) -> int:
        """Sandboxes that exist now."""
        return len(self.states)

    async def start(self) -> None:
        """List, then follow the watch in a background task."""
        await self._relist()
        self._task = asyncio.create_task(self._run(), name="sandbox-tracker")

    async def stop(self) -> None:
        """Stop following."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def reset(self, names: list[str], *marks: str) -> None:
        """Forget the given marks of these Sandboxes, so they are recorded afresh."""
        for name in names:
            state = self.states.get(name)
            if state is not None:
                for mark in marks:
                    state.marks.pop(mark, None)

    def mark(self, name: str, mark: str) -> float | None:
        """When ``mark`` (``ready``/``suspended``) was first seen since the last reset."""
        state = self.states.get(name)
        return state.marks.get(mark) if state is not None else None

    async def wait_marks(self, names: list[str], mark: str, *, within: float) -> bool:
        """Wait until every one of ``names`` has ``mark``; False on timeout."""
        return await self.wait_for(
            lambda: all(self.mark(name, mark) is not None for name in names), within=within
        )

    async def wait_for(self, predicate: Callable[[], bool], *, within: float) -> bool:
        """Wait until ``predicate()`` holds after some event; False on timeout."""
        deadline = time.monotonic() + within
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._task is not None and self._task.done():
                self._task.result()  # re-raise what stopped the watch
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 5.0)):
                    await self._changed.wait()
        return True

    # -- internals --------------------------------------------------------------------------
    def _apply(self, obj: dict[str, Any], *, deleted: bool = False) -> None:
        now = time.monotonic()
        name = obj["metadata"]["name"]
        self.events += 1
        state = self.states.get(name)
        if deleted:
            if state is not None:
                self.ready_count -= state.ready
                self.suspended_count -= state.suspended
                del self.states[name]
            self.objects.pop(name, None)
            self.deleted_at[name] = now
        else:
            if state is None:
                state = self.states[name] = _State()
            self.objects[name] = obj
            ready, suspended = condition_true(obj, "Ready"), condition_true(obj, "Suspended")
            self.ready_count += ready - state.ready
            self.suspended_count += suspended - state.suspended
            state.ready, state.suspended = ready, suspended
            if ready:
                state.marks.setdefault("ready", now)
            if suspended:
                state.marks.setdefault("suspended", now)
        self._changed.set()

    async def _relist(self) -> None:
        seen: set[str] = set()
        cont: str | None = None
        while True:
            page = await self.client.list(
                self.resource, self.namespace, limit=500, continue_token=cont
            )
            for obj in page.get("items") or ():
                seen.add(obj["metadata"]["name"])
                self._apply(obj)
            cont = (page.get("metadata") or {}).get("continue") or None
            if not cont:
                self._rv = str((page.get("metadata") or {}).get("resourceVersion") or "")
                break
        for name in [n for n in self.states if n not in seen]:
            self._apply({"metadata": {"name": name}}, deleted=True)

    async def _run(self) -> None:
        while True:
            try:
                async for event in self.client.watch(
                    self.resource,
                    self.namespace,
                    resource_version=self._rv,
                    allow_bookmarks=True,
                    timeout_seconds=300,
                ):
                    rv = (event.object.get("metadata") or {}).get("resourceVersion")
                    if event.type != "BOOKMARK":
                        self._apply(event.object, deleted=event.type == "DELETED")
                    if rv:
                        self._rv = str(rv)
            except ApiError as err:
                if not err.gone:
                    raise
                log.info("tracker: resourceVersion expired, listing again")
                await self._relist()
            except (TimeoutError, OSError, aiohttp.ClientError) as err:
                log.warning("tracker: watch dropped (%s), resuming", err)
                await asyncio.sleep(0.5)
