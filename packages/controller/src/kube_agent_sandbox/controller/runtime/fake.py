"""An in-memory API server for unit tests of informers, controllers and reconcilers.

:class:`FakeApi` stays one class in this module: it mirrors one API server, so every verb
shares its private store, resourceVersion counter, watch history and watchers. What needs none
of that state lives in modules of its own: applying JSON patches (``jsonpatch``), matching
label selectors (``labelselector``) and the ``Reader`` view of the store (``fakereader``, which
reads only :meth:`FakeApi.contents`). :class:`FakeReader` is re-exported here.

It implements the ``Client`` and ``ListWatcher`` protocols with the behaviour tests depend on:
resourceVersions, optimistic concurrency (409 on a stale resourceVersion), AlreadyExists and
NotFound, delete preconditions (UID, resourceVersion), finalizers (delete sets
deletionTimestamp; removing the last finalizer then deletes), no-op writes that change nothing,
paginated LIST, watch streams that replay history from a resourceVersion, compaction (a watch
from before it gets 410 Gone), dropping all watch connections (like an API server restart),
bookmarks, and injected errors. Merge and apply patches are both applied as JSON merge patches;
JSON patches support add/replace/remove/test.

For tests it records every request with its body (``calls``, ``writes``), fails requests on
demand per verb and resource (``errors``, ``fail``), runs a hook before each request so a test
can act as another client between two calls (``on_request``), seeds and changes objects behind
the clients' backs (``add``, ``mutate``, ``contents``), and hands out ``Reader`` views of its
store that stand in for synced informer caches (``reader``). It is a test double, shipped with
the runtime like controller-runtime's fake client: integration tests run against a real
kube-apiserver.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import itertools
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from kube_agent_sandbox.controller.runtime.fakereader import FakeReader
from kube_agent_sandbox.controller.runtime.jsonpatch import apply_json_patch
from kube_agent_sandbox.controller.runtime.labelselector import label_selector_matches
from kube_agent_sandbox.controller.runtime.mergepatch import apply_merge_patch
from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    IndexFunc,
    Obj,
    PatchType,
    Resource,
    WatchEvent,
    WatchEventType,
)

__all__ = ["Call", "Defaulter", "FakeApi", "FakeReader", "Hook"]

_Key = tuple[str, str]
_CLOSE = object()
_WRITE_VERBS = ("create", "update", "patch", "delete")
_PRECONDITION_NAMES = {"uid": "UID", "resourceVersion": "ResourceVersion"}

Hook = Callable[[str, Resource, str | None, str | None], None]
"""Called as ``(verb, resource, namespace, name)`` before a request is served."""

Defaulter = Callable[[Obj], None]
"""Fills in server-set fields of a new object in place (a stand-in for admission defaults)."""


def _conflict(resource: Resource, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource.plural} "{name}": '
        "the object has been modified; please apply your changes to the latest version "
        "and try again",
    )


class Call(NamedTuple):
    """One request served by :class:`FakeApi` (a tuple, so ``call[0]`` is the verb).

    ``body`` is a copy of what was sent (the object for create/update, the patch for patch);
    ``namespace`` is empty for cluster-scoped resources and None for an all-namespaces LIST
    or WATCH; ``name`` is None for LIST and WATCH.
    """

    verb: str
    plural: str
    namespace: str | None
    name: str | None
    body: Any = None
    subresource: str | None = None
    field_manager: str | None = None
    preconditions: Mapping[str, str] | None = None


@dataclass
class _Watcher:
    resource: Resource
    namespace: str | None
    selector: str | None
    queue: asyncio.Queue[Any]


class FakeApi:
    """In-memory API server (see module docstring).

    Attributes:
        calls: every request, in order.
        errors: ``(verb, resource) -> ApiError`` raised once by the next matching request
            (verbs: get, list, create, update, patch, delete, watch; ``resource`` is the plural,
            or ``plural/subresource`` for a request to a subresource).
        failures: queued errors per ``(verb, resource)``, as added by :meth:`fail`.
        on_request: a :data:`Hook` run before each request is served (after it is recorded);
            it may change the store, e.g. to act as another client between two calls.
        default_namespace: the namespace :meth:`add`, :meth:`obj` and :meth:`mutate` use for
            namespaced objects when none is given.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] | None = None,
        default_namespace: str = "",
        defaults: Mapping[Resource, Defaulter] | None = None,
    ) -> None:
        """Create an empty API server.

        Args:
            clock: The time for creationTimestamp and deletionTimestamp (default: now).
            default_namespace: See the class attributes.
            defaults: Per resource, what the server fills into a created object (e.g. a Pod's
                ``status.phase``); applied on :meth:`create`, not on :meth:`add`.
        """
        self._objects: dict[Resource, dict[_Key, Obj]] = {}
        self._history: dict[Resource, builtins.list[tuple[int, WatchEventType, Obj]]] = {}
        self._watchers: builtins.list[_Watcher] = []
        self._rv = itertools.count(1)
        self._clock = clock
        self._defaults = dict(defaults or {})
        self.last_rv = 0
        self.compacted_rv = 0
        self.calls: builtins.list[Call] = []
        self.errors: dict[tuple[str, str], ApiError] = {}
        self.failures: dict[tuple[str, str], builtins.list[BaseException]] = {}
        self.on_request: Hook | None = None
        self.default_namespace = default_namespace

    # -- helpers ----------------------------------------------------------------------------
    def _enter(self, resource: Resource, call: Call) -> None:
        self.calls.append(call)
        if self.on_request is not None:
            self.on_request(call.verb, resource, call.namespace, call.name)
        target = f"{resource.plural}/{call.subresource}" if call.subresource else resource.plural
        queued = self.failures.get((call.verb, target))
        if queued:
            raise queued.pop(0)
        err = self.errors.pop((call.verb, target), None)
        if err is not None:
            raise err

    def _serve(self, resource: Resource, call: Call) -> Obj:
        """Enter ``call`` and return the stored object it names (not a copy) or raise 404."""
        self._enter(resource, call)
        obj = self._store(resource).get((call.namespace or "", str(call.name)))
        if obj is None:
            raise self._not_found(resource, str(call.name))
        return obj

    def _next_rv(self) -> str:
        self.last_rv = next(self._rv)
        return str(self.last_rv)

    def _timestamp(self) -> str:
        now = self._clock() if self._clock is not None else datetime.now(UTC)
        return now.strftime("%Y-%m-%dT%H:%M:%SZ")

    def _store(self, resource: Resource) -> dict[_Key, Obj]:
        return self._objects.setdefault(resource, {})

    def _ns(self, resource: Resource, namespace: str | None) -> str:
        return (namespace or "") if resource.namespaced else ""

    def _key(self, resource: Resource, name: str, namespace: str | None) -> _Key:
        given = self.default_namespace if namespace is None else namespace
        return (self._ns(resource, given), name)

    @staticmethod
    def _place(meta: Obj, namespace: str) -> None:
        if namespace:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)  # cluster-scoped objects have none

    def _emit(self, resource: Resource, etype: WatchEventType, obj: Obj) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        snapshot = copy.deepcopy(obj)
        self._history.setdefault(resource, []).append((rv, etype, snapshot))
        for w in self._watchers:
            if w.resource == resource and self._visible(w, snapshot):
                w.queue.put_nowait(WatchEvent(etype, copy.deepcopy(snapshot)))

    def _insert(self, resource: Resource, key: _Key, obj: Obj) -> Obj:
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._store(resource)[key] = obj
        self._emit(resource, "ADDED", obj)
        return copy.deepcopy(obj)

    @staticmethod
    def _visible(w: _Watcher, obj: Obj) -> bool:
        ns = obj["metadata"].get("namespace") or ""
        if w.namespace and ns != w.namespace:
            return False
        return label_selector_matches(obj, w.selector)

    def _not_found(self, resource: Resource, name: str) -> ApiError:
        return ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')

    # -- test controls ----------------------------------------------------------------------
    def objects(self, resource: Resource) -> builtins.list[Obj]:
        """Deep copies of every stored object of ``resource``."""
        return [copy.deepcopy(o) for o in self._store(resource).values()]

    def obj(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """A deep copy of one stored object, or None (no request is recorded)."""
        found = self._store(resource).get(self._key(resource, name, namespace))
        return copy.deepcopy(found) if found is not None else None

    def contents(self, resource: Resource) -> dict[_Key, Obj]:
        """The live store of ``resource`` by ``(namespace, name)``.

        Editing it changes the server silently: no resourceVersion, no watch event.
        """
        return self._store(resource)

    def add(self, resource: Resource, obj: Obj) -> Obj:
        """Store an object as if another client had created it.

        Missing server-set fields are filled in (namespace, uid, creationTimestamp,
        generation 1, kind, apiVersion) and the resourceVersion is always new. No request is
        recorded and no failure injected; watchers see ADDED. An existing object is replaced.

        Returns:
            A deep copy of the stored object.
        """
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        key = self._key(resource, meta["name"], meta.get("namespace"))
        self._place(meta, key[0])
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", self._timestamp())
        meta.setdefault("generation", 1)
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        return self._insert(resource, key, obj)

    def mutate(
        self,
        resource: Resource,
        name: str,
        func: Callable[[Obj], None],
        namespace: str | None = None,
    ) -> Obj:
        """Change a stored object in place, as a kubelet or a user would.

        The object gets a new resourceVersion and watchers see MODIFIED; no request is
        recorded. A missing object raises KeyError.

        Returns:
            A deep copy of the changed object.
        """
        obj = self._store(resource)[self._key(resource, name, namespace)]
        func(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(resource, "MODIFIED", obj)
        return copy.deepcopy(obj)

    def fail(self, verb: str, resource: str, *errors: BaseException) -> None:
        """Make the next requests of ``verb`` on ``resource`` raise these errors, in order.

        Args:
            verb: get, list, create, update, patch, delete or watch.
            resource: The plural, or ``plural/subresource`` (e.g. ``sandboxes/status``).
            *errors: One error per request to fail; later requests are served.
        """
        self.failures.setdefault((verb, resource), []).extend(errors)

    def writes(self, resource: Resource | str | None = None) -> builtins.list[Call]:
        """Recorded requests that change something (optionally of one resource or plural)."""
        plural = resource.plural if isinstance(resource, Resource) else resource
        return [
            call
            for call in self.calls
            if call.verb in _WRITE_VERBS and (plural is None or call.plural == plural)
        ]

    def clear_calls(self) -> None:
        """Forget the recorded requests."""
        self.calls.clear()

    def reader(
        self,
        resource: Resource,
        *,
        indexes: Mapping[str, IndexFunc] | None = None,
        transform: Callable[[Obj], Obj] | None = None,
    ) -> FakeReader:
        """A ``Reader`` over ``resource`` that always sees the current store."""
        return FakeReader(self, resource, indexes=indexes, transform=transform)

    def compact(self) -> None:
        """Forget history: watches from any earlier resourceVersion now get 410 Gone."""
        self.compacted_rv = self.last_rv
        self._history.clear()

    def drop_watches(self) -> None:
        """End every open watch stream (as an API server restart does)."""
        for w in self._watchers:
            w.queue.put_nowait(_CLOSE)
        self._watchers.clear()

    def expire_watches(self) -> None:
        """Send an ERROR 410 event into every open watch, then end it."""
        for w in self._watchers:
            w.queue.put_nowait(ApiError(410, "Expired", "too old resource version"))
        self._watchers.clear()

    def bookmark(self, resource: Resource) -> None:
        """Send a BOOKMARK at the current resourceVersion to watches of ``resource``."""
        for w in self._watchers:
            if w.resource == resource:
                obj = {
                    "kind": resource.kind,
                    "apiVersion": resource.api_version,
                    "metadata": {"resourceVersion": str(self.last_rv)},
                }
                w.queue.put_nowait(WatchEvent("BOOKMARK", obj))

    @property
    def watch_count(self) -> int:
        """Open watch streams."""
        return len(self._watchers)

    # -- Client -----------------------------------------------------------------------------
    async def get(
        self, resource: Resource, namespace: str, name: str, *, subresource: str | None = None
    ) -> Obj:
        """GET one object."""
        ns = self._ns(resource, namespace)
        call = Call("get", resource.plural, ns, name, subresource=subresource)
        found = copy.deepcopy(self._serve(resource, call))
        await asyncio.sleep(0)  # a network round trip: lets concurrent callers interleave
        return found

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Obj:
        """LIST with pagination (continue tokens are offsets pinned to a resourceVersion)."""
        self._enter(resource, Call("list", resource.plural, namespace, None))
        items = [
            o
            for (ns, _), o in sorted(self._store(resource).items())
            if (not namespace or ns == namespace) and label_selector_matches(o, label_selector)
        ]
        start = 0
        list_rv = str(self.last_rv)
        if continue_token:
            offset, _, pinned = continue_token.partition(":")
            if int(pinned) < self.compacted_rv:
                raise ApiError(410, "Expired", "continue token expired")
            start, list_rv = int(offset), pinned
        page = items[start : start + limit] if limit else items[start:]
        meta: Obj = {"resourceVersion": list_rv}
        if limit and start + limit < len(items):
            meta["continue"] = f"{start + limit}:{list_rv}"
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": meta,
            "items": [
                {k: v for k, v in copy.deepcopy(o).items() if k not in ("kind", "apiVersion")}
                for o in page
            ],
        }

    async def create(
        self, resource: Resource, namespace: str, body: Obj, *, field_manager: str | None = None
    ) -> Obj:
        """Create; generateName is honoured and the resource's defaulter applied."""
        ns = self._ns(resource, namespace)
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        sent = copy.deepcopy(body)
        self._enter(resource, Call("create", resource.plural, ns, name, sent, None, field_manager))
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if (ns, name) in self._store(resource):
            raise ApiError(409, "AlreadyExists", f'{resource.plural} "{name}" already exists')
        self._place(meta, ns)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._timestamp()
        meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version
        defaulter = self._defaults.get(resource)
        if defaulter is not None:
            defaulter(obj)
        return self._insert(resource, (ns, name), obj)

    def _write(
        self, resource: Resource, key: _Key, new: Obj, *, subresource: str | None, old: Obj
    ) -> Obj:
        if subresource == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status")
            new = merged
        else:
            new = copy.deepcopy(new)
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        for fixed in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
            if fixed in old["metadata"]:
                meta[fixed] = old["metadata"][fixed]
        meta["generation"] = old["metadata"].get("generation", 1) + (
            1 if new.get("spec") != old.get("spec") else 0
        )
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        new["kind"], new["apiVersion"] = resource.kind, resource.api_version
        store = self._store(resource)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            meta["resourceVersion"] = self._next_rv()
            del store[key]
            self._emit(resource, "DELETED", new)
        elif new == old:
            return copy.deepcopy(old)  # a no-op write: no new resourceVersion, no event
        else:
            meta["resourceVersion"] = self._next_rv()
            store[key] = new
            self._emit(resource, "MODIFIED", new)
        return copy.deepcopy(new)

    async def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Obj,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        """Replace; a resourceVersion other than the stored one is a 409 Conflict."""
        ns = self._ns(resource, namespace)
        sent = copy.deepcopy(body)
        call = Call("update", resource.plural, ns, name, sent, subresource, field_manager)
        old = self._serve(resource, call)
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise _conflict(resource, name)
        return self._write(resource, (ns, name), body, subresource=subresource, old=old)

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Obj | Sequence[Obj],
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        """Patch (merge/strategic/apply as merge patch; json as RFC 6902 subset)."""
        ns = self._ns(resource, namespace)
        sent = copy.deepcopy(patch)
        call = Call("patch", resource.plural, ns, name, sent, subresource, field_manager)
        old = self._serve(resource, call)
        if patch_type == "json":
            new = apply_json_patch(old, list(patch) if not isinstance(patch, Mapping) else [])
        else:
            if not isinstance(patch, Mapping):
                raise ApiError(400, "BadRequest", "patch must be an object")
            rv = (patch.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise _conflict(resource, name)
            new = apply_merge_patch(old, dict(patch))
        return self._write(resource, (ns, name), new, subresource=subresource, old=old)

    async def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> Obj | None:
        """Delete; with finalizers only deletionTimestamp is set (and the object returned).

        ``preconditions`` (``uid``, ``resourceVersion``) that do not match are a 409 Conflict.
        """
        ns = self._ns(resource, namespace)
        given = dict(preconditions) if preconditions is not None else None
        old = self._serve(resource, Call("delete", resource.plural, ns, name, preconditions=given))
        meta = old["metadata"]
        for field, value in (preconditions or {}).items():
            if meta.get(field) != value:
                label = _PRECONDITION_NAMES.get(field, field)
                raise ApiError(
                    409,
                    "Conflict",
                    f"Precondition failed: {label} in precondition: {value}, "
                    f"{label} in object meta: {meta.get(field)}",
                )
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = self._timestamp()
                meta["resourceVersion"] = self._next_rv()
                self._emit(resource, "MODIFIED", old)
            return copy.deepcopy(old)
        del self._store(resource)[(ns, name)]
        meta["resourceVersion"] = self._next_rv()
        self._emit(resource, "DELETED", old)
        return copy.deepcopy(old)

    # -- ListWatcher ------------------------------------------------------------------------
    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Replay history after ``resource_version``, then stream live events."""
        self._enter(resource, Call("watch", resource.plural, namespace, None))
        since = int(resource_version) if resource_version else self.last_rv
        if since < self.compacted_rv:
            raise ApiError(410, "Expired", f"too old resource version: {since}")
        w = _Watcher(resource, namespace or None, label_selector, asyncio.Queue())
        for rv, etype, obj in self._history.get(resource, []):
            if rv > since and self._visible(w, obj):
                w.queue.put_nowait(WatchEvent(etype, copy.deepcopy(obj)))
        self._watchers.append(w)
        try:
            while True:
                item = await w.queue.get()
                if item is _CLOSE:
                    return
                if isinstance(item, ApiError):
                    raise item
                yield item
        finally:
            if w in self._watchers:
                self._watchers.remove(w)
