"""A fluent builder for controllers, as controller-runtime's ``builder`` package offers.

:class:`~kube_agent_sandbox.controller.runtime.controller.Controller` takes everything as
keyword arguments; operator authors coming from Go expect
``NewControllerManagedBy(mgr).For(...).Owns(...).Watches(...).Complete(r)``. The builder
collects the same settings step by step, then creates the controller, records into the
manager's metrics and adds it to the manager in one call. It adds no behaviour of its own: a
controller built either way is the same.

A watch that needs more than a mapper (a handler with side effects, a delayed enqueue) is
declared with :meth:`ControllerBuilder.watches_handler`: its handler gets a
:class:`ControllerHandle`, the narrow part of the controller an event handler may use, so
setup code never reaches into a controller's queue (controller-runtime's ``Watches`` with a
custom ``handler.EventHandler``, which receives the queue).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, Self

from kube_agent_sandbox.controller.runtime.controller import Controller
from kube_agent_sandbox.controller.runtime.informer import EventHandler
from kube_agent_sandbox.controller.runtime.ratelimit import RateLimiter
from kube_agent_sandbox.controller.runtime.types import (
    Mapper,
    Obj,
    Predicate,
    Reconciler,
    Request,
    Resource,
)

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.runtime.manager import Manager

__all__ = ["ControllerBuilder", "ControllerHandle", "HandlerFactory", "RequestQueue"]


class RequestQueue(Protocol):
    """Where an event handler puts the requests it maps an event to."""

    def add(self, item: Request) -> None:
        """Queue ``item`` now (once, however often it is added before it is processed)."""
        ...

    def add_after(self, item: Request, delay: float) -> None:
        """Queue ``item`` after ``delay`` seconds; an earlier pending deadline wins."""
        ...


class ControllerHandle:
    """What a custom event handler may use of its controller: queueing and the owner mapping.

    Args:
        controller: The controller the handler feeds.
    """

    def __init__(self, controller: Controller) -> None:
        self._controller = controller

    def add(self, item: Request) -> None:
        """Queue ``item`` now."""
        self._controller.queue.add(item)

    def add_after(self, item: Request, delay: float) -> None:
        """Queue ``item`` after ``delay`` seconds; an earlier pending deadline wins."""
        self._controller.queue.add_after(item, delay)

    def owner_request(self, obj: Obj) -> Request | None:
        """The request of ``obj``'s controller owner if it is of the primary group and kind."""
        return self._controller.owner_request(obj)


HandlerFactory = Callable[[ControllerHandle], EventHandler]
"""Builds a watch's event handler once the controller exists."""


class ControllerBuilder:
    """Builds a :class:`Controller` and adds it to a manager.

    Args:
        manager: The manager the controller is added to (it provides the informers).
        name: The controller's name (metrics label, queue name, log field); unique per
            manager.

    Example:
        ```python
        controller = (
            ControllerBuilder(manager, "label-counter")
            .for_resource(CONFIG_MAPS, predicate=has_label)
            .owns(PODS)
            .watches(NAMESPACES, namespace_to_requests)
            .with_workers(2)
            .complete(LabelCounter(manager.client, manager.reader(CONFIG_MAPS)))
        )
        ```
    """

    def __init__(self, manager: Manager, name: str) -> None:
        if not name:
            raise ValueError("a controller needs a name")
        self._manager = manager
        self._name = name
        self._for: Resource | None = None
        self._for_predicate: Predicate | None = None
        self._owns: list[tuple[Resource, Predicate | None]] = []
        self._watches: list[tuple[Resource, Mapper]] = []
        self._handlers: list[tuple[Resource, HandlerFactory]] = []
        self._workers = 1
        self._rate_limiter: RateLimiter | None = None

    def for_resource(self, resource: Resource, *, predicate: Predicate | None = None) -> Self:
        """Set the primary resource: its objects are the reconcile requests (``For``).

        Args:
            resource: The primary resource.
            predicate: Filters its events; all pass when omitted.

        Returns:
            This builder.

        Raises:
            ValueError: The primary resource was set already.
        """
        if self._for is not None:
            raise ValueError(f"controller {self._name}: primary resource set twice")
        self._for = resource
        self._for_predicate = predicate
        return self

    def owns(self, resource: Resource, *, predicate: Predicate | None = None) -> Self:
        """Reconcile the controller owner when an owned object changes (``Owns``).

        An event maps to the object's controller ``ownerReference`` when that owner is of the
        primary resource's group and kind.

        Args:
            resource: The owned resource.
            predicate: Filters its events; all pass when omitted.

        Returns:
            This builder.
        """
        self._owns.append((resource, predicate))
        return self

    def watches(self, resource: Resource, mapper: Mapper) -> Self:
        """Reconcile whatever ``mapper`` returns when an object of ``resource`` changes.

        Args:
            resource: The watched resource.
            mapper: Maps a changed object to the requests to reconcile (``Watches`` with
                ``EnqueueRequestsFromMapFunc``).

        Returns:
            This builder.
        """
        self._watches.append((resource, mapper))
        return self

    def watches_handler(self, resource: Resource, handler: HandlerFactory) -> Self:
        """Feed the controller from a handler of its own on ``resource``'s informer.

        For what a mapper cannot say: side effects before queueing (lowering expectations), a
        delayed enqueue, a filter on the kind of event. The handlers are attached after the
        controller's own, in the order they were declared.

        Args:
            resource: The watched resource.
            handler: Builds the event handler from the controller's :class:`ControllerHandle`.

        Returns:
            This builder.
        """
        self._handlers.append((resource, handler))
        return self

    def with_workers(self, workers: int) -> Self:
        """Set the number of concurrent reconciles (``MaxConcurrentReconciles``, default 1).

        Args:
            workers: A positive count.

        Returns:
            This builder.

        Raises:
            ValueError: ``workers`` is not positive.
        """
        if workers < 1:
            raise ValueError(f"workers must be positive, got {workers}")
        self._workers = workers
        return self

    def with_rate_limiter(self, rate_limiter: RateLimiter) -> Self:
        """Replace the retry policy (controller-runtime's default: per-key backoff + bucket).

        Args:
            rate_limiter: The queue's rate limiter.

        Returns:
            This builder.
        """
        self._rate_limiter = rate_limiter
        return self

    def complete(self, reconciler: Reconciler) -> Controller:
        """Create the controller, add it to the manager and return it (``Complete``).

        Args:
            reconciler: The level-triggered reconciler.

        Returns:
            The controller (its workers start when the manager leads).

        Raises:
            ValueError: No primary resource was set, or the manager already has a controller
                of this name.
        """
        if self._for is None:
            raise ValueError(f"controller {self._name}: for_resource() was not called")
        controller = Controller(
            self._name,
            for_resource=self._for,
            reconciler=reconciler,
            workers=self._workers,
            for_predicate=self._for_predicate,
            owns=list(self._owns),
            watches=list(self._watches),
            rate_limiter=self._rate_limiter,
            metrics=self._manager.metrics,
        )
        self._manager.add_controller(controller)
        handle = ControllerHandle(controller)
        for resource, handler in self._handlers:
            self._manager.informer(resource).add_event_handler(handler(handle))
        return controller
