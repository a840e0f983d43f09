"""Per-object timelines: where each cold Sandbox's time goes, seen from the outside.

A watch on the Pods and one on the Sandboxes of the benchmark namespace stamp, for every
Sandbox, the moments that split create→Ready between the controller and the rest of the
cluster:

- ``sent``: the benchmark's create call went out;
- ``pod created``: the Pod's ADDED event (the controller saw the Sandbox and created it);
- ``pod scheduled``: the first Pod event with ``spec.nodeName`` (kube-scheduler);
- ``pod ready``: the first Pod event with ``Ready=True`` (kwok, standing in for the kubelet);
- ``sandbox ready``: the first Sandbox event with ``Ready=True`` (the controller again).

Every Sandbox event that changed ``status`` counts as one status write, every one that
changed ``metadata.annotations`` as one metadata write. The segments ``sent→pod created``
and ``pod ready→sandbox ready`` are the controller's reaction times; the two in between are
the scheduler's and the node's. Both controllers are measured the same way, so the same
segment side by side says which process holds the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp

from benchlib.stats import percentile
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import ApiClient, ApiError, Resource

log = logging.getLogger(__name__)

MARKS: Final = ("sent", "pod created", "pod scheduled", "pod ready", "sandbox ready")
"""The stamps of one Sandbox, in the order they normally happen."""

Apply = Callable[[str, Mapping[str, Any], float], None]
"""What a watch event means for the timelines: (event type, object, monotonic time)."""

SEGMENTS: Final = (
    ("controller: create Pod", "sent", "pod created"),
    ("scheduler: bind", "pod created", "pod scheduled"),
    ("node: start", "pod scheduled", "pod ready"),
    ("controller: mark Ready", "pod ready", "sandbox ready"),
)
"""(label, from mark, to mark): the parts of create→Ready, each owned by one process."""


def _ready(obj: Mapping[str, Any]) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


@dataclass
class ObjectTimeline:
    """The stamps of one Sandbox (monotonic seconds) and its writes as seen by the watch."""

    marks: dict[str, float] = field(default_factory=dict)
    status_writes: list[float] = field(default_factory=list)
    metadata_writes: list[float] = field(default_factory=list)
    last_status: Any = None
    last_annotations: Any = None

    def segment(self, start: str, end: str) -> float | None:
        """Seconds from mark ``start`` to mark ``end`` (None unless both were seen)."""
        a, b = self.marks.get(start), self.marks.get(end)
        return None if a is None or b is None else b - a

    def stamp(self, mark: str, at: float) -> None:
        """Record ``mark`` at ``at`` unless it was recorded before."""
        self.marks.setdefault(mark, at)


class Timelines:
    """Watch-fed timelines of every Sandbox (and its Pod, same name) of one namespace.

    Args:
        client: API client (admin).
        namespace: Namespace the scenario creates its Sandboxes in.
    """

    def __init__(self, client: ApiClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.objects: dict[str, ObjectTimeline] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def of(self, name: str) -> ObjectTimeline:
        """The timeline of ``name`` (created empty on first use)."""
        found = self.objects.get(name)
        if found is None:
            found = self.objects[name] = ObjectTimeline()
        return found

    def sent(self, at: Mapping[str, float]) -> None:
        """Stamp ``sent`` for every name the sender created."""
        for name, t in at.items():
            self.of(name).stamp("sent", t)

    async def start(self) -> None:
        """Follow Pods and Sandboxes from now on (both watches start from an empty list)."""
        for resource, apply in ((PODS, self.apply_pod), (SANDBOXES, self.apply_sandbox)):
            rv = await self._list_version(resource)
            self._tasks.append(asyncio.create_task(self._follow(resource, rv, apply)))

    async def stop(self) -> None:
        """Stop both watches."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    # -- what an event means ----------------------------------------------------------------
    def apply_pod(self, kind: str, obj: Mapping[str, Any], at: float) -> None:
        """Stamp ``pod created``, ``pod scheduled`` and ``pod ready`` from a Pod event."""
        if kind == "DELETED":
            return
        line = self.of(str(obj["metadata"]["name"]))
        line.stamp("pod created", at)
        if (obj.get("spec") or {}).get("nodeName"):
            line.stamp("pod scheduled", at)
        if _ready(obj):
            line.stamp("pod ready", at)

    def apply_sandbox(self, kind: str, obj: Mapping[str, Any], at: float) -> None:
        """Count status and metadata writes, stamp ``sandbox ready`` from a Sandbox event."""
        if kind == "DELETED":
            return
        line = self.of(str(obj["metadata"]["name"]))
        status = obj.get("status") or {}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if kind == "MODIFIED":
            if status != line.last_status:
                line.status_writes.append(at)
            if annotations != line.last_annotations:
                line.metadata_writes.append(at)
        line.last_status, line.last_annotations = status, annotations
        if _ready(obj):
            line.stamp("sandbox ready", at)

    # -- watching ---------------------------------------------------------------------------
    async def _list_version(self, resource: Resource) -> str:
        page = await self.client.list(resource, self.namespace, limit=1)
        return str((page.get("metadata") or {}).get("resourceVersion") or "")

    async def _follow(self, resource: Resource, rv: str, apply: Apply) -> None:
        while True:
            try:
                async for event in self.client.watch(
                    resource, self.namespace, resource_version=rv, allow_bookmarks=True
                ):
                    if event.type != "BOOKMARK":
                        apply(event.type, event.object, time.monotonic())
                    rv = str((event.object.get("metadata") or {}).get("resourceVersion") or rv)
            except ApiError as err:
                if not err.gone:
                    raise
                log.warning("timeline: %s watch expired; the timelines have a gap", resource)
                rv = await self._list_version(resource)
            except (TimeoutError, OSError, aiohttp.ClientError) as err:
                log.warning("timeline: %s watch dropped (%s), resuming", resource, err)
                await asyncio.sleep(0.2)


