"""The Sandbox reconciler: one Pod, optional headless Service and PVCs per Sandbox, and status.

This module is the top level of upstream v0.5.6 controllers/sandbox_controller.go, Reconcile:
read the Sandbox, mark or clean up expiry, run the child steps, write the status, turn the
pass's errors into a result. Each step lives in its own module and raises what goes wrong:

- children.py: reconcileChildResources, running pvc_step.py (reconcilePVCs), pod_step.py
  (reconcilePod), service_step.py (reconcileService) and the conditions (computeConditions);
- expiry_step.py: handleSandboxExpiry;
- status.py: the status write (updateStatus); error_events.py: Warning events.

The pass's :class:`ErrorCollector` is the one boundary where those errors are caught; they
end in the Ready condition and in :meth:`SandboxReconciler._finish`. Reads come from informer
caches (``Reader``), writes go to the API server (``Client``). The deliberate differences from
upstream (ReconcilerError Warning events, slow retry of errors that retrying cannot fix, local
name checks, UID preconditions on deletes) are listed in docs/guides/upstream-differences.md.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import (
    Client,
    EventRecorder,
    Obj,
    Reader,
    Request,
    Result,
    find_condition,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    uid_of,
    wrap,
)
from kube_agent_sandbox.controller.sandbox.children import reconcile_children
from kube_agent_sandbox.controller.sandbox.conditions import is_marked_expired, set_expired
from kube_agent_sandbox.controller.sandbox.error_events import ErrorEvents
from kube_agent_sandbox.controller.sandbox.errors import (
    SandboxErrorCollector as ErrorCollector,
)
from kube_agent_sandbox.controller.sandbox.errors import SandboxReconcileError
from kube_agent_sandbox.controller.sandbox.expiry import IMMEDIATE_REQUEUE, check_expiry
from kube_agent_sandbox.controller.sandbox.expiry_step import handle_expiry
from kube_agent_sandbox.controller.sandbox.status import StatusWriter
from kube_agent_sandbox.controller.sandbox.step import StepContext
from kube_agent_sandbox.controller.sandbox.writebehind import (
    DeferralClock,
    WriteDeferral,
    effective_window,
)
from kube_agent_sandbox.controller.tracing import NOOP_TRACER, Tracer

log = logging.getLogger(__name__)

DEFAULT_ERROR_REQUEUE: Final = 60.0
"""Seconds before retrying a reconcile whose errors retrying soon cannot fix."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _working_copy(cached: Obj) -> Obj:
    """A copy of the cached Sandbox whose metadata and status may be changed (spec is shared)."""
    work = dict(cached)
    work["metadata"] = copy.deepcopy(cached.get("metadata") or {})
    work["status"] = copy.deepcopy(cached.get("status") or {})
    return work


def _is_ready(status: Obj) -> bool:
    ready = find_condition(status.get("conditions"), c.CONDITION_READY)
    return ready is not None and ready.get("status") == "True"


def _became_ready(old_status: Obj, sandbox: Obj) -> bool:
    """Ready turned True in this pass (the Pod became Ready, or was adopted Ready)."""
    return _is_ready(sandbox.get("status") or {}) and not _is_ready(old_status)


def _ready_event_attributes(sandbox: Obj) -> dict[str, str]:
    """Attributes of the ``SandboxReady`` span event (the pod that serves the Sandbox)."""
    annotations = sandbox.get("metadata", {}).get("annotations") or {}
    return {
        "sandbox.name": name_of(sandbox),
        "pod.Name": str(annotations.get(c.ANNOTATION_POD_NAME) or name_of(sandbox)),
    }


def _span_attributes(sandbox: Obj) -> dict[str, str]:
    """Attributes of the ReconcileSandbox span (upstream's keys)."""
    attributes = {"sandbox.name": name_of(sandbox), "sandbox.namespace": namespace_of(sandbox)}
    created_by = (sandbox.get("metadata", {}).get("labels") or {}).get(c.LABEL_CREATED_BY)
    if created_by is not None:
        attributes[c.LABEL_CREATED_BY] = c.normalize_created_by(created_by)
    return attributes


def _set_expired(sandbox: Obj, now: dt.datetime) -> None:
    status = sandbox.setdefault("status", {})
    if status.get("conditions") is None:
        status["conditions"] = []
    set_expired(status["conditions"], sandbox, now=now)


@dataclass(frozen=True, slots=True)
class _Pass:
    """One reconcile pass: the Sandbox as read, its working copy, the status it started from."""

    request: Request
    cached: Obj
    sandbox: Obj
    old_status: Obj
    errors: ErrorCollector

    @property
    def key(self) -> tuple[str, str]:
        return (self.request.namespace, self.request.name)


