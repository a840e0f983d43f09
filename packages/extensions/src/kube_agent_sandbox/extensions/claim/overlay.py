"""Read-your-writes over an informer cache: what this controller wrote wins until the cache has it.

A claim is reconciled again right after its own writes (each write is a watch event), while
the informer may still hold the previous version: the assignment annotation, the adopted or
created Sandbox, the status just written would all look missing, and the next pass would
adopt or create a second Sandbox or wait. Instead of waiting for the cache, every object the
controller writes is kept here (the API server's answer to the write) until the informer
delivers that resourceVersion or a newer one; readers consult the overlay first.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Final

from kube_agent_sandbox.controller.runtime import EventHandler, Obj, Reader, meta

DEFAULT_TTL: Final = 60.0
"""Seconds an entry may outlive a cache that never shows it (e.g. missed by a relist)."""

_Key = tuple[str, str]


def _rv(obj: Obj) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def _not_older(seen: str, written: str) -> bool:
    """True when the cache's version ``seen`` is the written one or a later one."""
    if seen == written:
        return True
    if seen.isdigit() and written.isdigit():
        return int(seen) > int(written)
    return False


class WriteOverlay:
    """Objects this controller wrote, shadowing a cache that has not caught up yet.

    Args:
        cache: The informer cache of the resource.
        ttl: Seconds after which an entry is dropped anyway.
        clock: Monotonic clock.
    """

    def __init__(
        self,
        cache: Reader,
        *,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache = cache
        self.ttl = ttl
        self._clock = clock
        self._written: dict[_Key, tuple[Obj, float]] = {}
        self._deleted: dict[_Key, tuple[str, float]] = {}

    def remember(self, obj: Obj) -> None:
        """Record ``obj`` as the latest version this controller wrote."""
        m = meta(obj)
        key = (str(m.get("namespace") or ""), str(m.get("name") or ""))
        self._written[key] = (obj, self._clock())
        self._deleted.pop(key, None)

    def get(self, namespace: str, name: str) -> Obj | None:
        """The object as last written by us if the cache has not shown it yet, else the cache's.

        The returned object belongs to the caller (the overlay keeps its own copy).
        """
        key = (namespace, name)
        entry = self._written.get(key)
        if entry is not None:
            if self._clock() - entry[1] <= self.ttl:
                return copy.deepcopy(entry[0])
            del self._written[key]
        return self.cache.get(namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is known of an object (e.g. after deleting it)."""
        self._written.pop((namespace, name), None)

    def __len__(self) -> int:
        return len(self._written)

    def observe(self, obj: Obj, *, deleted: bool = False) -> None:
        """The informer delivered ``obj``: drop our entry once the cache is at least as new."""
        m = meta(obj)
        key = (str(m.get("namespace") or ""), str(m.get("name") or ""))
        entry = self._written.get(key)
        if entry is None:
            return
        if deleted:
            written_uid = meta(entry[0]).get("uid")
            if not written_uid or written_uid == m.get("uid"):
                del self._written[key]
            return
        if _not_older(_rv(obj), _rv(entry[0])):
            del self._written[key]

    def handler(self) -> EventHandler:
        """An informer event handler feeding :meth:`observe`."""

        def on_update(_old: Obj, new: Obj) -> None:
            self.observe(new)

        def on_delete(obj: Obj) -> None:
            self.observe(obj, deleted=True)

        return EventHandler(self.observe, on_update, on_delete)
