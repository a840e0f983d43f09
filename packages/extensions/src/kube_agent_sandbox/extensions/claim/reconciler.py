"""The SandboxClaim reconciler: a claim gets exactly one Sandbox, warm if possible.

The flow is upstream's (``Reconcile`` -> ``reconcileActive`` -> ``getOrCreateSandbox`` ->
status), with the hot path rebuilt around three rules (docs/design/claim-hot-path.md):

* **Read your writes.** Every object this controller writes is kept (the API server's answer)
  in a :class:`WriteOverlay` until the informer shows it, so the pass that follows a write
  never waits for the cache and never mistakes a lagging cache for a missing Sandbox.
* **Optimistic locks instead of re-reads.** The claim's assignment annotation and the Sandbox
  adoption patch carry the resourceVersion they were computed from; a conflict is resolved by
  one authoritative GET, never by locking.
* **Fold writes.** The first-observed (and trace) annotations ride on the assignment patch,
  and so does the first-ready stamp when the adopted Sandbox is already Ready, whose Ready
  status is then written in the same pass.

A warm claim costs four writes here: the claim's annotations, the Sandbox adoption, the
claim's status and the ``SandboxAdopted`` event.

This module keeps only the top level of upstream v0.5.6
extensions/controllers/sandboxclaim_controller.go, ``Reconcile``: expiry, the active
or expired step, the status, and turning the pass's one error into a result. Each step lives
in its own module, takes the shared :class:`ClaimContext` and raises a ``ClaimError``, which
:meth:`ClaimReconciler._reconcile` is the one place to catch:

- legacy_policy.py: the legacy NetworkPolicy clean-up;
- annotations.py: the first-observed/trace annotations and the assignment bookkeeping;
- expiry_step.py: marking expiry and the shutdown policy (``reconcileExpired``);
- active.py: ``reconcileActive`` and ``getOrCreateSandbox``, using adopt_step.py
  (warm adoption, ``adoptSandboxFromCandidates``) and provision.py (template, pod metadata, cold
  create);
- status_step.py: the status write and first-ready bookkeeping (``updateStatus``).
"""

from __future__ import annotations

import copy
import datetime as dt
import time
from collections.abc import Callable, Sequence
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    EventRecorder,
    Obj,
    Reader,
    Request,
    Result,
    find_condition,
    meta,
    set_status_condition,
)
from kube_agent_sandbox.controller.tracing import NOOP_TRACER, Tracer
from kube_agent_sandbox.extensions.claim import lifecycle
from kube_agent_sandbox.extensions.claim.active import reconcile_active
from kube_agent_sandbox.extensions.claim.adoption import (
    PENDING_IP_GRACE,
    PENDING_IP_REQUEUE,
    claim_age,
)
from kube_agent_sandbox.extensions.claim.annotations import (
    flush_annotations,
    initial_annotations,
)
from kube_agent_sandbox.extensions.claim.context import (
    ClaimContext,
    ClaimMetricsSink,
    ClaimPass,
    key_of,
)
from kube_agent_sandbox.extensions.claim.errors import (
    CREATE_PENDING_REQUEUE,
    NOT_FOUND_REQUEUE,
    ClaimError,
    ReconcilerError,
    SandboxCreatePendingError,
    TemplateNotFoundError,
    WarmPoolNotFoundError,
)
from kube_agent_sandbox.extensions.claim.expiry_step import (
    delete_claim,
    mark_expired,
    reconcile_expired,
)
from kube_agent_sandbox.extensions.claim.legacy_policy import (
    LegacyPolicyCleanup,
    is_legacy_network_policy_of,
    legacy_network_policy_name,
)
from kube_agent_sandbox.extensions.claim.observed import FirstObserved
from kube_agent_sandbox.extensions.claim.overlay import WriteOverlay
from kube_agent_sandbox.extensions.claim.podmetadata import DEFAULT_ALLOWED_LABEL_DOMAINS
from kube_agent_sandbox.extensions.claim.status import apply_status, claim_expired_condition
from kube_agent_sandbox.extensions.claim.status_step import record_first_ready, write_status
from kube_agent_sandbox.extensions.claim.warmqueue import WarmQueue

