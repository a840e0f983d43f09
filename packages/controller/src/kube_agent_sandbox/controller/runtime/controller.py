"""A controller: informer events in, reconcile requests out, workers in between.

Events of the primary resource enqueue that object's key; events of owned resources enqueue the
key of their controller owner when the owner's group and kind (any version) are the primary's;
watched resources map through user functions. Workers take keys from a :class:`WorkQueue` and
call the reconciler; the result decides what happens to the key (forget, delayed re-add,
rate-limited retry), as in controller-runtime, and the same metrics are recorded.

Failures differ from controller-runtime on purpose (see :mod:`.errors`): only transient ones
(conflicts, throttling, 5xx, timeouts, dropped connections, a reconciler's ``TransientError``)
are retried with the per-key backoff, and that backoff stops growing at ``transient_retry_cap``
(30 s, the informers' list/watch cap) instead of controller-runtime's 1000 s: while the API
server is down every attempt of every key fails, so after a 20-40 s outage (a restart, then a
few seconds of 403 until its RBAC authorizer has synced) keys had failed 12-16 times and, with
1000 s, waited 20 s to 5 minutes more for their next attempt; nothing else brings them back
sooner, since their objects did not change. A programming error (any other exception) is logged with
its traceback, counted in ``controller_runtime_reconcile_panics_total`` (controller-runtime's
counter of recovered panics) and retried slowly, as is an API error that repeats until someone
acts (400, 404, 405, 422): at most once per ``slow_retry`` seconds, longer when the key's
backoff is longer. Slowly and not never, because the fix may come without an event for this
key (a referenced object created, the controller upgraded); not hot, because the
same request fails the same way until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from kube_agent_sandbox.controller.runtime.errors import ErrorClass, classify
from kube_agent_sandbox.controller.runtime.informer import EventHandler, Informer
from kube_agent_sandbox.controller.runtime.metrics import RuntimeMetrics, default_metrics
from kube_agent_sandbox.controller.runtime.objects import (
    group_of,
    namespace_of,
    request_of,
)
from kube_agent_sandbox.controller.runtime.ownership import controller_ref
from kube_agent_sandbox.controller.runtime.ratelimit import RateLimiter
from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    Mapper,
    Obj,
    Predicate,
    Reconciler,
    Request,
    Resource,
    Result,
)
from kube_agent_sandbox.controller.runtime.workqueue import QueueShutDown, WorkQueue

logger = logging.getLogger(__name__)

InformerSource = Callable[[Resource], Informer]
"""Gives the (shared) informer of a resource; the manager provides it."""

Owned = Resource | tuple[Resource, Predicate | None]
Watched = tuple[Resource, Mapper]

SLOW_RETRY: Final = 60.0
"""Seconds at least between retries of a failure that retrying soon cannot fix."""
TRANSIENT_RETRY_CAP: Final = 30.0
"""Seconds at most between retries of a transient failure (the informers' list/watch cap)."""


def _pass(predicate: Predicate | None, old: Obj | None, new: Obj | None) -> bool:
    if predicate is None:
        return True
    try:
        return bool(predicate(old, new))
    except Exception:
        logger.exception("predicate failed; event dropped")
        return False


class Controller:
    """Runs one reconciler over one primary resource.

    Args:
        name: controller name (metrics label, queue name, log field).
        for_resource: the primary resource; its objects are the reconcile requests.
        reconciler: the level-triggered reconciler.
        workers: concurrent reconciles (``MaxConcurrentReconciles``); must be positive.
        for_predicate: filters primary events (``(old, new)``, see ``Predicate``).
        owns: owned resources, each alone or with a predicate; events map to the controller
            owner when it is of the primary's group and kind.
        watches: other resources with a mapper from object to requests.
        rate_limiter: retry policy of the queue (controller-runtime's default if omitted).
        metrics: metric set; when omitted, the manager's (see :meth:`use_metrics`), else the
            process default.
        slow_retry: seconds at least before a programming error or a permanent API error is
            retried (longer when the key's backoff already is).
        transient_retry_cap: seconds at most before a transient failure is retried, however
            often the key failed before.

    Raises:
        ValueError: if ``workers``, ``slow_retry`` or ``transient_retry_cap`` is not positive.
    """

    def __init__(
        self,
        name: str,
        *,
        for_resource: Resource,
        reconciler: Reconciler,
        workers: int = 1,
        for_predicate: Predicate | None = None,
        owns: Sequence[Owned] = (),
        watches: Sequence[Watched] = (),
        rate_limiter: RateLimiter | None = None,
        metrics: RuntimeMetrics | None = None,
        slow_retry: float = SLOW_RETRY,
        transient_retry_cap: float = TRANSIENT_RETRY_CAP,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be positive, got {workers}")
        if slow_retry <= 0:
            raise ValueError(f"slow_retry must be positive, got {slow_retry}")
        if transient_retry_cap <= 0:
            raise ValueError(f"transient_retry_cap must be positive, got {transient_retry_cap}")
        self.slow_retry = slow_retry
        self.transient_retry_cap = transient_retry_cap
        self.name = name
        self.for_resource = for_resource
        self.reconciler = reconciler
        self.workers = workers
        self.for_predicate = for_predicate
        self.owns: list[tuple[Resource, Predicate | None]] = [
            o if isinstance(o, tuple) else (o, None) for o in owns
        ]
        self.watches = list(watches)
        self._rate_limiter = rate_limiter
        self._explicit_metrics = metrics is not None
        self._tasks: list[asyncio.Task[None]] = []
        self._bind(metrics or default_metrics())

    def use_metrics(self, metrics: RuntimeMetrics) -> None:
        """Record into ``metrics`` unless a metric set was given explicitly (before start).

        Raises:
            RuntimeError: if the controller already runs or has queued work.
        """
        if self._explicit_metrics or metrics is self._metrics:
            return
        if self._tasks or len(self.queue) or self.queue.delayed():
            raise RuntimeError("metrics can only be changed before the controller is used")
        self._bind(metrics)

    def _bind(self, metrics: RuntimeMetrics) -> None:
        self._metrics = metrics
        self.queue: WorkQueue[Request] = WorkQueue(
            self.name, rate_limiter=self._rate_limiter, metrics=metrics
        )
        name = self.name
        m = metrics
        self._m_active = m.active_workers.labels(controller=name)
        self._m_time = m.reconcile_time_seconds.labels(controller=name)
        self._m_errors = m.reconcile_errors_total.labels(controller=name)
        self._m_terminal = m.terminal_reconcile_errors_total.labels(controller=name)
        self._m_panics = m.reconcile_panics_total.labels(controller=name)
        self._m_result = {
            r: m.reconcile_total.labels(controller=name, result=r)
            for r in ("success", "error", "requeue", "requeue_after")
        }

    # -- wiring -----------------------------------------------------------------------------
    def resources(self) -> list[Resource]:
        """Every resource whose informer this controller needs."""
        found = [self.for_resource]
        found += [r for r, _ in self.owns]
        found += [r for r, _ in self.watches]
        return found

    def register(self, informers: InformerSource) -> None:
        """Attach event handlers to the informers of every resource involved."""
        informers(self.for_resource).add_event_handler(self.primary_handler())
        for resource, predicate in self.owns:
            informers(resource).add_event_handler(self.owned_handler(predicate))
        for resource, mapper in self.watches:
            informers(resource).add_event_handler(self.mapped_handler(mapper))

    def primary_handler(self) -> EventHandler:
        """Handler enqueuing the primary object's own key."""
        pred = self.for_predicate

        def on_add(obj: Obj) -> None:
            if _pass(pred, None, obj):
                self.queue.add(request_of(obj))

        def on_update(old: Obj, new: Obj) -> None:
            if _pass(pred, old, new):
                self.queue.add(request_of(new))

        def on_delete(obj: Obj) -> None:
            if _pass(pred, obj, None):
                self.queue.add(request_of(obj))

        return EventHandler(on_add, on_update, on_delete)

    def owner_request(self, obj: Obj) -> Request | None:
        """The request of ``obj``'s controller owner if it is of the primary group and kind."""
        ref = controller_ref(obj)
        if ref is None:
            return None
        group = group_of(str(ref.get("apiVersion") or ""))
        if (group, ref.get("kind")) != self.for_resource.group_kind:
            return None
        name = ref.get("name")
        if not name:
            return None
        namespace = namespace_of(obj) if self.for_resource.namespaced else ""
        return Request(namespace, str(name))

    def owned_handler(self, predicate: Predicate | None = None) -> EventHandler:
        """Handler enqueuing the controller owner of owned objects (old and new on update)."""

        def enqueue(obj: Obj) -> None:
            req = self.owner_request(obj)
            if req is not None:
                self.queue.add(req)

        def on_add(obj: Obj) -> None:
            if _pass(predicate, None, obj):
                enqueue(obj)

        def on_update(old: Obj, new: Obj) -> None:
            if _pass(predicate, old, new):
                enqueue(old)
                enqueue(new)

        def on_delete(obj: Obj) -> None:
            if _pass(predicate, obj, None):
                enqueue(obj)

        return EventHandler(on_add, on_update, on_delete)

    def mapped_handler(self, mapper: Mapper) -> EventHandler:
        """Handler enqueuing whatever ``mapper`` returns (for old and new on update)."""

        def enqueue(obj: Obj) -> None:
            try:
                requests: Iterable[Request] = list(mapper(obj))
            except Exception:
                logger.exception("%s: mapper failed", self.name)
                return
            for req in requests:
                self.queue.add(req)

        def on_update(old: Obj, new: Obj) -> None:
            enqueue(old)
            enqueue(new)

        return EventHandler(enqueue, on_update, enqueue)

    # -- running ----------------------------------------------------------------------------
    def start(self) -> list[asyncio.Task[None]]:
        """Start the workers (idempotent); returns their tasks."""
        if not self._tasks:
            self._metrics.max_concurrent_reconciles.labels(controller=self.name).set(self.workers)
            self._tasks = [
                asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}")
                for i in range(self.workers)
            ]
        return self._tasks

    async def stop(self, grace: float = 30.0) -> bool:
        """Stop taking work and let in-flight reconciles finish for up to ``grace`` seconds.

        Returns:
            True if every in-flight reconcile finished; False if some were cancelled.
        """
        drained = await self.queue.shutdown_with_drain(grace)
        if not drained:
            logger.warning("%s: reconciles still running after %.0fs, cancelling", self.name, grace)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        return drained

    async def _worker(self) -> None:
        while True:
            try:
                req = await self.queue.get()
            except QueueShutDown:
                return
            self._m_active.inc()
            try:
                await self.reconcile_one(req)
            finally:
                self._m_active.dec()
                self.queue.done(req)

    def _reconcile_failed(self, req: Request, exc: BaseException) -> None:
        """Count a failed reconcile and requeue it as its error class asks."""
        kind = classify(exc)
        self._m_errors.inc()
        self._m_result["error"].inc()
        extra = {"controller": self.name, "request": str(req), "errorClass": kind.value}
        if kind is ErrorClass.TERMINAL:
            self._m_terminal.inc()
            self.queue.forget(req)
            logger.error("Reconciler error (terminal, not requeued): %s", exc, extra=extra)
            return
        if kind is ErrorClass.TRANSIENT:
            self.queue.add_rate_limited(req, max_delay=self.transient_retry_cap)
            logger.error("Reconciler error: %s", exc, exc_info=exc, extra=extra)
            return
        # permanent or a bug: the same request fails the same way; retry slowly
        delay = max(self.slow_retry, self.queue.rate_limiter.when(req))
        self.queue.add_after(req, delay)
        if kind is ErrorClass.PROGRAMMING:
            self._m_panics.inc()
            logger.error(
                "Reconciler bug (%s), retrying in %.0fs: %s",
                type(exc).__name__,
                delay,
                exc,
                exc_info=exc,
                extra=extra,
            )
        else:
            logger.error(
                "Reconciler error (permanent), retrying in %.0fs: %s", delay, exc, extra=extra
            )

    def _work_ended(self, req: Request, exc: BaseException) -> tuple[str, str] | None:
        """Why a failed pass is nonetheless done, from the error or its explicit causes.

        Returns:
            ``(why, API message)`` when an API error in the chain says there is nothing left to
            do: the namespace is terminating, or the reconciled object itself was deleted during
            the pass (controller-runtime's IgnoreNotFound; its delete event brings a reconcile
            that finds it gone); None otherwise.
        """
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            if isinstance(current, ApiError):
                if current.namespace_terminating:
                    return "namespace is terminating", current.message
                if current.is_not_found_of(self.for_resource, req.name):
                    return "object was deleted during the reconcile", current.message
            current = current.__cause__
        return None

    async def reconcile_one(self, req: Request) -> None:
        """Reconcile one request and requeue it as the outcome asks (never raises)."""
        started = time.monotonic()
        try:
            result = await self.reconciler.reconcile(req)
            if not isinstance(result, Result):
                # handled here, as an error: raised from the else branch it would end the worker
                raise TypeError(f"reconciler returned {result!r}, not a Result")
        except (asyncio.CancelledError, Exception) as exc:
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and (task is None or task.cancelling()):
                raise  # this worker is being stopped
            # (a CancelledError of some awaited task that was cancelled by someone else is a
            # transient error of this reconcile: retried, and it must not end the worker)
            ended = self._work_ended(req, exc)
            if ended is None:
                self._reconcile_failed(req, exc)
                return
            self.queue.forget(req)
            self._m_result["success"].inc()
            logger.info(
                "%s, nothing more to do: %s",
                *ended,
                extra={"controller": self.name, "request": str(req)},
            )
        else:
            if result.requeue_after is not None and result.requeue_after > 0:
                self.queue.forget(req)
                self.queue.add_after(req, result.requeue_after)
                self._m_result["requeue_after"].inc()
            elif result.requeue:
                self.queue.add_rate_limited(req)
                self._m_result["requeue"].inc()
            else:
                self.queue.forget(req)
                self._m_result["success"].inc()
        finally:
            self._m_time.observe(time.monotonic() - started)
