"""An in-memory API server for unit tests of informers, controllers and reconcilers.

It implements the ``Client`` and ``ListWatcher`` protocols with the behaviour tests depend on:
resourceVersions, optimistic concurrency (409 on a stale resourceVersion), AlreadyExists and
NotFound, finalizers (delete sets deletionTimestamp), paginated LIST, watch streams that replay
history from a resourceVersion, compaction (a watch from before it gets 410 Gone), dropping all
watch connections (like an API server restart), bookmarks, and injected errors. Merge and apply
patches are both applied as JSON merge patches; JSON patches support add/replace/remove.
It is a test double: integration tests run against a real kube-apiserver.
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
from typing import Any

from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    Obj,
    PatchType,
    Resource,
    WatchEvent,
    WatchEventType,
)

_Key = tuple[str, str]
_CLOSE = object()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch (returns a new value)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _json_patch(doc: Obj, ops: Sequence[Obj]) -> Obj:
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, "Invalid", f"test failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif kind == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", f"missing path {op['path']}")
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(422, "Invalid", f"missing path {op['path']}")
        else:
            raise ApiError(422, "Invalid", f"unsupported op {kind!r}")
    return doc


def _selector_matches(obj: Obj, selector: str | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        term = term.strip()
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.strip().rstrip("=")) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class _Watcher:
    resource: Resource
    namespace: str | None
    selector: str | None
    queue: asyncio.Queue[Any]


class FakeApi:
    """In-memory API server (see module docstring).

    Attributes:
        calls: every request as ``(verb, plural, namespace, name)``.
        errors: ``(verb, plural) -> ApiError`` raised once by the next matching request
            (verbs: get, list, create, update, patch, delete, watch).
    """

    def __init__(self) -> None:
        self._objects: dict[Resource, dict[_Key, Obj]] = {}
        self._history: dict[Resource, builtins.list[tuple[int, WatchEventType, Obj]]] = {}
        self._watchers: builtins.list[_Watcher] = []
        self._rv = itertools.count(1)
        self.last_rv = 0
        self.compacted_rv = 0
        self.calls: builtins.list[tuple[str, str, str | None, str | None]] = []
        self.errors: dict[tuple[str, str], ApiError] = {}
        self.on_request: Callable[[str, Resource, str | None, str | None], None] | None = None

    # -- helpers ----------------------------------------------------------------------------
    def _enter(self, verb: str, resource: Resource, ns: str | None, name: str | None) -> None:
        self.calls.append((verb, resource.plural, ns, name))
        if self.on_request is not None:
            self.on_request(verb, resource, ns, name)
        err = self.errors.pop((verb, resource.plural), None)
        if err is not None:
            raise err

    def _next_rv(self) -> str:
        self.last_rv = next(self._rv)
        return str(self.last_rv)

    def _store(self, resource: Resource) -> dict[_Key, Obj]:
        return self._objects.setdefault(resource, {})

    def _ns(self, resource: Resource, namespace: str | None) -> str:
        return (namespace or "") if resource.namespaced else ""

    def _emit(self, resource: Resource, etype: WatchEventType, obj: Obj) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        snapshot = copy.deepcopy(obj)
        self._history.setdefault(resource, []).append((rv, etype, snapshot))
        for w in self._watchers:
            if w.resource == resource and self._visible(w, snapshot):
                w.queue.put_nowait(WatchEvent(etype, copy.deepcopy(snapshot)))

    @staticmethod
    def _visible(w: _Watcher, obj: Obj) -> bool:
        ns = obj["metadata"].get("namespace") or ""
        if w.namespace and ns != w.namespace:
            return False
        return _selector_matches(obj, w.selector)

    def _not_found(self, resource: Resource, name: str) -> ApiError:
        return ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')

    # -- test controls ----------------------------------------------------------------------
    def objects(self, resource: Resource) -> builtins.list[Obj]:
        """Deep copies of every stored object of ``resource``."""
        return [copy.deepcopy(o) for o in self._store(resource).values()]

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
        self._enter("get", resource, namespace, name)
        obj = self._store(resource).get((self._ns(resource, namespace), name))
        if obj is None:
            raise self._not_found(resource, name)
        found = copy.deepcopy(obj)
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
        self._enter("list", resource, namespace, None)
        items = [
            o
            for (ns, _), o in sorted(self._store(resource).items())
            if (not namespace or ns == namespace) and _selector_matches(o, label_selector)
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
        """Create; generateName is honoured."""
        ns = self._ns(resource, namespace)
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        self._enter("create", resource, ns, name)
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        store = self._store(resource)
        if (ns, name) in store:
            raise ApiError(409, "AlreadyExists", f'{resource.plural} "{name}" already exists')
        if ns:
            meta["namespace"] = ns
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        meta["resourceVersion"] = self._next_rv()
        meta.pop("deletionTimestamp", None)
        obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version
        store[(ns, name)] = obj
        self._emit(resource, "ADDED", obj)
        return copy.deepcopy(obj)

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
        meta["resourceVersion"] = self._next_rv()
        new["kind"], new["apiVersion"] = resource.kind, resource.api_version
        store = self._store(resource)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del store[key]
            self._emit(resource, "DELETED", new)
        else:
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
        self._enter("update", resource, ns, name)
        old = self._store(resource).get((ns, name))
        if old is None:
            raise self._not_found(resource, name)
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.plural} "{name}": '
                "the object has been modified; please apply your changes to the latest version "
                "and try again",
            )
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
        self._enter("patch", resource, ns, name)
        old = self._store(resource).get((ns, name))
        if old is None:
            raise self._not_found(resource, name)
        if patch_type == "json":
            new = _json_patch(old, list(patch) if not isinstance(patch, Mapping) else [])
        else:
            if not isinstance(patch, Mapping):
                raise ApiError(400, "BadRequest", "patch must be an object")
            rv = (patch.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "the object has been modified")
            new = merge_patch(old, dict(patch))
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
        """Delete; with finalizers only deletionTimestamp is set (and the object returned)."""
        ns = self._ns(resource, namespace)
        self._enter("delete", resource, ns, name)
        store = self._store(resource)
        old = store.get((ns, name))
        if old is None:
            raise self._not_found(resource, name)
        meta = old["metadata"]
        for field, value in (preconditions or {}).items():
            if meta.get(field) != value:
                raise ApiError(409, "Conflict", f"Precondition failed: {field} mismatch")
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = _now()
                meta["resourceVersion"] = self._next_rv()
                self._emit(resource, "MODIFIED", old)
            return copy.deepcopy(old)
        del store[(ns, name)]
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
        self._enter("watch", resource, namespace, None)
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
