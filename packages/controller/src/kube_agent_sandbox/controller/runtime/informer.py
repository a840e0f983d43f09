"""Informer: an in-memory, watch-fed cache of one resource, with event handlers and indexes.

It stays one module: :class:`Informer` is one class whose list, watch, resync, handlers and
indexes all read and write the same private store, indices and resourceVersion.

Reconcilers read from this cache instead of the API server. It LISTs in pages (limit 500,
``continue``), then WATCHes from the list's resourceVersion with bookmarks; after a dropped
stream it resumes from the last resourceVersion it saw; when the server answers 410 Gone (the
version was compacted) it lists again and tells its handlers about every change it missed,
deletions included. With a resync period, every cached object is handed to the handlers' update
callback again (old and new the same object) once per period, jittered, as client-go's resync:
drift that no watch event reports (e.g. a child that an event predicate stopped matching) is
reconciled again. Objects are stripped of ``metadata.managedFields`` (and whatever a
per-resource transform removes) and, by default, kept as compact JSON bytes: a decoded Kubernetes
object costs 2-4 times its JSON size in Python dicts and strings, and 10k Sandboxes plus their
Pods must fit in the controller's memory budget. Reads decode (orjson, a few microseconds per
object) and hand every caller its own copy, so callers cannot corrupt the cache.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from kube_agent_sandbox.controller.runtime.objects import labels_match, meta
from kube_agent_sandbox.controller.runtime.ownership import controller_ref
from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    IndexFunc,
    ListWatcher,
    Obj,
    Resource,
)

logger = logging.getLogger(__name__)

OWNER_UID_INDEX = "controller-owner-uid"
"""Built-in index: the UID of an object's controller ownerReference."""

Transform = Callable[[Obj], Obj]
"""Rewrites an object before it is cached (may mutate and return its argument)."""

_Key = tuple[str, str]

RESYNC_JITTER: Final = 0.1
"""Each resync waits the period times a random factor in ``[1 - j, 1 + j)`` (controller-runtime
jitters its SyncPeriod by 10% so that replicas and informers do not resync in lockstep)."""
_RESYNC_CHUNK: Final = 256
"""Objects handed to the handlers before yielding to the event loop during a resync."""


def _too_large_resource_version(exc: ApiError) -> bool:
    """The server is behind the requested resourceVersion (e.g. a restarted watch cache)."""
    return exc.status == 504 and "too large resource version" in exc.message.lower()


def owner_uid_index(obj: Obj) -> Iterable[str]:
    """Index function of :data:`OWNER_UID_INDEX`."""
    ref = controller_ref(obj)
    if ref and ref.get("uid"):
        return (str(ref["uid"]),)
    return ()


@dataclass(frozen=True, slots=True)
class EventHandler:
    """Callbacks an informer calls, in its own task, for every change it sees.

    Callbacks must be quick and must not mutate the objects (they are the cached ones). A
    delete found by a relist (the watch missed it) carries the last object the cache knew.
    """

    on_add: Callable[[Obj], None] | None = None
    on_update: Callable[[Obj, Obj], None] | None = None
    on_delete: Callable[[Obj], None] | None = None