def segment_summary(
    lines: Iterable[ObjectTimeline],
) -> dict[str, dict[str, float | int | None]]:
    """p50/p90/p99 (ms) and count of every segment over ``lines``."""
    lines = list(lines)
    out: dict[str, dict[str, float | int | None]] = {}
    for label, start, end in SEGMENTS:
        values = [v for line in lines if (v := line.segment(start, end)) is not None]
        out[label] = {
            "n": len(values),
            "p50_ms": _ms(percentile(values, 0.5)),
            "p90_ms": _ms(percentile(values, 0.9)),
            "p99_ms": _ms(percentile(values, 0.99)),
        }
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def sample(names: Sequence[str], count: int) -> list[str]:
    """``count`` names spread evenly over ``names`` (all of them when there are fewer)."""
    if len(names) <= count:
        return list(names)
    step = len(names) / count
    return [names[int(i * step)] for i in range(count)]


def waterfall_rows(
    timelines: Mapping[str, ObjectTimeline], names: Sequence[str]
) -> list[dict[str, Any]]:
    """JSON rows for the waterfall plot: per name, each mark in ms after ``sent``."""
    rows = []
    for name in names:
        line = timelines.get(name)
        if line is None or "sent" not in line.marks:
            continue
        t0 = line.marks["sent"]
        rows.append(
            {
                "name": name,
                "marks_ms": {m: round((t - t0) * 1000, 2) for m, t in line.marks.items()},
                "status_writes_ms": [round((t - t0) * 1000, 2) for t in line.status_writes],
                "metadata_writes_ms": [round((t - t0) * 1000, 2) for t in line.metadata_writes],
            }
        )
    return rows


def writes_per_object(timelines: Iterable[ObjectTimeline]) -> tuple[float, float]:
    """Mean status and metadata writes per Sandbox, as the watch saw them."""
    lines = [line for line in timelines if "sent" in line.marks]
    if not lines:
        return 0.0, 0.0
    return (
        sum(len(line.status_writes) for line in lines) / len(lines),
        sum(len(line.metadata_writes) for line in lines) / len(lines),
    )
