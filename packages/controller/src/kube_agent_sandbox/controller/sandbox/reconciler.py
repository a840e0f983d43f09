"""The Sandbox reconciler: one Pod, optional headless Service and PVCs per Sandbox, and status.

Reads come from informer caches (``Reader``), writes go to the API server (``Client``). The
flow follows upstream v0.5.6 (spec section 3 and the v0.5.6 delta, section 3: strict
Sandbox-to-Pod mapping, the PodScheduled condition, write-behind Pod patches) step for step so
both implementations produce the same objects and the same status; the deliberate differences
(ReconcilerError Warning events, slow retry of errors that retrying cannot fix, local name
checks, UID preconditions on deletes) are listed in docs/guides/upstream-differences.md.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash as compute_name_hash
from kube_agent_sandbox.controller.runtime.mergepatch import create_merge_patch
from kube_agent_sandbox.controller.runtime.objects import name_of, namespace_of
from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    Client,
    EventRecorder,
    Obj,
    Reader,
    Request,
    Resource,
    Result,
)
from kube_agent_sandbox.controller.sandbox.conditions import (
    apply_conditions,
    find_condition,
    is_marked_expired,
    set_expired,
)
from kube_agent_sandbox.controller.sandbox.errors import (
    ChildError,
    MultiplePodsError,
    SandboxReconcileError,
    join_messages,
    wrap,
)
from kube_agent_sandbox.controller.sandbox.expiry import IMMEDIATE_REQUEUE, check_expiry
from kube_agent_sandbox.controller.sandbox.ownership import (
    Ownership,
    cannot_adopt_message,
    check_ownership,
    is_owned_by,
    may_adopt,
    owned_by_other_message,
    quote,
    set_controller_reference,
)
from kube_agent_sandbox.controller.sandbox.pod import (
    POD_NAME_HASH_INDEX,
    desired_pod,
    resolve_pod_name,
    update_pod_metadata,
)
from kube_agent_sandbox.controller.sandbox.pvc import desired_pvc, pvc_name_problem
from kube_agent_sandbox.controller.sandbox.resources import (
    PODS,
    PVCS,
    SANDBOXES,
    SERVICES,
)
from kube_agent_sandbox.controller.sandbox.service import (
    desired_service,
    service_fqdn,
    service_name_problem,
    service_ports_equal,
    service_ports_for_sandbox,
)
from kube_agent_sandbox.controller.sandbox.status import status_patch
from kube_agent_sandbox.controller.sandbox.writebehind import (
    DeferralClock,
    WriteDeferral,
    effective_window,
)
from kube_agent_sandbox.controller.tracing import NOOP_TRACER, Tracer

log = logging.getLogger(__name__)

DEFAULT_ERROR_REQUEUE: Final = 60.0
"""Seconds before retrying a reconcile whose errors retrying soon cannot fix."""

EVENT_NOTE_LIMIT: Final = 1024
"""events.k8s.io/v1 rejects notes longer than 1 kB."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _meta(obj: Obj) -> dict[str, Any]:
    meta: dict[str, Any] = obj.setdefault("metadata", {})
    return meta


def _uid(obj: Obj) -> str | None:
    uid = obj.get("metadata", {}).get("uid")
    return str(uid) if uid else None


def _resource_version(obj: Obj) -> str | None:
    rv = obj.get("metadata", {}).get("resourceVersion")
    return str(rv) if rv else None


def _uid_precondition(obj: Obj) -> dict[str, str] | None:
    uid = _uid(obj)
    return {"uid": uid} if uid else None


def _terminating(obj: Obj) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def _working_copy(cached: Obj) -> Obj:
    """A copy of the cached Sandbox whose metadata and status may be changed (spec is shared)."""
    work = dict(cached)
    work["metadata"] = copy.deepcopy(cached.get("metadata") or {})
    work["status"] = copy.deepcopy(cached.get("status") or {})
    return work


def _span_attributes(sandbox: Obj) -> dict[str, str]:
    """Attributes of the ReconcileSandbox span (upstream's keys)."""
    attributes = {"sandbox.name": name_of(sandbox), "sandbox.namespace": namespace_of(sandbox)}
    created_by = (sandbox.get("metadata", {}).get("labels") or {}).get(c.LABEL_CREATED_BY)
    if created_by is not None:
        attributes[c.LABEL_CREATED_BY] = c.normalize_created_by(created_by)
    return attributes