class Informer:
    """List+watch cache of one resource; implements the ``Reader`` protocol.

    Args:
        source: the client (or a fake) providing list and watch.
        resource: what to cache.
        namespace: restrict to one namespace (None: all namespaces).
        label_selector: server-side label selector (e.g. ``app=x``).
        transform: applied to each object after ``managedFields`` are stripped.
        page_size: LIST page size.
        watch_timeout: a watch asks the server to end after a random time between this and
            twice this (seconds), as client-go does, so connections are renewed.
        retry_backoff: initial delay after a failed list/watch, doubled up to 30 s.
        compact: store objects as JSON bytes (small; reads decode a copy). False keeps the
            decoded dicts (faster reads, 2-4x the memory; returned objects are then shared and
            must not be mutated).
        resync_period: seconds between resyncs (jittered by :data:`RESYNC_JITTER`); ``<= 0``
            disables them.
    """

    def __init__(
        self,
        source: ListWatcher,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        transform: Transform | None = None,
        page_size: int = 500,
        watch_timeout: float = 300.0,
        retry_backoff: float = 0.8,
        compact: bool = True,
        resync_period: float = 0.0,
    ) -> None:
        self.source = source
        self.resync_period = resync_period
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.transform = transform
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.retry_backoff = retry_backoff
        self.compact = compact
        self._store: dict[str, dict[str, Any]] = {}  # namespace -> name -> packed object
        self._count = 0
        self._indexers: dict[str, IndexFunc] = {OWNER_UID_INDEX: owner_uid_index}
        self._indices: dict[str, dict[str, set[_Key]]] = {OWNER_UID_INDEX: {}}
        self._handlers: list[EventHandler] = []
        self._rv: str | None = None
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._resync_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.relists = 0
        """How many times the informer listed (1 + relists after 410 Gone)."""
        self.resyncs = 0
        """How many periodic resyncs were dispatched."""

    # -- configuration ----------------------------------------------------------------------
    def add_index(self, name: str, func: IndexFunc) -> None:
        """Add an index; objects already cached are indexed at once.

        Raises:
            ValueError: if an index of that name exists.
        """
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = func
        index: dict[str, set[_Key]] = {}
        self._indices[name] = index
        for ns, objs in self._store.items():
            for nm, packed in objs.items():
                for value in func(self._unpack(packed)):
                    index.setdefault(value, set()).add((ns, nm))

    def add_event_handler(self, handler: EventHandler) -> None:
        """Register callbacks; objects already cached are replayed to ``on_add``."""
        self._handlers.append(handler)
        if handler.on_add is not None:
            for obj in self._iter_all():
                self._call(handler.on_add, obj)

    # -- Reader -----------------------------------------------------------------------------
    def get(self, namespace: str, name: str) -> Obj | None:
        """The cached object, or None."""
        objs = self._store.get(namespace)
        if objs is None:
            return None
        packed = objs.get(name)
        return None if packed is None else self._unpack(packed)

    def list(
        self, namespace: str | None = None, *, labels: Mapping[str, str] | None = None
    ) -> list[Obj]:
        """Cached objects, optionally of one namespace and matching equality ``labels``."""
        if namespace is not None:
            candidates: Iterable[Obj] = map(
                self._unpack, list(self._store.get(namespace, {}).values())
            )
        else:
            candidates = self._iter_all()
        if not labels:
            return list(candidates)
        return [obj for obj in candidates if labels_match(obj, labels)]

    def iterate(self, namespace: str | None = None) -> Iterator[Obj]:
        """Yield cached objects one at a time, decoding each only when it is reached."""
        if namespace is None:
            yield from self._iter_all()
            return
        for packed in list(self._store.get(namespace, {}).values()):
            yield self._unpack(packed)

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        """Cached objects whose index function returned ``value``.

        Raises:
            KeyError: for an unknown index.
        """
        keys = self._indices[index].get(value)
        if not keys:
            return []
        found = []
        for ns, name in keys:
            obj = self.get(ns, name)
            if obj is not None:
                found.append(obj)
        return found

    def __len__(self) -> int:
        return self._count

    def _iter_all(self) -> Iterable[Obj]:
        for objs in list(self._store.values()):
            for packed in list(objs.values()):
                yield self._unpack(packed)

    def _pack(self, obj: Obj) -> Any:
        if not self.compact:
            return obj
        # orjson's result keeps its growth buffer (4-8 KiB allocated for 1 KiB of JSON); an
        # exact-size copy is what makes compact storage compact.
        return bytes(memoryview(orjson.dumps(obj)))

    def _unpack(self, packed: Any) -> Obj:
        if self.compact:
            obj: Obj = orjson.loads(packed)
            return obj
        return packed  # type: ignore[no-any-return]

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def has_synced(self) -> bool:
        """True once the first LIST is in the cache."""
        return self._synced.is_set()

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (None before the first list or after a 410)."""
        return self._rv

    async def wait_for_sync(self) -> None:
        """Wait for the first LIST (bound it with ``asyncio.timeout``)."""
        await self._synced.wait()

    def start(self) -> asyncio.Task[None]:
        """Start the list/watch loop (and the resync loop, if any) in tasks (idempotent)."""
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.create_task(self.run(), name=f"informer-{self.resource.plural}")
        if self.resync_period > 0 and (self._resync_task is None or self._resync_task.done()):
            self._resync_task = asyncio.create_task(
                self._resync_loop(), name=f"informer-{self.resource.plural}-resync"
            )
        return self._task

    async def stop(self) -> None:
        """Stop the loops; the cache keeps its content."""
        self._stopping = True
        for task in (self._task, self._resync_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._resync_task = None

    async def _resync_loop(self) -> None:
        await self._synced.wait()
        while not self._stopping:
            factor = random.uniform(1.0 - RESYNC_JITTER, 1.0 + RESYNC_JITTER)
            await asyncio.sleep(self.resync_period * factor)
            await self.resync()

    async def resync(self) -> int:
        """Hand every cached object to the handlers' ``on_update`` as ``(obj, obj)``.

        Objects are read one by one from the live store (a watch event handled between two
        chunks is not undone), yielding to the event loop every few hundred objects.

        Returns:
            How many objects were dispatched.
        """
        keys = [(ns, name) for ns, objs in self._store.items() for name in objs]
        dispatched = 0
        for i, (ns, name) in enumerate(keys):
            if i and i % _RESYNC_CHUNK == 0:
                await asyncio.sleep(0)
            packed = self._store.get(ns, {}).get(name)
            if packed is None:
                continue  # deleted meanwhile; its delete was dispatched
            obj = self._unpack(packed)
            for h in self._handlers:
                if h.on_update is not None:
                    self._call(h.on_update, obj, obj)
            dispatched += 1
        self.resyncs += 1
        logger.debug("%s: resynced %d objects", self.resource.plural, dispatched)
        return dispatched

    async def run(self) -> None:
        """List and watch until cancelled."""
        backoff = self.retry_backoff
        while not self._stopping:
            try:
                if self._rv is None:
                    await self._relist()
                started = time.monotonic()
                events = await self._watch()
                if events == 0 and time.monotonic() - started < 1.0:
                    # the server ends our watches at once: do not hammer it
                    await asyncio.sleep(backoff * random.uniform(1.0, 1.2))
                    backoff = min(30.0, backoff * 2)
                else:
                    backoff = self.retry_backoff
            except ApiError as exc:
                if exc.gone or _too_large_resource_version(exc):
                    logger.info(
                        "%s: cannot watch from resourceVersion %s (%s), relisting",
                        self.resource.plural,
                        self._rv,
                        exc.reason,
                    )
                    self._rv = None
                    continue
                logger.warning("%s: list/watch failed: %s", self.resource.plural, exc)
                await asyncio.sleep(backoff * random.uniform(1.0, 1.2))
                backoff = min(30.0, backoff * 2)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "%s: list/watch failed: %s: %s", self.resource.plural, type(exc).__name__, exc
                )
                await asyncio.sleep(backoff * random.uniform(1.0, 1.2))
                backoff = min(30.0, backoff * 2)

    # -- list / watch -----------------------------------------------------------------------
    async def _list_fresh(self) -> tuple[dict[_Key, Any], str]:
        """LIST every page, preparing and packing each page as it arrives (bounded peak)."""
        fresh: dict[_Key, Any] = {}
        cont: str | None = None
        restarted = False
        while True:
            try:
                page = await self.source.list(
                    self.resource,
                    self.namespace,
                    label_selector=self.label_selector,
                    limit=self.page_size,
                    continue_token=cont,
                )
            except ApiError as exc:
                if exc.gone and cont and not restarted:
                    # The continue token expired mid-list: start over from a fresh snapshot.
                    fresh, cont, restarted = {}, None, True
                    continue
                raise
            for item in page.get("items") or ():
                obj = self._prepare(item)
                m = meta(obj)
                fresh[(m.get("namespace") or "", m.get("name") or "")] = self._pack(obj)
            page_meta = page.get("metadata") or {}
            cont = page_meta.get("continue") or None
            del page
            if not cont:
                return fresh, str(page_meta.get("resourceVersion") or "")

    async def _relist(self) -> None:
        fresh, rv = await self._list_fresh()
        self.relists += 1
        gone = [
            (ns, name)
            for ns, objs in self._store.items()
            for name in objs
            if (ns, name) not in fresh
        ]
        for ns, name in gone:
            old = self._remove(ns, name)
            if old is not None:
                self._dispatch_delete(old)
        for (ns, name), packed in fresh.items():
            existing = self._store.get(ns, {}).get(name)
            if existing is not None and existing == packed:
                continue  # unchanged since we last saw it
            obj = self._unpack(packed)
            old = self._put(ns, name, obj, packed)
            if old is None:
                self._dispatch_add(obj)
            else:
                self._dispatch_update(old, obj)
        del fresh
        self._rv = rv
        if not self._synced.is_set():
            logger.debug("%s: synced %d objects at %s", self.resource.plural, self._count, rv)
            self._synced.set()

    async def _watch(self) -> int:
        """Watch from the last resourceVersion until the stream ends; returns events seen."""
        timeout = int(self.watch_timeout * random.uniform(1.0, 2.0))
        stream = self.source.watch(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            resource_version=self._rv,
            allow_bookmarks=True,
            timeout_seconds=max(1, timeout),
        )
        seen = 0
        try:
            async for event in stream:
                seen += 1
                if event.type == "BOOKMARK":
                    rv = meta(event.object).get("resourceVersion")
                    if rv:
                        self._rv = str(rv)
                    continue
                obj = self._prepare(event.object)
                m = meta(obj)
                ns, name = m.get("namespace") or "", m.get("name") or ""
                if event.type == "DELETED":
                    self._remove(ns, name)
                    self._dispatch_delete(obj)
                else:
                    old = self._put(ns, name, obj)
                    if old is None:
                        self._dispatch_add(obj)
                    else:
                        self._dispatch_update(old, obj)
                rv = m.get("resourceVersion")
                if rv:
                    self._rv = str(rv)
        finally:
            # close the stream now (and its HTTP response), not whenever it is collected
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        return seen

    # -- store ------------------------------------------------------------------------------
    def _prepare(self, obj: Obj) -> Obj:
        m = obj.get("metadata")
        if isinstance(m, dict):
            m.pop("managedFields", None)
        if "kind" not in obj or not obj.get("kind"):
            obj["kind"] = self.resource.kind
        if "apiVersion" not in obj or not obj.get("apiVersion"):
            obj["apiVersion"] = self.resource.api_version
        if self.transform is not None:
            obj = self.transform(obj)
        return obj

    def _put(self, ns: str, name: str, obj: Obj, packed: Any = None) -> Obj | None:
        objs = self._store.get(ns)
        if objs is None:
            objs = self._store[ns] = {}
        old_packed = objs.get(name)
        objs[name] = self._pack(obj) if packed is None else packed
        old = None if old_packed is None else self._unpack(old_packed)
        if old is None:
            self._count += 1
        else:
            self._unindex(ns, name, old)
        self._index(ns, name, obj)
        return old

    def _remove(self, ns: str, name: str) -> Obj | None:
        objs = self._store.get(ns)
        if objs is None:
            return None
        old_packed = objs.pop(name, None)
        if old_packed is None:
            return None
        old = self._unpack(old_packed)
        if not objs:
            del self._store[ns]
        self._count -= 1
        self._unindex(ns, name, old)
        return old

    def _index(self, ns: str, name: str, obj: Obj) -> None:
        for index_name, func in self._indexers.items():
            values = func(obj)
            if values:
                index = self._indices[index_name]
                for value in values:
                    index.setdefault(value, set()).add((ns, name))

    def _unindex(self, ns: str, name: str, obj: Obj) -> None:
        for index_name, func in self._indexers.items():
            values = func(obj)
            if values:
                index = self._indices[index_name]
                for value in values:
                    keys = index.get(value)
                    if keys is not None:
                        keys.discard((ns, name))
                        if not keys:
                            del index[value]

    # -- dispatch ---------------------------------------------------------------------------
    def _call(self, func: Callable[..., None], *args: Obj) -> None:
        try:
            func(*args)
        except Exception:
            logger.exception("%s: event handler failed", self.resource.plural)

    def _dispatch_add(self, obj: Obj) -> None:
        for h in self._handlers:
            if h.on_add is not None:
                self._call(h.on_add, obj)

    def _dispatch_update(self, old: Obj, new: Obj) -> None:
        for h in self._handlers:
            if h.on_update is not None:
                self._call(h.on_update, old, new)

    def _dispatch_delete(self, obj: Obj) -> None:
        for h in self._handlers:
            if h.on_delete is not None:
                self._call(h.on_delete, obj)