__all__ = [
    "DEFAULT_ALLOWED_LABEL_DOMAINS",
    "EVENT_REPORTER",
    "EXPIRED_REQUEUE",
    "ClaimMetricsSink",
    "ClaimReconciler",
    "is_legacy_network_policy_of",
    "legacy_network_policy_name",
]

EVENT_REPORTER: Final = "sandboxclaim-controller"
EXPIRED_REQUEUE: Final = 0.001
"""Seconds before the pass that applies the shutdown policy (after marking Ready expired)."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ClaimReconciler:
    """Converges one SandboxClaim (upstream's Reconcile).

    Args:
        client: Writes and authoritative reads.
        claims: Cache of SandboxClaims.
        sandboxes: Cache of Sandboxes.
        pools: Cache of SandboxWarmPools.
        templates: Cache of SandboxTemplates.
        queue: The warm queue (fed from Sandbox events by setup).
        observed: First-observation times (fed by the primary watch predicate).
        metrics: Claim metrics (None records nothing).
        recorder: Event recorder (None: ``--disable-claim-events``).
        allowed_label_domains: Label domains ``additionalPodMetadata`` may use.
        persist_observability: Write first-observed/trace annotations to claims.
        tracer: Tracing (no-op by default).
        clock: Wall clock for conditions and expiry.
        clock_ns: Wall clock in nanoseconds (annotations).
        network_policies: Cache of NetworkPolicies; every pass deletes the claim's legacy
            ``<claim>-network-policy`` (left by old controllers) when this cache shows it
            controlled by the claim, in the background (as upstream's Reconcile does). None skips
            it.
    """

    def __init__(
        self,
        client: Client,
        *,
        claims: Reader,
        sandboxes: Reader,
        pools: Reader,
        templates: Reader,
        queue: WarmQueue,
        observed: FirstObserved | None = None,
        metrics: ClaimMetricsSink | None = None,
        recorder: EventRecorder | None = None,
        allowed_label_domains: Sequence[str] = (),
        persist_observability: bool = True,
        tracer: Tracer = NOOP_TRACER,
        clock: Callable[[], dt.datetime] = _utcnow,
        clock_ns: Callable[[], int] = time.time_ns,
        network_policies: Reader | None = None,
    ) -> None:
        self._ctx = ClaimContext(
            client=client,
            claims=WriteOverlay(claims),
            sandboxes=WriteOverlay(sandboxes),
            pools=pools,
            templates=templates,
            queue=queue,
            observed=observed or FirstObserved(clock_ns),
            metrics=metrics,
            recorder=recorder,
            domains=tuple(allowed_label_domains) or DEFAULT_ALLOWED_LABEL_DOMAINS,
            persist=persist_observability,
            tracer=tracer,
            clock=clock,
            clock_ns=clock_ns,
        )
        self.claims = self._ctx.claims
        self.sandboxes = self._ctx.sandboxes
        self.queue = queue
        self.observed = self._ctx.observed
        self._legacy_policies = LegacyPolicyCleanup(client, network_policies)

    @property
    def _metrics(self) -> ClaimMetricsSink | None:
        return self._ctx.metrics

    @_metrics.setter
    def _metrics(self, value: ClaimMetricsSink | None) -> None:
        self._ctx.metrics = value

    @property
    def _tracer(self) -> Tracer:
        return self._ctx.tracer

    @_tracer.setter
    def _tracer(self, value: Tracer) -> None:
        self._ctx.tracer = value

    # --- entry -----------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        """Converge the claim named by ``request``.

        Raises:
            ClaimError: a retryable failure (the queue backs off).
        """
        claim = self.claims.get(request.namespace, request.name)
        if claim is None:
            key = (request.namespace, request.name)
            self.observed.forget(*key)
            self.claims.forget(*key)
            self._legacy_policies.forget(key)
            self._ctx.first_ready_owed.pop(key, None)
            return Result()
        self._legacy_policies.cleanup(claim)
        with self._tracer.object_span("ReconcileSandboxClaim", claim, _span_attributes):
            return await self._reconcile(claim)

    async def drain(self) -> None:
        """Wait for background work (legacy NetworkPolicy cleanups); for tests and shutdown."""
        await self._legacy_policies.drain()

    async def _reconcile(self, claim: Obj) -> Result:
        ctx = self._ctx
        if meta(claim).get("deletionTimestamp"):
            return Result()
        work = ClaimPass(claim=claim, pending=initial_annotations(ctx, claim))
        old_status: Obj = copy.deepcopy(claim.get("status") or {})
        now = ctx.clock()
        expire_at = (
            lifecycle.expire_at(claim) if (claim.get("spec") or {}).get("lifecycle") else None
        )
        expired = expire_at is not None and now >= expire_at
        ready = find_condition(old_status.get("conditions"), c.CONDITION_READY)
        marked = ready is not None and ready.get("reason") == c.REASON_CLAIM_EXPIRED

        if expired and not marked:
            await flush_annotations(ctx, work)
            await mark_expired(ctx, work, old_status, now)
            return Result(requeue_after=EXPIRED_REQUEUE)
        if expired and lifecycle.shutdown_policy(claim) in (
            lifecycle.POLICY_DELETE,
            lifecycle.POLICY_DELETE_FOREGROUND,
        ):
            await delete_claim(ctx, work.claim)
            return Result()

        sandbox: Obj | None = None
        error: ClaimError | None = None
        try:
            if expired:
                sandbox = await reconcile_expired(ctx, work)
            else:
                sandbox = await reconcile_active(ctx, work, now)
        except ClaimError as exc:
            cause = exc.__cause__
            if isinstance(cause, ApiError) and cause.namespace_terminating:
                raise cause from None  # nothing can be created: the runtime ends the work
            error = exc
        except ApiError as exc:
            if exc.namespace_terminating:
                raise
            error = ReconcilerError(str(exc))
            error.__cause__ = exc  # a 404 of the claim itself ends the work in the runtime
        try:
            await flush_annotations(ctx, work)
        except ClaimError as exc:
            error = error or exc

        if work.pending_network and error is None and sandbox is None:
            age = claim_age(work.claim, ctx.clock())
            remaining = PENDING_IP_GRACE - (age or 0.0)
            return Result(requeue_after=min(PENDING_IP_REQUEUE, max(remaining, 0.001)))

        time_left = None
        if expire_at is not None and not expired:
            time_left = (expire_at - ctx.clock()).total_seconds()
        if isinstance(error, SandboxCreatePendingError) and (
            (old_status.get("sandbox") or {}).get("name")
        ):
            return Result(requeue_after=_shorter(CREATE_PENDING_REQUEUE, time_left))

        new_status = apply_status(
            work.claim, sandbox=sandbox, error=error, expired=expired, now=now
        )
        expired_late = not expired and time_left is not None and time_left <= 0
        if expired_late:
            conditions = new_status["conditions"]
            set_status_condition(conditions, claim_expired_condition(work.claim), now=now)
        authoritative = await write_status(ctx, work, old_status, new_status)
        if expired_late:
            ctx.event(work.claim, c.REASON_CLAIM_EXPIRED, "Claim Expired", "Claim expired")
            return Result(requeue_after=EXPIRED_REQUEUE)
        if authoritative:
            await record_first_ready(ctx, work, old_status, new_status, sandbox)
        return self._result(error, time_left)

    def _result(self, error: ClaimError | None, time_left: float | None) -> Result:
        pending = time_left if time_left is not None and time_left > 0 else None
        if isinstance(error, (WarmPoolNotFoundError, TemplateNotFoundError)):
            return Result(requeue_after=_shorter(NOT_FOUND_REQUEUE, pending))
        if isinstance(error, SandboxCreatePendingError):
            return Result(requeue_after=_shorter(CREATE_PENDING_REQUEUE, pending))
        if error is not None and error.transient:
            raise error
        return Result(requeue_after=pending)


def _shorter(value: float, other: float | None) -> float:
    if other is not None and 0 < other < value:
        return other
    return value


def _span_attributes(claim: Obj) -> dict[str, str]:
    namespace, name = key_of(claim)
    return {"sandboxclaim.name": name, "sandboxclaim.namespace": namespace}
