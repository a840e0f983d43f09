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

# Re-exported: the runtime names resources with the one descriptor type of api-types.
from kube_agent_sandbox.api.rest import Resource as Resource

Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON."""

PatchType = Literal["merge", "json", "strategic", "apply"]
"""``merge`` (RFC 7386), ``json`` (RFC 6902), ``strategic`` or ``apply`` (server-side apply)."""


@dataclass(frozen=True, slots=True, order=True)
class Request:
    """What a reconciler is asked to converge: one object, by key.

    Attributes:
        namespace: The object's namespace, ``""`` for cluster-scoped objects.
        name: The object's name.
    """

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

    Attributes:
        requeue_after: Seconds until the request is reconciled again; None for no timed requeue.
        requeue: Retry through the rate limiter (ignored when ``requeue_after`` is set).
    """

    requeue_after: float | None = None
    requeue: bool = False


class TerminalError(Exception):
    """A reconcile error that retrying cannot fix: logged and counted, not requeued.

    Any other exception raised by a reconcile is retried with the per-key exponential backoff.
    """


class TransientError(Exception):
    """A reconcile error that retrying soon may fix: requeued with the per-key backoff.

    Reconcilers raise a subclass after a failure they judged transient (a conflict, an
    unavailable server, a write the cache has not shown yet). Every other exception that is not
    an :class:`ApiError` or a network error counts as a programming error (see
    :mod:`kube_agent_sandbox.controller.runtime.errors`).
    """


class ApiError(Exception):
    """An error status from the API server.

    Args:
        status: The HTTP status code.
        reason: The Status ``reason`` (``NotFound``, ``Conflict``, ``AlreadyExists``...).
        message: The Status ``message``.
        body: The whole decoded Status object, when there was one.
    """

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def not_found(self) -> bool:
        """404: the object (or its namespace) does not exist."""
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """409 other than AlreadyExists: a stale resourceVersion; read again and retry."""
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def already_exists(self) -> bool:
        """409 AlreadyExists: a create of a name that is taken."""
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        """410: the requested resourceVersion is compacted away (watches relist)."""
        return self.status == 410

    def is_not_found_of(self, resource: Resource, name: str) -> bool:
        """404 naming ``name`` of ``resource`` itself (Status details), not a dependent's 404."""
        if self.status != 404:
            return False
        details = self.body.get("details") or {}
        return (
            isinstance(details, dict)
            and details.get("name") == name
            and details.get("kind") == resource.plural
            and (details.get("group") or "") == resource.group
        )

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
    """Level-triggered: converge the object named by ``request``; safe to call any time.

    A reconcile reads the current state (from caches), compares it with the desired state and
    writes the difference; the same state in gives the same writes out, and no write when
    nothing differs. It never runs twice at once for the same request.
    """

    async def reconcile(self, request: Request) -> Result:
        """Converge one object.

        Args:
            request: The object to converge (it may no longer exist).

        Returns:
            What the queue should do next: nothing, or requeue.

        Raises:
            TerminalError: Retrying cannot help; the error is logged, not retried.
            Exception: Anything else is retried with per-key exponential backoff.
        """
        ...


class Reader(Protocol):
    """Read side of an informer cache for one resource. Returned objects must not be mutated.

    Get one from :meth:`Manager.reader <kube_agent_sandbox.controller.runtime.Manager.reader>`;
    copy an object (``copy.deepcopy``) before changing it to compute a patch.
    """

    def get(self, namespace: str, name: str) -> Obj | None:
        """The cached object, or None.

        Args:
            namespace: Its namespace (``""`` for cluster-scoped objects).
            name: Its name.
        """
        ...

    def list(
        self, namespace: str | None = None, *, labels: Mapping[str, str] | None = None
    ) -> list[Obj]:
        """Cached objects, optionally of one namespace and with these labels (all must match).

        Args:
            namespace: Only this namespace; all when None.
            labels: Equality label selector.
        """
        ...

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        """Cached objects whose ``index`` function yields ``value``.

        Args:
            index: The index name (added with ``Informer.add_index``).
            value: The value looked up.

        Raises:
            KeyError: No index of that name.
        """
        ...

    def iterate(self, namespace: str | None = None) -> Iterator[Obj]:
        """Yield cached objects one at a time (for scans of the whole cache, e.g. metrics).

        Unlike :meth:`list`, a scan never holds every decoded object at once.
        """
        ...


class Client(Protocol):
    """Writes (and uncached reads) against the API server, on raw JSON.

    Every method raises :class:`ApiError` for an error status. ``namespace`` is ``""`` for
    cluster-scoped resources. Implemented by
    :class:`~kube_agent_sandbox.controller.runtime.ApiClient` and, for unit tests,
    :class:`~kube_agent_sandbox.controller.runtime.FakeApi`.
    """

    async def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        """Read one object from the API server (not the cache)."""
        ...

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Obj:
        """One page of a LIST (the ``*List`` object with ``items`` and ``metadata.continue``)."""
        ...

    async def create(
        self, resource: Resource, namespace: str, body: Obj, *, field_manager: str | None = None
    ) -> Obj:
        """Create ``body``; returns the created object."""
        ...

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
        """Replace the object (or its ``status`` subresource); 409 on a stale resourceVersion."""
        ...

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
        """Patch the object (a merge patch unless ``patch_type`` says otherwise)."""
        ...

    async def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> Obj | None:
        """Delete the object; ``preconditions`` (``uid``, ``resourceVersion``) guard it."""
        ...


class EventRecorder(Protocol):
    """Emits events.k8s.io/v1 Events about an object (best effort, never raises).

    Get one from :meth:`Manager.event_recorder
    <kube_agent_sandbox.controller.runtime.Manager.event_recorder>`; repeated events are
    aggregated into a series as client-go's recorder does.
    """

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None:
        """Record an Event about ``obj``.

        Args:
            obj: The object the event is about (``regarding``).
            type_: ``Normal`` or ``Warning``.
            reason: Short CamelCase reason.
            action: What was done, e.g. ``Create``.
            note: Human-readable message.
        """
        ...


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
    ) -> Obj:
        """One page of a LIST (its ``metadata.continue`` names the next page)."""
        ...

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """The events of a WATCH from ``resource_version``, until the server ends the stream."""
        ...


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

    async def start(self) -> None:
        """Start; return once the component serves."""
        ...

    async def stop(self) -> None:
        """Stop and release resources (idempotent)."""
        ...