class SandboxReconciler:
    """Converges one Sandbox: PVCs, Pod, headless Service, status (upstream's Reconcile).

    Args:
        client: Writes (and live reads on AlreadyExists) against the API server.
        sandboxes: Cache of Sandboxes.
        pods: Cache of Pods; must carry the :data:`POD_NAME_HASH_INDEX` index.
        services: Cache of Services.
        pvcs: Cache of PersistentVolumeClaims.
        recorder: Receives Warning events on reconcile errors (optional).
        cluster_domain: DNS domain of the cluster, for ``status.serviceFQDN``.
        clock: Source of the current time (tests pass a fixed clock).
        error_requeue_after: Seconds before retrying errors that retrying soon cannot fix.
        tracer: Receives spans and events (tracing off by default: nothing is recorded).
        write_behind_window: ``--sandbox-write-behind-window`` in seconds (0 = off); Pod
            metadata patches are deferred by at most ``min(window, 1s)``.
        monotonic: Monotonic seconds for the write-behind window (tests pass a fake).
        status_coalesce_window: ``--sandbox-status-coalesce-window`` in seconds (0 = off):
            how long a status change that only reports progress towards Ready may wait.
        keep_state: This process runs the extensions' state keeper (keepstate.py).
    """

    def __init__(
        self,
        client: Client,
        *,
        sandboxes: Reader,
        pods: Reader,
        services: Reader,
        pvcs: Reader,
        recorder: EventRecorder | None = None,
        cluster_domain: str = "cluster.local",
        clock: Callable[[], dt.datetime] = _utcnow,
        error_requeue_after: float = DEFAULT_ERROR_REQUEUE,
        tracer: Tracer = NOOP_TRACER,
        write_behind_window: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
        status_coalesce_window: float = 0.0,
        keep_state: bool = False,
    ) -> None:
        self._client = client
        self._sandboxes = sandboxes
        self._pods = pods
        self._services = services
        self._steps = StepContext(
            client=client,
            pods=pods,
            services=services,
            pvcs=pvcs,
            tracer=tracer,
            cluster_domain=cluster_domain,
            keep_state=keep_state,
        )
        self._clock = clock
        self._error_requeue_after = error_requeue_after
        self._tracer = tracer
        self._write_behind_window = effective_window(write_behind_window)
        self._deferrals = DeferralClock(now=monotonic)
        self._status = StatusWriter(
            client, coalesce_window=status_coalesce_window, clock=DeferralClock(now=monotonic)
        )
        self._events = ErrorEvents(recorder)
        # Sandboxes (key -> uid) whose expiry mark was written by pass 1, so pass 2 proceeds
        # even when the Sandbox cache has not caught up with that status write yet.
        self._marked_expired: dict[tuple[str, str], str | None] = {}

    async def reconcile(self, request: Request) -> Result:
        """Converge the Sandbox named by ``request`` (upstream's Reconcile).

        Returns:
            A timed requeue for expiry, or a slow one after errors retrying cannot fix.

        Raises:
            SandboxReconcileError: after a transient error, so the queue retries with backoff.
        """
        cached = self._sandboxes.get(request.namespace, request.name)
        if cached is None:
            self._forget(request)
            return Result()
        with self._tracer.object_span("ReconcileSandbox", cached, _span_attributes):
            return await self._reconcile_sandbox(request, cached)

    def _forget(self, request: Request) -> None:
        key = (request.namespace, request.name)
        self._marked_expired.pop(key, None)
        self._events.forget(key)
        self._status.forget(key)
        self._steps.pod_names.forget(key)
        self._deferrals.clear(key)

    async def _reconcile_sandbox(self, request: Request, cached: Obj) -> Result:
        """Steps 3-9 of 3.1: skip a terminating Sandbox, trace context, expiry or children."""
        if is_terminating(cached):
            self._forget(request)
            return Result()
        sandbox = _working_copy(cached)
        self._status.overlay((request.namespace, request.name), cached, sandbox)
        self._steps.pod_names.overlay((request.namespace, request.name), cached, sandbox)
        errors = ErrorCollector()
        with errors.step() as trace_step:
            await self._ensure_trace_context(sandbox)
        if trace_step.failed:
            return self._finish(_Pass(request, cached, sandbox, cached.get("status") or {}, errors))
        this = _Pass(request, cached, sandbox, copy.deepcopy(sandbox.get("status") or {}), errors)
        self._status.carry_held(this.key, sandbox)
        now = self._clock()
        expired, _ = check_expiry(sandbox, now)
        if expired:
            return await self._reconcile_expired(this, now)
        return await self._reconcile_active(this, now)

    async def _reconcile_expired(self, this: _Pass, now: dt.datetime) -> Result:
        """Expired: pass 1 marks Ready as expired; later passes clean up (handleSandboxExpiry)."""
        key, sandbox = this.key, this.sandbox
        marked = is_marked_expired(sandbox) or (
            key in self._marked_expired and self._marked_expired[key] == uid_of(sandbox)
        )
        if not marked:
            _set_expired(sandbox, now)
            with this.errors.step() as write:
                await self._status.write(sandbox, this.old_status)
            if write.failed:
                return self._finish(this)
            self._marked_expired[key] = uid_of(sandbox)
            log.info("sandbox %s expired: marked, cleaning up next pass", this.request)
            return Result(requeue_after=IMMEDIATE_REQUEUE)
        if not is_marked_expired(sandbox):
            # Only the memo knows the mark (the cache lags): keep it in this pass's write.
            # With the mark cached, a failed cleanup must leave the status alone (as upstream).
            _set_expired(sandbox, now)
        if await handle_expiry(self._steps, sandbox, now, this.errors):
            self._marked_expired.pop(key, None)
            return Result()
        with this.errors.step():
            await self._status.write(sandbox, this.old_status)
        return self._finish(this)

    async def _reconcile_active(self, this: _Pass, now: dt.datetime) -> Result:
        """Active: the children, then expiry again and the requeue for it; then the status."""
        key, sandbox = this.key, this.sandbox
        self._marked_expired.pop(key, None)
        deferral = None
        if self._write_behind_window > 0:
            deferral = WriteDeferral(self._deferrals, key, self._write_behind_window)
        await reconcile_children(self._steps, sandbox, now, this.errors, deferral=deferral)
        expired_now, requeue = check_expiry(sandbox, self._clock())
        if expired_now:
            _set_expired(sandbox, now)
            requeue = IMMEDIATE_REQUEUE
        if deferral is not None and deferral.deferred:
            # Wake up when the window ends, to send the skipped Pod patch
            # (docs/guides/upstream-differences.md, write-behind).
            requeue = deferral.wait if requeue is None else min(requeue, deferral.wait)
        elif deferral is not None and not this.errors.errors:
            self._deferrals.clear(key)
        held = None if this.errors.errors else self._status.hold(sandbox, this.old_status)
        if held is not None:
            # Progress towards Ready only: wait for the next change, at most the window.
            return self._finish(this, held if requeue is None else min(requeue, held))
        with this.errors.step():
            await self._status.write(sandbox, this.old_status)
        return self._finish(this, requeue)

    def _finish(self, this: _Pass, requeue: float | None = None) -> Result:
        """Log, emit events and turn the pass's errors into a result or a retry.

        A MultiplePods error is not retried at all (upstream v0.5.6 does not return it): the
        next pass comes from the owned-Pod watch, e.g. when an extra Pod is deleted.
        """
        errors = this.errors
        for error in errors.errors:
            log.warning(
                "sandbox %s: %s (%s)",
                this.request,
                error.message,
                "will retry with backoff" if error.transient else "retrying slowly",
            )
        if errors.multiple_pods is not None:
            log.warning(
                "sandbox %s: %s (waiting for the extra Pods to be deleted)",
                this.request,
                errors.multiple_pods.message,
            )
        self._events.record(this.key, this.cached, this.old_status, this.sandbox)
        if _became_ready(this.old_status, this.sandbox):
            self._tracer.add_event("SandboxReady", this.sandbox, _ready_event_attributes)
        if any(error.transient for error in errors.errors):
            raise SandboxReconcileError(errors.text)
        if errors.errors:
            slow = self._error_requeue_after
            requeue = slow if requeue is None else min(requeue, slow)
        return Result(requeue_after=requeue)

    async def _ensure_trace_context(self, sandbox: Obj) -> None:
        """With tracing on, record this reconcile's trace on a Sandbox lacking one (as Reconcile
        does).

        Raises:
            ReconcileError: ``failed to persist trace context``.
        """
        annotations = meta(sandbox).get("annotations") or {}
        if annotations.get(c.ANNOTATION_TRACE_CONTEXT):
            return
        trace_context = self._tracer.trace_context()
        if not trace_context:  # tracing off
            return
        patch = {"metadata": {"annotations": {c.ANNOTATION_TRACE_CONTEXT: trace_context}}}
        try:
            await self._client.patch(SANDBOXES, namespace_of(sandbox), name_of(sandbox), patch)
        except Exception as exc:
            raise wrap(exc, "failed to persist trace context") from exc
        meta(sandbox)["annotations"] = {**annotations, c.ANNOTATION_TRACE_CONTEXT: trace_context}
