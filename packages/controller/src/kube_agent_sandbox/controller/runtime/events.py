"""Kubernetes Events (``events.k8s.io/v1``) emitted in the background, best effort.

Reconcilers record Events without awaiting anything: :meth:`Recorder.event` only queues. A
background task writes them. Repeats of the same event about the same object within six minutes
do not create new objects: they raise the Event's ``series.count``, written at most every
``flush_interval`` seconds (what client-go's events broadcaster does). A full queue drops events
and every write error is logged, never raised: Events are informative, not state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kube_agent_sandbox.api.rest import EVENTS
from kube_agent_sandbox.controller.runtime.leaderelection import micro_time
from kube_agent_sandbox.controller.runtime.objects import meta
from kube_agent_sandbox.controller.runtime.types import ApiError, Client, Obj

logger = logging.getLogger(__name__)


SERIES_WINDOW = 360.0
"""Seconds during which a repeated event joins the existing Event's series (client-go: 6 min)."""

NOTE_LIMIT: Final = 1024
"""events.k8s.io/v1 rejects notes longer than 1 kB."""
_MAX_FIELD = 128

_SeriesKey = tuple[str, str, str, str, str, str, str, str]


def truncate_note(note: str) -> str:
    """The note cut to :data:`NOTE_LIMIT` characters, ending in ``...`` when it was cut."""
    if len(note) <= NOTE_LIMIT:
        return note
    return note[: NOTE_LIMIT - 3] + "..."


@dataclass
class _Series:
    name: str
    namespace: str
    count: int
    first_at: float
    last_wall: float
    dirty: bool = False


@dataclass
class _Pending:
    key: _SeriesKey
    body: Obj


class EventSink:
    """Writes Events for every :class:`Recorder` of a process.

    Args:
        client: API client used for create/patch.
        hostname: used in ``reportingInstance``.
        max_queue: events waiting beyond this are dropped.
        flush_interval: seconds between series count updates.
        max_series: how many recent (object, reason, note...) series are remembered.
        clock: wall clock.
    """

    def __init__(
        self,
        client: Client,
        *,
        hostname: str | None = None,
        max_queue: int = 1000,
        flush_interval: float = 30.0,
        max_series: int = 4096,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.hostname = hostname or socket.gethostname()
        self.max_queue = max_queue
        self.flush_interval = flush_interval
        self.max_series = max_series
        self._clock = clock
        self._queue: deque[_Pending] = deque()
        self._series: OrderedDict[_SeriesKey, _Series] = OrderedDict()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.dropped = 0
        """Events dropped because the queue was full."""

    def recorder(self, reporting_controller: str) -> Recorder:
        """A recorder reporting as ``reporting_controller`` (e.g. ``sandboxclaim-controller``)."""
        return Recorder(self, reporting_controller)

    def submit(
        self, obj: Obj, *, controller: str, type_: str, reason: str, action: str, note: str
    ) -> None:
        """Queue an event about ``obj`` (never raises)."""
        try:
            m = meta(obj)
            regarding = {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": m.get("name", ""),
                "namespace": m.get("namespace", ""),
                "uid": m.get("uid", ""),
                "resourceVersion": m.get("resourceVersion", ""),
            }
            key: _SeriesKey = (
                str(regarding["kind"]),
                str(regarding["namespace"]),
                str(regarding["name"]),
                str(regarding["uid"]),
                reason,
                action,
                type_,
                note,
            )
            now = self._clock()
            series = self._series.get(key)
            if series is not None and now - series.first_at <= SERIES_WINDOW:
                series.count += 1
                series.last_wall = now
                series.dirty = True
                self._series.move_to_end(key)
                self._wakeup.set()
                return
            if len(self._queue) >= self.max_queue:
                self.dropped += 1
                logger.debug("event queue full, dropping %s %s", reason, regarding["name"])
                return
            namespace = str(regarding["namespace"]) or "default"
            body: Obj = {
                "apiVersion": EVENTS.api_version,
                "kind": EVENTS.kind,
                "metadata": {
                    "name": f"{regarding['name']}.{time.time_ns():x}",
                    "namespace": namespace,
                },
                "eventTime": micro_time(now),
                "reportingController": controller[:_MAX_FIELD],
                "reportingInstance": f"{controller}-{self.hostname}"[:_MAX_FIELD],
                "action": action[:_MAX_FIELD],
                "reason": reason[:_MAX_FIELD],
                "type": type_,
                "note": truncate_note(note),
                "regarding": {k: v for k, v in regarding.items() if v},
            }
            self._queue.append(_Pending(key, body))
            self._wakeup.set()
        except Exception:
            logger.exception("cannot queue event")

    # -- background writer ------------------------------------------------------------------
    def start(self) -> None:
        """Start the writer task (idempotent)."""
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="event-sink")

    async def stop(self, grace: float = 5.0) -> None:
        """Write what is queued (for at most ``grace`` seconds), then stop."""
        if self._task is None:
            return
        self._stopping = True
        self._wakeup.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.flush()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def flush(self) -> None:
        """Write queued events and pending series updates now."""
        while self._queue:
            await self._write(self._queue.popleft())
        await self._flush_series()

    async def _run(self) -> None:
        last_series_flush = time.monotonic()
        while not self._stopping:
            timeout = max(0.0, self.flush_interval - (time.monotonic() - last_series_flush))
            # asyncio.timeout, not wait_for: wait_for (3.11) can swallow a cancellation
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                await self._write(self._queue.popleft())
            if time.monotonic() - last_series_flush >= self.flush_interval:
                await self._flush_series()
                last_series_flush = time.monotonic()

    async def _write(self, pending: _Pending) -> None:
        body = pending.body
        namespace = body["metadata"]["namespace"]
        try:
            created = await self.client.create(EVENTS, namespace, body)
        except (ApiError, OSError, TimeoutError) as exc:
            logger.debug("cannot write event %s: %s", body.get("reason"), exc)
            return
        except Exception:
            logger.exception("cannot write event")
            return
        name = meta(created).get("name") or body["metadata"]["name"]
        self._series[pending.key] = _Series(
            name=name, namespace=namespace, count=1, first_at=self._clock(), last_wall=0.0
        )
        self._series.move_to_end(pending.key)
        while len(self._series) > self.max_series:
            self._series.popitem(last=False)

    async def _flush_series(self) -> None:
        for series in list(self._series.values()):
            if not series.dirty:
                continue
            series.dirty = False
            patch: Obj = {
                "series": {"count": series.count, "lastObservedTime": micro_time(series.last_wall)}
            }
            try:
                await self.client.patch(EVENTS, series.namespace, series.name, patch)
            except Exception as exc:
                logger.debug("cannot update event series %s: %s", series.name, exc)


class Recorder:
    """An ``EventRecorder`` bound to one reporting controller name.

    Args:
        sink: the shared writer.
        reporting_controller: the ``reportingController`` of every Event.
    """

    def __init__(self, sink: EventSink, reporting_controller: str) -> None:
        self.sink = sink
        self.reporting_controller = reporting_controller

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None:
        """Record an Event about ``obj`` (``type_`` is ``Normal`` or ``Warning``)."""
        self.sink.submit(
            obj,
            controller=self.reporting_controller,
            type_=type_,
            reason=reason,
            action=action,
            note=note,
        )
