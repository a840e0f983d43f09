"""The ``Reader`` view of the in-memory API server: a cache that is always in sync.

:class:`FakeReader` reads the live store of a ``FakeApi`` (see
:mod:`~kube_agent_sandbox.controller.runtime.fake`) and nothing else of it, so it lives apart
and is typed against the one method it calls (:class:`FakeStore`); ``FakeApi.reader`` builds it.
"""

from __future__ import annotations

import builtins
import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from kube_agent_sandbox.controller.runtime.types import IndexFunc, Obj, Resource

_Key = tuple[str, str]


class FakeStore(Protocol):
    """What :class:`FakeReader` needs of the fake API server (``FakeApi`` satisfies it)."""

    def contents(self, resource: Resource) -> dict[_Key, Obj]:
        """The live store of ``resource`` by ``(namespace, name)``."""
        ...


class FakeReader:
    """A ``Reader`` over one resource of a ``FakeApi``: a cache that is always in sync.

    Objects are handed out as deep copies, optionally through ``transform`` (as an informer's
    transform would strip them); ``by_index`` raises KeyError for an index it was not given,
    as the informer does.
    """

    def __init__(
        self,
        api: FakeStore,
        resource: Resource,
        *,
        indexes: Mapping[str, IndexFunc] | None = None,
        transform: Callable[[Obj], Obj] | None = None,
    ) -> None:
        """Read ``resource`` from ``api`` with these indexes and transform."""
        self._api = api
        self._resource = resource
        self._indexes = dict(indexes or {})
        self._transform = transform

    def _view(self, obj: Obj) -> Obj:
        view = copy.deepcopy(obj)
        return self._transform(view) if self._transform else view

    def _sorted(self) -> builtins.list[tuple[_Key, Obj]]:
        return sorted(self._api.contents(self._resource).items(), key=lambda item: item[0])

    def get(self, namespace: str, name: str) -> Obj | None:
        """The object, or None."""
        obj = self._api.contents(self._resource).get((namespace, name))
        return None if obj is None else self._view(obj)

    def list(
        self, namespace: str | None = None, *, labels: Mapping[str, str] | None = None
    ) -> builtins.list[Obj]:
        """Objects in ``namespace`` (all when None) carrying every label in ``labels``."""
        found = []
        for (ns, _), obj in self._sorted():
            if namespace is not None and ns != namespace:
                continue
            obj_labels = obj.get("metadata", {}).get("labels") or {}
            if labels and any(obj_labels.get(k) != v for k, v in labels.items()):
                continue
            found.append(self._view(obj))
        return found

    def iterate(self, namespace: str | None = None) -> Iterator[Obj]:
        """Objects in ``namespace`` (all when None), one at a time."""
        for (ns, _), obj in self._sorted():
            if namespace is None or ns == namespace:
                yield self._view(obj)

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        """Objects whose ``index`` values include ``value``."""
        func = self._indexes[index]
        return [self._view(obj) for _, obj in self._sorted() if value in func(obj)]
