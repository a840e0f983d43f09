"""The contracts between the runtime and the reconcilers built on it.

Reconcilers depend only on these types (not on the concrete cache, client or manager), so they
can be unit-tested with in-memory fakes and the runtime can change underneath them. Objects are
plain JSON dicts as the API server sends them: hot paths never build model classes.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON."""

PatchType = Literal["merge", "json", "strategic", "apply"]


@dataclass(frozen=True, slots=True)
class Resource:
    """Identifies a REST resource: what a client needs to build URLs, and its Kind."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_kind(self) -> tuple[str, str]:
        return (self.group, self.kind)


@dataclass(frozen=True, slots=True, order=True)
class Request:
    """What a reconciler is asked to converge: one object, by key."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile asks of the queue: nothing, or a timed requeue.

    ``requeue_after`` (seconds) re-adds the request after that delay. ``requeue=True`` without a
    delay re-adds it through the rate limiter (exponential per-key backoff), as controller-runtime's
    ``Result{Requeue: true}`` does.
    """

    requeue_after: float | None = None
    requeue: bool = False


class TerminalError(Exception):
    """A reconcile error that retrying cannot fix: logged and counted, not requeued."""


class TransientError(Exception):
    """A reconcile error that retrying soon may fix: requeued with the per-key backoff.

    Reconcilers raise a subclass after a failure they judged transient (a conflict, an
    unavailable server, a write the cache has not shown yet). Every other exception that is not
    an :class:`ApiError` or a network error counts as a programming error (see
    :mod:`kube_agent_sandbox.controller.runtime.errors`).
    """


class ApiError(Exception):
    """An error status from the API server."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def namespace_terminating(self) -> bool:
        """A create refused because its namespace is being deleted (cause NamespaceTerminating).

        Nothing can be created there any more and the namespace's deletion removes what is
        left, so controllers treat it as the end of the work, as client-go's controllers do.
        """
        if self.status != 403:
            return False
        causes = (self.body.get("details") or {}).get("causes") or ()
        return any(
            isinstance(cause, dict) and cause.get("reason") == "NamespaceTerminating"
            for cause in causes
        )


class Reconciler(Protocol):
    """Level-triggered: converge the object named by ``request``; safe to call any time."""

    async def reconcile(self, request: Request) -> Result: ...


class Reader(Protocol):
    """Read side of an informer cache for one resource. Returned objects must not be mutated."""

    def get(self, namespace: str, name: str) -> Obj | None: ...

    def list(
        self, namespace: str | None = None, *, labels: Mapping[str, str] | None = None
    ) -> list[Obj]: ...

    def by_index(self, index: str, value: str) -> builtins.list[Obj]: ...

    def iterate(self, namespace: str | None = None) -> Iterator[Obj]:
        """Yield cached objects one at a time (for scans of the whole cache, e.g. metrics).

        Unlike :meth:`list`, a scan never holds every decoded object at once.
        """
        ...


class Client(Protocol):
    """Writes (and uncached reads) against the API server, on raw JSON."""

    async def get(self, resource: Resource, namespace: str, name: str) -> Obj: ...

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Obj: ...

    async def create(
        self, resource: Resource, namespace: str, body: Obj, *, field_manager: str | None = None
    ) -> Obj: ...

    async def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Obj,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Obj: ...

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
    ) -> Obj: ...

    async def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> Obj | None: ...


class EventRecorder(Protocol):
    """Emits events.k8s.io/v1 Events about an object (best effort, never raises)."""

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None: ...


WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream (ERROR events are raised as :class:`ApiError` instead)."""

    type: WatchEventType
    object: Obj


class ListWatcher(Protocol):
    """What an informer needs from a client: paginated LIST and a WATCH stream.

    ``watch`` yields events until the server ends the stream (normal on ``timeout_seconds``) and
    raises :class:`ApiError` for an ERROR event (410 Gone when ``resource_version`` is too old).
    """

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Obj: ...

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
    ) -> AsyncIterator[WatchEvent]: ...


Predicate = Callable[[Obj | None, Obj | None], bool]
"""Filters events: called as ``(None, new)`` on add, ``(old, new)`` on update, ``(old, None)``
on delete; an event is handled when it returns True."""

Mapper = Callable[[Obj], Iterable[Request]]
"""Maps an object of a watched resource to the requests it should trigger."""

IndexFunc = Callable[[Obj], Iterable[str]]
"""Computes the index values of a cached object (e.g. the UID of its controller owner)."""


class Runnable(Protocol):
    """Something the manager starts and stops with the process, e.g. a webhook server.

    ``start`` returns once the component serves; ``stop`` releases it (idempotent).
    """

    async def start(self) -> None: ...

    async def stop(self) -> None: ...