def _pod_event_attributes(pod: Obj) -> dict[str, str]:
    phase = (pod.get("status") or {}).get("phase") or ""
    return {"pod.Name": name_of(pod), "pod.Phase": str(phase)}


@dataclass
class _ChildOutcome:
    errors: list[ChildError] = field(default_factory=list)
    multiple_pods: MultiplePodsError | None = None


class SandboxReconciler:
    """Converges one Sandbox: PVCs, Pod, headless Service, status (spec section 3).

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
    ) -> None:
        self._client = client
        self._sandboxes = sandboxes
        self._pods = pods
        self._services = services
        self._pvcs = pvcs
        self._recorder = recorder
        self._cluster_domain = cluster_domain
        self._clock = clock
        self._error_requeue_after = error_requeue_after
        self._tracer = tracer
        self._write_behind_window = effective_window(write_behind_window)
        self._deferrals = DeferralClock(now=monotonic)
        # Sandboxes (key -> uid) whose expiry mark was written by pass 1, so pass 2 proceeds
        # even when the Sandbox cache has not caught up with that status write yet.
        self._marked_expired: dict[tuple[str, str], str | None] = {}
        # Last Warning emitted per Sandbox, so a lagging cache (old status read again) does not
        # repeat it. Dropped once the Sandbox is no longer in error or is gone.
        self._last_warning: dict[tuple[str, str], tuple[str, str]] = {}
        # Read-your-writes for status: the status this controller last wrote per Sandbox, with
        # the UID and resourceVersion of the object it was computed from. While the cache still
        # shows that resourceVersion (it has not delivered the write yet), passes start from
        # the written status instead of the stale one, so they do not send the same status
        # again (each owned-Pod event would otherwise repeat it until the cache caught up).
        self._written_status: dict[tuple[str, str], tuple[str | None, str | None, Obj]] = {}

    # --- top level ------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        """Converge the Sandbox named by ``request`` (spec section 3.1).

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
        self._last_warning.pop(key, None)
        self._written_status.pop(key, None)
        self._deferrals.clear(key)

    async def _reconcile_sandbox(self, request: Request, cached: Obj) -> Result:
        key = (request.namespace, request.name)
        if _terminating(cached):
            self._forget(request)
            return Result()
        sandbox = _working_copy(cached)
        written = self._written_status.pop(key, None)
        if written is not None and written[:2] == (_uid(cached), _resource_version(cached)):
            # The cache has not shown our last status write yet: start from what we wrote.
            sandbox["status"] = copy.deepcopy(written[2])
            self._written_status[key] = written
        trace_error = await self._ensure_trace_context(sandbox)
        if trace_error is not None:
            old = cached.get("status") or {}
            return self._finish(request, cached, old, sandbox, [trace_error], None)
        old_status: Obj = copy.deepcopy(sandbox.get("status") or {})
        now = self._clock()
        errors: list[ChildError] = []
        requeue: float | None = None
        multiple: MultiplePodsError | None = None

        expired, _ = check_expiry(sandbox, now)
        if expired:
            marked = is_marked_expired(sandbox) or (
                key in self._marked_expired and self._marked_expired[key] == _uid(sandbox)
            )
            if not marked:
                self._set_expired(sandbox, now)
                error = await self._write_status(sandbox, old_status)
                if error is not None:
                    return self._finish(request, cached, old_status, sandbox, [error], None)
                self._marked_expired[key] = _uid(sandbox)
                log.info("sandbox %s expired: marked, cleaning up next pass", request)
                return Result(requeue_after=IMMEDIATE_REQUEUE)
            if not is_marked_expired(sandbox):
                # Only the memo knows the mark (the cache lags): keep it in this pass's write.
                # With the mark cached, a failed cleanup must leave the status alone (3.6).
                self._set_expired(sandbox, now)
            deleted, errors = await self._handle_expiry(sandbox, now)
            if deleted:
                self._marked_expired.pop(key, None)
                return Result()
        else:
            self._marked_expired.pop(key, None)
            deferral = None
            if self._write_behind_window > 0:
                deferral = WriteDeferral(self._deferrals, key, self._write_behind_window)
            outcome = await self._reconcile_children(sandbox, now, deferral=deferral)
            errors, multiple = outcome.errors, outcome.multiple_pods
            expired_now, requeue = check_expiry(sandbox, self._clock())
            if expired_now:
                self._set_expired(sandbox, now)
                requeue = IMMEDIATE_REQUEUE
            if deferral is not None and deferral.deferred:
                # Wake up when the window ends, to send the skipped Pod patch (delta 3.3).
                requeue = deferral.wait if requeue is None else min(requeue, deferral.wait)
            elif deferral is not None and not errors:
                self._deferrals.clear(key)

        status_error = await self._write_status(sandbox, old_status)
        if status_error is not None:
            errors.append(status_error)
        return self._finish(
            request, cached, old_status, sandbox, errors, requeue, multiple_pods=multiple
        )

    def _finish(
        self,
        request: Request,
        cached: Obj,
        old_status: Obj,
        sandbox: Obj,
        errors: list[ChildError],
        requeue: float | None,
        *,
        multiple_pods: MultiplePodsError | None = None,
    ) -> Result:
        """Log, emit events and turn the pass's errors into a result or a retry.

        A MultiplePods error is not retried at all (upstream v0.5.6 does not return it): the
        next pass comes from the owned-Pod watch, e.g. when an extra Pod is deleted.
        """
        for error in errors:
            log.warning(
                "sandbox %s: %s (%s)",
                request,
                error.message,
                "will retry with backoff" if error.transient else "retrying slowly",
            )
        if multiple_pods is not None:
            log.warning(
                "sandbox %s: %s (waiting for the extra Pods to be deleted)",
                request,
                multiple_pods.message,
            )
        self._record_events(request, cached, old_status, sandbox)
        if any(error.transient for error in errors):
            raise SandboxReconcileError(join_messages(errors))
        if errors:
            slow = self._error_requeue_after
            requeue = slow if requeue is None else min(requeue, slow)
        return Result(requeue_after=requeue)

    def _record_events(self, request: Request, cached: Obj, old_status: Obj, sandbox: Obj) -> None:
        """Emit a Warning when the Ready condition turns into (another) error."""
        key = (request.namespace, request.name)
        new = find_condition(sandbox.get("status", {}).get("conditions"), c.CONDITION_READY)
        if new is None or new.get("reason") not in (
            c.REASON_RECONCILER_ERROR,
            c.REASON_MULTIPLE_PODS,
        ):
            self._last_warning.pop(key, None)
            return
        current = (str(new.get("reason", "")), str(new.get("message", "")))
        old = find_condition(old_status.get("conditions"), c.CONDITION_READY)
        old_pair = (old.get("reason"), old.get("message")) if old is not None else None
        last = self._last_warning.get(key)
        if current[0] == c.REASON_MULTIPLE_PODS:
            # Upstream: once per episode, i.e. only when Ready was not MultiplePods before
            # (a changed pod count is not a new episode).
            if (old_pair and old_pair[0] == current[0]) or (last and last[0] == current[0]):
                return
        elif old_pair == current or last == current:
            return
        if self._recorder is None:
            return
        self._last_warning[key] = current
        note = current[1]
        if len(note) > EVENT_NOTE_LIMIT:
            note = note[: EVENT_NOTE_LIMIT - 3] + "..."
        self._recorder.event(
            cached,
            type_="Warning",
            reason=current[0],
            action=c.EVENT_ACTION_RECONCILING,
            note=note,
        )

    @staticmethod
    def _set_expired(sandbox: Obj, now: dt.datetime) -> None:
        status = sandbox.setdefault("status", {})
        if status.get("conditions") is None:
            status["conditions"] = []
        set_expired(status["conditions"], sandbox, now=now)

    async def _write_status(self, sandbox: Obj, old_status: Obj) -> ChildError | None:
        patch = status_patch(old_status, sandbox.get("status"))
        if patch is None:
            return None
        key = (namespace_of(sandbox), name_of(sandbox))
        self._written_status.pop(key, None)
        try:
            await self._client.patch(SANDBOXES, key[0], key[1], patch, subresource="status")
        except ApiError as exc:
            if exc.not_found:
                return None  # deleted mid-reconcile
            return wrap(exc, "failed to patch sandbox status")
        except Exception as exc:
            return wrap(exc, "failed to patch sandbox status")
        self._written_status[key] = (
            _uid(sandbox),
            _resource_version(sandbox),
            copy.deepcopy(sandbox.get("status") or {}),
        )
        return None

    async def _ensure_trace_context(self, sandbox: Obj) -> ChildError | None:
        """With tracing on, record this reconcile's trace on a Sandbox lacking one (3.1 step 4)."""
        annotations = _meta(sandbox).get("annotations") or {}
        if annotations.get(c.ANNOTATION_TRACE_CONTEXT):
            return None
        trace_context = self._tracer.trace_context()
        if not trace_context:  # tracing off
            return None
        patch = {"metadata": {"annotations": {c.ANNOTATION_TRACE_CONTEXT: trace_context}}}
        try:
            await self._client.patch(SANDBOXES, namespace_of(sandbox), name_of(sandbox), patch)
        except Exception as exc:
            return wrap(exc, "failed to persist trace context")
        _meta(sandbox)["annotations"] = {**annotations, c.ANNOTATION_TRACE_CONTEXT: trace_context}
        return None

    # --- children ---------------------------------------------------------------------------

    async def _reconcile_children(
        self, sandbox: Obj, now: dt.datetime, *, deferral: WriteDeferral | None = None
    ) -> _ChildOutcome:
        """PVCs, Pod, status fields, Service, conditions (spec section 3.2)."""
        name_hash = compute_name_hash(name_of(sandbox))
        outcome = _ChildOutcome()
        with self._tracer.span("reconcilePVCs"):
            pvc_error = await self._reconcile_pvcs(sandbox, name_hash)
        if pvc_error is not None:
            outcome.errors.append(pvc_error)
        with self._tracer.span("reconcilePod"):
            pod, pod_error = await self._reconcile_pod(sandbox, name_hash, deferral=deferral)
        if isinstance(pod_error, MultiplePodsError):
            outcome.multiple_pods = pod_error
        elif pod_error is not None:
            outcome.errors.append(pod_error)

        status = sandbox.setdefault("status", {})
        if pod is None:
            status["podIPs"] = None
            status["nodeName"] = ""
        else:
            status["selector"] = f"{c.LABEL_SANDBOX_NAME_HASH}={name_hash}"
            if is_owned_by(pod, sandbox):
                pod_status = pod.get("status") or {}
                ips = [str(ip.get("ip", "")) for ip in pod_status.get("podIPs") or ()]
                status["podIPs"] = ips or None
                status["nodeName"] = (pod.get("spec") or {}).get("nodeName") or ""
            else:
                status["podIPs"] = None
                status["nodeName"] = ""

        service: Obj | None = None
        if outcome.multiple_pods is None:
            # With an ambiguous pod mapping no routing Service is created or changed.
            service, service_error = await self._reconcile_service(sandbox, name_hash)
            if service_error is not None:
                outcome.errors.append(service_error)

        apply_conditions(
            sandbox,
            pod=pod,
            pod_failed=pod_error is not None,
            service=service,
            error_text=join_messages(outcome.errors),
            multiple_pods_text=outcome.multiple_pods.message if outcome.multiple_pods else None,
            now=now,
        )
        return outcome

    async def _reconcile_pvcs(self, sandbox: Obj, name_hash: str) -> ChildError | None:
        """Create or adopt one PVC per volumeClaimTemplate; stop at the first error (3.4)."""
        namespace, sandbox_name = namespace_of(sandbox), name_of(sandbox)
        for template in sandbox.get("spec", {}).get("volumeClaimTemplates") or ():
            body = desired_pvc(sandbox, template, name_hash)
            pvc_name = name_of(body)
            problem = pvc_name_problem(pvc_name)
            if problem is not None:
                template_name = (template.get("metadata") or {}).get("name", "")
                return ChildError(
                    f"cannot create PVC for volumeClaimTemplate {quote(template_name)}: "
                    f"name {quote(pvc_name)} {problem}",
                    transient=False,
                )
            pvc = self._pvcs.get(namespace, pvc_name)
            if pvc is None:
                try:
                    await self._client.create(
                        PVCS, namespace, body, field_manager=c.FIELD_OWNER_SANDBOX_CONTROLLER
                    )
                    log.info("created PVC %s/%s", namespace, pvc_name)
                    continue
                except ApiError as exc:
                    if not exc.already_exists:
                        return wrap(exc)
                except Exception as exc:
                    return wrap(exc)
                try:
                    pvc = await self._client.get(PVCS, namespace, pvc_name)
                except Exception as exc:
                    return wrap(exc, "failed to get PVC")
            ownership, ref = check_ownership(pvc, sandbox)
            if ownership is Ownership.OTHER:
                assert ref is not None
                return ChildError(
                    owned_by_other_message("PVC", pvc_name, ref, sandbox_name), transient=False
                )
            if ownership is Ownership.UNOWNED:
                if not may_adopt(pvc, name_hash):
                    return ChildError(cannot_adopt_message("PVC", pvc_name), transient=False)
                work = {"metadata": copy.deepcopy(pvc.get("metadata") or {})}
                set_controller_reference(work, sandbox)
                patch = create_merge_patch({"metadata": pvc.get("metadata") or {}}, work)
                try:
                    await self._client.patch(PVCS, namespace, pvc_name, patch)
                except Exception as exc:
                    return wrap(exc, "failed to patch PVC with owner reference")
                log.info("adopted PVC %s/%s", namespace, pvc_name)
        return None

    async def _reconcile_pod(
        self, sandbox: Obj, name_hash: str, *, deferral: WriteDeferral | None = None
    ) -> tuple[Obj | None, ChildError | None]:
        """Find, adopt, delete (suspended) or create the Sandbox's Pod (spec section 3.3)."""
        namespace = namespace_of(sandbox)
        owned = [p for p in self._pod_candidates(namespace, name_hash) if is_owned_by(p, sandbox)]
        pod_name = resolve_pod_name(sandbox)
        pod = self._pods.get(namespace, pod_name)
        if pod is None:
            error = await self._clear_pod_name_annotation(sandbox)
            if error is not None:
                return None, error
        if (
            pod is not None
            and is_owned_by(pod, sandbox)
            and all(name_of(p) != name_of(pod) for p in owned)
        ):
            owned.append(pod)
        if len(owned) > 1:
            return None, MultiplePodsError(len(owned))
        if len(owned) == 1 and (pod is None or name_of(pod) != name_of(owned[0])):
            # The controller reference is authoritative over the name annotation.
            error = await self._clear_pod_name_annotation(sandbox)
            if error is not None:
                return None, error
            pod = owned[0]

        if sandbox.get("spec", {}).get("operatingMode") == c.OPERATING_MODE_SUSPENDED:
            return await self._suspend_pod(sandbox, pod)
        if pod is not None:
            return await self._reconcile_existing_pod(sandbox, pod, name_hash, deferral=deferral)
        return await self._create_pod(sandbox, name_hash, deferral=deferral)

    def _pod_candidates(self, namespace: str, name_hash: str) -> list[Obj]:
        try:
            return self._pods.by_index(POD_NAME_HASH_INDEX, f"{namespace}/{name_hash}")
        except KeyError:  # a cache without the index: fall back to a label scan
            return self._pods.list(namespace, labels={c.LABEL_SANDBOX_NAME_HASH: name_hash})

    async def _suspend_pod(
        self, sandbox: Obj, pod: Obj | None
    ) -> tuple[Obj | None, ChildError | None]:
        if pod is not None:
            ownership, ref = check_ownership(pod, sandbox)
            if ownership is Ownership.OWNED:
                if _terminating(pod):
                    return pod, None
                try:
                    await self._client.delete(
                        PODS, namespace_of(pod), name_of(pod), preconditions=_uid_precondition(pod)
                    )
                    log.info(
                        "deleted pod %s/%s: sandbox suspended", namespace_of(pod), name_of(pod)
                    )
                    return pod, None
                except ApiError as exc:
                    if not exc.not_found:
                        return pod, wrap(exc, "failed to delete pod")
                    pod = None  # already gone
                except Exception as exc:
                    return pod, wrap(exc, "failed to delete pod")
            else:
                log.info(
                    "sandbox %s/%s suspended: not deleting pod %s (%s)",
                    namespace_of(sandbox),
                    name_of(sandbox),
                    name_of(pod),
                    "unowned" if ref is None else f"owned by {ref.get('kind')}/{ref.get('name')}",
                )
        error = await self._clear_pod_name_annotation(sandbox)
        return pod, error

    async def _reconcile_existing_pod(
        self, sandbox: Obj, pod: Obj, name_hash: str, *, deferral: WriteDeferral | None = None
    ) -> tuple[Obj | None, ChildError | None]:
        self._tracer.add_event("ExistingPodStatusObserved", pod, _pod_event_attributes)
        ownership, ref = check_ownership(pod, sandbox)
        pod_name = name_of(pod)
        if ownership is Ownership.OTHER:
            assert ref is not None
            error = await self._clear_pod_name_annotation(sandbox)
            if error is not None:
                return None, error
            return None, ChildError(
                owned_by_other_message("pod", pod_name, ref, name_of(sandbox)), transient=False
            )
        work: Obj = {"metadata": copy.deepcopy(pod.get("metadata") or {})}
        adopting = ownership is Ownership.UNOWNED
        if adopting:
            if not may_adopt(pod, name_hash):
                return None, ChildError(cannot_adopt_message("pod", pod_name), transient=False)
            set_controller_reference(work, sandbox)
        changed = update_pod_metadata(work, sandbox, name_hash)
        if changed and not adopting and deferral is not None and not deferral.should_write():
            # Write-behind: skip the patch this pass; status is computed from the Pod as it
            # will be, so readiness never waits for the deferred write.
            log.debug(
                "deferred metadata patch of pod %s/%s (%.3fs left)",
                namespace_of(pod),
                pod_name,
                deferral.wait,
            )
            pod = {**pod, "metadata": work["metadata"]}
        elif changed or adopting:
            patch = create_merge_patch({"metadata": pod.get("metadata") or {}}, work)
            try:
                await self._client.patch(PODS, namespace_of(pod), pod_name, patch)
            except Exception as exc:
                return None, wrap(exc, "failed to patch pod")
            if adopting:
                log.info("adopted pod %s/%s", namespace_of(pod), pod_name)
            pod = {**pod, "metadata": work["metadata"]}
        return pod, await self._ensure_pod_name_annotation(sandbox, pod_name)

    async def _create_pod(
        self, sandbox: Obj, name_hash: str, *, deferral: WriteDeferral | None = None
    ) -> tuple[Obj | None, ChildError | None]:
        namespace, name = namespace_of(sandbox), name_of(sandbox)
        body = desired_pod(sandbox, name_hash)
        try:
            created = await self._client.create(
                PODS, namespace, body, field_manager=c.FIELD_OWNER_SANDBOX_CONTROLLER
            )
        except ApiError as exc:
            if not exc.already_exists:
                return None, wrap(exc)
            try:
                live = await self._client.get(PODS, namespace, name)
            except Exception as get_exc:
                return None, wrap(get_exc, "pod already exists but failed to fetch")
            return await self._reconcile_existing_pod(sandbox, live, name_hash, deferral=deferral)
        except Exception as exc:
            return None, wrap(exc)
        log.info("created pod %s/%s", namespace, name)
        error = await self._ensure_pod_name_annotation(sandbox, name)
        if error is None:
            self._tracer.add_event("NewPodStatusObserved", created, _pod_event_attributes)
        return created, error

    async def _patch_pod_name_annotation(self, sandbox: Obj, value: str | None) -> None:
        patch = {"metadata": {"annotations": {c.ANNOTATION_POD_NAME: value}}}
        await self._client.patch(SANDBOXES, namespace_of(sandbox), name_of(sandbox), patch)
        annotations = _meta(sandbox).get("annotations")
        if value is None:
            if annotations:
                annotations.pop(c.ANNOTATION_POD_NAME, None)
        else:
            _meta(sandbox)["annotations"] = {**(annotations or {}), c.ANNOTATION_POD_NAME: value}

    async def _clear_pod_name_annotation(self, sandbox: Obj) -> ChildError | None:
        if c.ANNOTATION_POD_NAME not in (_meta(sandbox).get("annotations") or {}):
            return None
        try:
            await self._patch_pod_name_annotation(sandbox, None)
        except Exception as exc:
            return wrap(exc, "failed to clear pod name annotation")
        return None

    async def _ensure_pod_name_annotation(self, sandbox: Obj, pod_name: str) -> ChildError | None:
        current = (_meta(sandbox).get("annotations") or {}).get(c.ANNOTATION_POD_NAME)
        if current:  # equal, or naming another pod: leave it
            return None
        try:
            await self._patch_pod_name_annotation(sandbox, pod_name)
        except Exception as exc:
            return wrap(exc, "failed to set pod name annotation")
        return None

    async def _reconcile_service(
        self, sandbox: Obj, name_hash: str
    ) -> tuple[Obj | None, ChildError | None]:
        """Create, adopt, repair or delete the headless Service (spec section 3.5)."""
        namespace, name = namespace_of(sandbox), name_of(sandbox)
        wanted = sandbox.get("spec", {}).get("service")
        ports = service_ports_for_sandbox(sandbox)
        svc = self._services.get(namespace, name)
        if svc is None:
            if wanted is not True:
                self._clear_service_status(sandbox)
                return None, None
            problem = service_name_problem(name)
            if problem is not None:
                self._clear_service_status(sandbox)
                return None, ChildError(
                    f"cannot create headless service {quote(name)}: name {problem}",
                    transient=False,
                )
            try:
                created = await self._client.create(
                    SERVICES,
                    namespace,
                    desired_service(sandbox, name_hash, ports),
                    field_manager=c.FIELD_OWNER_SANDBOX_CONTROLLER,
                )
            except ApiError as exc:
                if not exc.already_exists:
                    return None, wrap(exc)
                try:
                    svc = await self._client.get(SERVICES, namespace, name)
                except Exception as get_exc:
                    return None, wrap(get_exc, "service get failed")
            except Exception as exc:
                return None, wrap(exc)
            else:
                log.info("created headless service %s/%s", namespace, name)
                self._set_service_status(sandbox, created)
                return created, None

        ownership, ref = check_ownership(svc, sandbox)
        if wanted is False:
            if ownership is Ownership.OWNED:
                try:
                    await self._client.delete(
                        SERVICES, namespace, name, preconditions=_uid_precondition(svc)
                    )
                    log.info("deleted service %s/%s: spec.service is false", namespace, name)
                except ApiError as exc:
                    if not exc.not_found:
                        return None, wrap(exc, "failed to delete service")
                except Exception as exc:
                    return None, wrap(exc, "failed to delete service")
            self._clear_service_status(sandbox)
            return None, None
        if ownership is Ownership.OTHER:
            assert ref is not None
            return None, ChildError(
                owned_by_other_message("service", name, ref, name), transient=False
            )
        if ownership is Ownership.UNOWNED:
            if wanted is None:
                self._clear_service_status(sandbox)
                return None, None
            adopted, error = await self._adopt_service(sandbox, svc, name_hash, ports)
            if error is not None:
                return None, error
            svc = adopted
        else:
            repaired, error = await self._repair_service(
                svc, name_hash, ports, manage_ports=wanted is True
            )
            if error is not None:
                return None, error
            svc = repaired
        self._set_service_status(sandbox, svc)
        return svc, None

    async def _adopt_service(
        self, sandbox: Obj, svc: Obj, name_hash: str, ports: list[Obj] | None
    ) -> tuple[Obj, ChildError | None]:
        name = name_of(svc)
        if not may_adopt(svc, name_hash):
            return svc, ChildError(cannot_adopt_message("service", name), transient=False)
        cluster_ip = (svc.get("spec") or {}).get("clusterIP") or ""
        if cluster_ip not in ("None", ""):
            return svc, ChildError(
                f"cannot adopt service {quote(name)}: ClusterIP is {quote(cluster_ip)} "
                f'(expected "None", field is immutable)',
                transient=False,
            )
        body = copy.deepcopy(svc)
        meta = _meta(body)
        meta["labels"] = {**(meta.get("labels") or {}), c.LABEL_SANDBOX_NAME_HASH: name_hash}
        spec = body.setdefault("spec", {})
        spec["selector"] = {c.LABEL_SANDBOX_NAME_HASH: name_hash}
        if ports:
            spec["ports"] = ports
        else:
            spec.pop("ports", None)
        set_controller_reference(body, sandbox)
        try:
            updated = await self._client.update(SERVICES, namespace_of(svc), name, body)
        except Exception as exc:
            return svc, wrap(exc, "failed to update service with owner reference")
        log.info("adopted service %s/%s", namespace_of(svc), name)
        return updated if isinstance(updated, dict) and updated else body, None

    async def _repair_service(
        self, svc: Obj, name_hash: str, ports: list[Obj] | None, *, manage_ports: bool
    ) -> tuple[Obj, ChildError | None]:
        work: Obj = {
            "metadata": copy.deepcopy(svc.get("metadata") or {}),
            "spec": copy.deepcopy(svc.get("spec") or {}),
        }
        labels = _meta(work).get("labels") or {}
        labels[c.LABEL_SANDBOX_NAME_HASH] = name_hash
        _meta(work)["labels"] = labels
        work["spec"]["selector"] = {c.LABEL_SANDBOX_NAME_HASH: name_hash}
        if manage_ports and not service_ports_equal(work["spec"].get("ports"), ports):
            if ports:
                work["spec"]["ports"] = ports
            else:
                work["spec"].pop("ports", None)
        base = {"metadata": svc.get("metadata") or {}, "spec": svc.get("spec") or {}}
        patch = create_merge_patch(base, work)
        if not patch:
            return svc, None
        try:
            await self._client.patch(SERVICES, namespace_of(svc), name_of(svc), patch)
        except Exception as exc:
            return svc, wrap(exc, "failed to patch owned service")
        log.info("repaired drift of service %s/%s", namespace_of(svc), name_of(svc))
        return {**svc, **work}, None

    def _set_service_status(self, sandbox: Obj, svc: Obj) -> None:
        status = sandbox.setdefault("status", {})
        status["service"] = name_of(svc)
        status["serviceFQDN"] = service_fqdn(svc, self._cluster_domain)

    @staticmethod
    def _clear_service_status(sandbox: Obj) -> None:
        status = sandbox.setdefault("status", {})
        status["service"] = ""
        status["serviceFQDN"] = ""

    # --- expiry -----------------------------------------------------------------------------

    async def _handle_expiry(self, sandbox: Obj, now: dt.datetime) -> tuple[bool, list[ChildError]]:
        """Delete owned Pod and Service; delete or retain the Sandbox (spec section 3.6).

        Returns:
            Whether the Sandbox was deleted, and the errors met.
        """
        namespace, name = namespace_of(sandbox), name_of(sandbox)
        errors: list[ChildError] = []
        pod = self._pods.get(namespace, resolve_pod_name(sandbox))
        if pod is not None:
            if is_owned_by(pod, sandbox):
                if not _terminating(pod):
                    error = await self._delete(PODS, pod, "failed to delete pod")
                    if error is not None:
                        errors.append(error)
            else:
                log.info(
                    "sandbox %s/%s expired: leaving pod %s it does not own",
                    namespace,
                    name,
                    name_of(pod),
                )
        svc = self._services.get(namespace, name)
        if svc is not None:
            if is_owned_by(svc, sandbox):
                error = await self._delete(SERVICES, svc, "failed to delete service")
                if error is not None:
                    errors.append(error)
            else:
                log.info("sandbox %s/%s expired: leaving service it does not own", namespace, name)
        if sandbox.get("spec", {}).get("shutdownPolicy") == c.SHUTDOWN_POLICY_DELETE:
            error = await self._delete(SANDBOXES, sandbox, "failed to delete sandbox")
            if error is None:
                log.info("deleted expired sandbox %s/%s (shutdownPolicy Delete)", namespace, name)
                return True, []
            errors.append(error)
        if not errors:
            conditions = sandbox.get("status", {}).get("conditions") or []
            sandbox["status"] = {"conditions": conditions}
            set_expired(conditions, sandbox, now=now)
        return False, errors

    async def _delete(self, resource: Resource, obj: Obj, prefix: str) -> ChildError | None:
        try:
            await self._client.delete(
                resource, namespace_of(obj), name_of(obj), preconditions=_uid_precondition(obj)
            )
        except ApiError as exc:
            if exc.not_found:
                return None
            return wrap(exc, prefix)
        except Exception as exc:
            return wrap(exc, prefix)
        return None
