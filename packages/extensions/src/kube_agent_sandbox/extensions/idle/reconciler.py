"""The idle reconciler: suspend or delete a Sandbox whose last activity is older than its timeout.

Level-triggered on Sandboxes and their heartbeat Leases. For each Sandbox it resolves the
policy (copying inherited annotations onto the Sandbox once), computes the last activity as
the latest of the Lease's ``renewTime``, the Ready→True transition and the last resume, and
either acts or asks to be requeued when the timeout would run out. It writes only Sandbox
metadata and ``spec.operatingMode`` (one merge patch guarded by the resourceVersion, so a racing
writer wins and the decision is made again on what it wrote), never status.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.heartbeat import parse_micro_time
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.api.rest import LEASES
from kube_agent_sandbox.controller.goduration import format_go_duration
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    EventRecorder,
    Obj,
    Reader,
    Request,
    Result,
    meta,
)
from kube_agent_sandbox.extensions.idle.cpu import read_pod_cpu
from kube_agent_sandbox.extensions.idle.defaults import (
    inherited_annotations,
    owning_claim_name,
    template_name,
)
from kube_agent_sandbox.extensions.idle.metrics import ACTION_DELETE, ACTION_SUSPEND, IdleMetrics
from kube_agent_sandbox.extensions.idle.policy import MIN_IDLE_TIMEOUT, IdlePolicy, parse_policy

__all__ = [
    "EVENT_IDLE_DELETED",
    "EVENT_IDLE_SUSPENDED",
    "EVENT_INVALID_POLICY",
    "EVENT_TIMEOUT_SUSPENDED",
    "IdleReconciler",
    "last_activity",
]

log = logging.getLogger(__name__)

EVENT_IDLE_SUSPENDED: Final = "IdleSuspended"
EVENT_IDLE_DELETED: Final = "IdleDeleted"
EVENT_TIMEOUT_SUSPENDED: Final = "TimeoutSuspended"
EVENT_INVALID_POLICY: Final = "InvalidIdlePolicy"
MIN_VETO_RECHECK: Final = 5.0
"""Seconds at least between two CPU checks of a sandbox that is idle but busy."""
_ATTEMPTS: Final = 3


class _Stale(Exception):
    """A guarded write met a newer object: read it again and decide again."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _condition(sandbox: Obj, type_: str) -> Obj | None:
    for cond in (sandbox.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return None


def _is_ready(sandbox: Obj) -> bool:
    cond = _condition(sandbox, c.CONDITION_READY)
    return cond is not None and cond.get("status") == "True"


def last_activity(sandbox: Obj, lease: Obj | None) -> dt.datetime:
    """The latest sign of life: the Lease's renewTime, Ready→True, the last resume, creation.

    Args:
        sandbox: The Sandbox (its conditions and creationTimestamp).
        lease: Its heartbeat Lease, if any.
    """
    found: list[dt.datetime] = []
    created = parse_micro_time(meta(sandbox).get("creationTimestamp"))
    if created is not None:
        found.append(created)
    if lease is not None:
        renewed = parse_micro_time((lease.get("spec") or {}).get("renewTime"))
        if renewed is not None:
            found.append(renewed)
    ready = _condition(sandbox, c.CONDITION_READY)
    if ready is not None and ready.get("status") == "True":
        moment = parse_micro_time(ready.get("lastTransitionTime"))
        if moment is not None:
            found.append(moment)
    suspended = _condition(sandbox, c.CONDITION_SUSPENDED)
    if suspended is not None and suspended.get("status") == "False":
        # Suspended flips to False when a suspended Sandbox runs again: the last resume.
        moment = parse_micro_time(suspended.get("lastTransitionTime"))
        if moment is not None:
            found.append(moment)
    return max(found) if found else dt.datetime.fromtimestamp(0, dt.UTC)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class IdleReconciler:
    """Suspends or deletes idle Sandboxes; see the module docstring.

    Args:
        client: API writes (and the live reads made just before acting).
        sandboxes: The Sandbox cache.
        leases: The heartbeat Lease cache.
        claims: The SandboxClaim cache (policy defaults).
        templates: The SandboxTemplate cache (policy defaults).
        recorder: Events about Sandboxes.
        clock: The current time (tests pass a fake clock).
        min_idle_timeout: The shortest idle timeout accepted, in seconds.
        metrics: Where suspensions and deletions are counted (none when omitted).
    """

    def __init__(
        self,
        client: Client,
        *,
        sandboxes: Reader,
        leases: Reader,
        claims: Reader,
        templates: Reader,
        recorder: EventRecorder,
        clock: Callable[[], dt.datetime] = _utcnow,
        min_idle_timeout: float = MIN_IDLE_TIMEOUT,
        metrics: IdleMetrics | None = None,
    ) -> None:
        self._client = client
        self._metrics = metrics
        self._sandboxes = sandboxes
        self._leases = leases
        self._claims = claims
        self._templates = templates
        self._recorder = recorder
        self._clock = clock
        self.min_idle_timeout = min_idle_timeout
        self._reported: dict[str, tuple[str, ...]] = {}
        self._metrics_warned = False

    async def reconcile(self, request: Request) -> Result:
        """Converge one Sandbox (see the module docstring)."""
        sandbox = self._sandboxes.get(request.namespace, request.name)
        for _ in range(_ATTEMPTS):
            if sandbox is None:
                self._forget(request)
                return Result()
            try:
                return await self._converge(sandbox)
            except _Stale:
                sandbox = await self._fresh(request)
        return Result(requeue=True)

    def _forget(self, request: Request) -> None:
        gone = [uid for uid, _ in self._reported.items() if uid.startswith(f"{request}/")]
        for key in gone:
            del self._reported[key]

    async def _fresh(self, request: Request) -> Obj | None:
        try:
            return await self._client.get(SANDBOXES, request.namespace, request.name)
        except ApiError as err:
            if err.not_found:
                return None
            raise

    async def _converge(self, sandbox: Obj) -> Result:
        m = meta(sandbox)
        if m.get("deletionTimestamp"):
            return Result()
        namespace = str(m.get("namespace") or "")
        inherited = self._inherited(sandbox, namespace)
        if inherited:
            log.info(
                "copying inherited idle policy onto the Sandbox",
                extra={"sandbox": f"{namespace}/{m.get('name')}", "keys": sorted(inherited)},
            )
            await self._patch(sandbox, {"metadata": {"annotations": inherited}})
            return Result()  # the update event brings the Sandbox back with its policy
        annotations = m.get("annotations") or {}
        policy = parse_policy(annotations, minimum=self.min_idle_timeout)
        self._report_problems(sandbox, policy)
        if (sandbox.get("spec") or {}).get("operatingMode") == c.OPERATING_MODE_SUSPENDED:
            return Result()  # suspended, by us or by hand; only a resume changes that
        if c.ANNOTATION_SUSPENDED_BY in annotations:
            # Resumed by something other than the gateway: forget why it was suspended, or a
            # later manual suspend would look like ours and be resumed on traffic.
            await self._patch(
                sandbox, {"metadata": {"annotations": {c.ANNOTATION_SUSPENDED_BY: None}}}
            )
            return Result()
        if not policy.active:
            return Result()
        return await self._decide(sandbox, policy)

    def _inherited(self, sandbox: Obj, namespace: str) -> dict[str, str]:
        claim_name = owning_claim_name(sandbox)
        claim = self._claims.get(namespace, claim_name) if claim_name else None
        tmpl_name = template_name(sandbox)
        template = self._templates.get(namespace, tmpl_name) if tmpl_name else None
        return inherited_annotations(sandbox, claim=claim, template=template)

    def _report_problems(self, sandbox: Obj, policy: IdlePolicy) -> None:
        m = meta(sandbox)
        key = f"{m.get('namespace')}/{m.get('name')}/{m.get('uid')}"
        if not policy.problems:
            self._reported.pop(key, None)
            return
        if self._reported.get(key) == policy.problems:
            return
        self._reported[key] = policy.problems
        note = "; ".join(policy.problems)
        log.warning("invalid idle policy", extra={"sandbox": key, "problems": note})
        self._recorder.event(
            sandbox,
            type_="Warning",
            reason=EVENT_INVALID_POLICY,
            action=c.EVENT_ACTION_RECONCILING,
            note=f"Idle policy ignored: {note}",
        )

    async def _decide(self, sandbox: Obj, policy: IdlePolicy) -> Result:
        now = self._clock()
        waits: list[float] = []
        if policy.pause_at is not None:
            if now >= policy.pause_at:
                await self._suspend(
                    sandbox,
                    by=c.SUSPENDED_BY_TIMEOUT,
                    reason=EVENT_TIMEOUT_SUSPENDED,
                    note=f"Pause deadline {_iso(policy.pause_at)} reached; suspended",
                )
                return Result()
            waits.append((policy.pause_at - now).total_seconds())
        idle = policy.idle_timeout
        if idle is not None and _is_ready(sandbox):
            m = meta(sandbox)
            namespace, name = str(m.get("namespace") or ""), str(m.get("name") or "")
            last = last_activity(sandbox, self._leases.get(namespace, name))
            if (now - last).total_seconds() >= idle:
                # The cache may lag a renewal by a moment: confirm with the API server.
                last = last_activity(sandbox, await self._live_lease(namespace, name))
            remaining = idle - (now - last).total_seconds()
            if remaining > 0:
                waits.append(remaining)
            else:
                veto, caveat = await self._cpu_veto(sandbox, policy, namespace=namespace)
                if veto is not None:
                    waits.append(max(MIN_VETO_RECHECK, idle / 10))
                else:
                    await self._act_on_idle(sandbox, policy, last=last, caveat=caveat)
                    return Result()
        if not waits:
            return Result()
        return Result(requeue_after=max(0.05, min(waits)))

    async def _live_lease(self, namespace: str, name: str) -> Obj | None:
        try:
            return await self._client.get(LEASES, namespace, name)
        except ApiError as err:
            if err.not_found:
                return None
            raise

    async def _cpu_veto(
        self, sandbox: Obj, policy: IdlePolicy, *, namespace: str
    ) -> tuple[float | None, str]:
        """``(usage, "")`` when the pod is busier than the threshold; ``(None, caveat)`` else."""
        threshold = policy.busy_cpu_millicores
        if threshold is None:
            return None, ""
        m = meta(sandbox)
        pod = str((m.get("annotations") or {}).get(c.ANNOTATION_POD_NAME) or m.get("name") or "")
        reading = await read_pod_cpu(self._client, namespace, pod)
        if reading.millicores is None:
            if not self._metrics_warned:
                self._metrics_warned = True
                log.warning(
                    "CPU veto skipped: no pod metrics (is metrics-server installed?)",
                    extra={"reason": reading.unavailable},
                )
            return None, f" (CPU veto skipped: {reading.unavailable})"
        if reading.millicores > threshold:
            log.info(
                "idle sandbox kept: CPU busy",
                extra={
                    "sandbox": f"{namespace}/{m.get('name')}",
                    "millicores": round(reading.millicores, 1),
                    "threshold": threshold,
                },
            )
            return reading.millicores, ""
        return None, f" (CPU {reading.millicores:.0f}m <= {threshold}m)"

    async def _act_on_idle(
        self, sandbox: Obj, policy: IdlePolicy, *, last: dt.datetime, caveat: str
    ) -> None:
        idle = format_go_duration(policy.idle_timeout or 0.0)
        why = f"No activity for {idle} (last {_iso(last)})"
        if policy.on_idle == c.ON_IDLE_DELETE:
            await self._delete(sandbox, note=f"{why}; deleted{{target}}{caveat}")
            return
        await self._suspend(
            sandbox,
            by=c.SUSPENDED_BY_IDLE,
            reason=EVENT_IDLE_SUSPENDED,
            note=f"{why}; suspended{caveat}",
        )

    async def _patch(self, sandbox: Obj, patch: dict[str, Any]) -> Obj | None:
        """A merge patch guarded by the cached resourceVersion; 409 raises :class:`_Stale`."""
        m = meta(sandbox)
        patch.setdefault("metadata", {})["resourceVersion"] = m.get("resourceVersion")
        try:
            return await self._client.patch(
                SANDBOXES, str(m.get("namespace") or ""), str(m.get("name") or ""), patch
            )
        except ApiError as err:
            if err.conflict:
                raise _Stale from err
            if err.not_found:
                return None
            raise

    async def _suspend(self, sandbox: Obj, *, by: str, reason: str, note: str) -> None:
        patched = await self._patch(
            sandbox,
            {
                "metadata": {"annotations": {c.ANNOTATION_SUSPENDED_BY: by}},
                "spec": {"operatingMode": c.OPERATING_MODE_SUSPENDED},
            },
        )
        if patched is None:
            return
        m = meta(sandbox)
        log.info(
            "sandbox suspended",
            extra={"sandbox": f"{m.get('namespace')}/{m.get('name')}", "by": by},
        )
        self._recorder.event(patched, type_="Normal", reason=reason, action="Suspend", note=note)
        if self._metrics is not None:
            self._metrics.acted(str(m.get("namespace") or ""), ACTION_SUSPEND, reason)

    async def _delete(self, sandbox: Obj, *, note: str) -> None:
        m = meta(sandbox)
        namespace, name = str(m.get("namespace") or ""), str(m.get("name") or "")
        live = await self._fresh(Request(namespace, name))
        if live is None:
            return
        if meta(live).get("resourceVersion") != m.get("resourceVersion"):
            raise _Stale  # something changed since the cache saw it: decide on the new state
        claim = owning_claim_name(sandbox)
        try:
            if claim is not None:
                uid = next(
                    str(ref.get("uid") or "")
                    for ref in m.get("ownerReferences") or ()
                    if ref.get("controller") and ref.get("name") == claim
                )
                await self._client.delete(
                    SANDBOX_CLAIMS, namespace, claim, preconditions={"uid": uid}
                )
                target = f" SandboxClaim {claim}"
            else:
                await self._client.delete(
                    SANDBOXES,
                    namespace,
                    name,
                    preconditions={
                        "uid": str(m.get("uid") or ""),
                        "resourceVersion": str(m.get("resourceVersion") or ""),
                    },
                )
                target = f" Sandbox {name}"
        except ApiError as err:
            if err.not_found:
                return
            if err.status == 409:
                raise _Stale from err
            raise
        log.info("idle sandbox deleted", extra={"sandbox": f"{namespace}/{name}", "target": target})
        if self._metrics is not None:
            self._metrics.acted(namespace, ACTION_DELETE, EVENT_IDLE_DELETED)
        self._recorder.event(
            live,
            type_="Normal",
            reason=EVENT_IDLE_DELETED,
            action="Delete",
            note=note.replace("{target}", target),
        )
