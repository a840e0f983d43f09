"""The SandboxClaim reconciler: a claim gets exactly one Sandbox, warm if possible (spec 4.3).

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
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime.mergepatch import create_merge_patch
from kube_agent_sandbox.controller.runtime.objects import meta
from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    Client,
    EventRecorder,
    Obj,
    Reader,
    Request,
    Result,
)
from kube_agent_sandbox.controller.sandbox.conditions import find_condition, set_status_condition
from kube_agent_sandbox.controller.sandbox.semantic import semantic_equal
from kube_agent_sandbox.controller.tracing import NOOP_TRACER, Tracer
from kube_agent_sandbox.extensions.claim import lifecycle, podmetadata
from kube_agent_sandbox.extensions.claim.adoption import (
    PENDING_IP_GRACE,
    PENDING_IP_REQUEUE,
    adoption_target,
    claim_age,
    is_ready,
    pick_candidate,
)
from kube_agent_sandbox.extensions.claim.errors import (
    CREATE_PENDING_REQUEUE,
    NOT_FOUND_REQUEUE,
    AdoptionConflictError,
    ClaimError,
    InvalidMetadataError,
    ReconcilerError,
    SandboxCreatePendingError,
    SandboxNotOwnedError,
    TemplateNotFoundError,
    WarmPoolNotFoundError,
    conflict_detail,
    quote,
)
from kube_agent_sandbox.extensions.claim.metrics import template_name_of as sandbox_template
from kube_agent_sandbox.extensions.claim.observed import FirstObserved, rfc3339nano
from kube_agent_sandbox.extensions.claim.overlay import WriteOverlay
from kube_agent_sandbox.extensions.claim.sandboxbuild import (
    build_cold_sandbox,
    claim_created_by,
    desired_pod_metadata,
    has_additional_pod_metadata,
    template_name_of,
)
from kube_agent_sandbox.extensions.claim.status import (
    apply_status,
    claim_expired_condition,
    status_write,
)
from kube_agent_sandbox.extensions.claim.status import (
    is_ready as status_is_ready,
)
from kube_agent_sandbox.extensions.claim.warmqueue import WarmKey, WarmQueue, adoptable_pool
from kube_agent_sandbox.extensions.common.blueprint import template_ref_hash
from kube_agent_sandbox.extensions.common.ownership import controlled_by_kind, is_controlled_by
from kube_agent_sandbox.extensions.common.resources import (
    NETWORK_POLICIES,
    SANDBOX_CLAIMS,
    SANDBOXES,
)

log = logging.getLogger(__name__)

EVENT_REPORTER: Final = "sandboxclaim-controller"
DEFAULT_ALLOWED_LABEL_DOMAINS: Final = ("sandbox.users.io",)
EXPIRED_REQUEUE: Final = 0.001
"""Seconds before the pass that applies the shutdown policy (after marking Ready expired)."""
ASSIGNMENT_RETRIES: Final = 5
ADOPTION_RETRIES: Final = 3
POLICY_DELETE: Final = "Delete"
POLICY_DELETE_FOREGROUND: Final = "DeleteForeground"


class ClaimMetricsSink(Protocol):
    """The claim metrics the reconciler records (spec 5.2, delta 7)."""

    def record_creation(
        self,
        *,
        namespace: str,
        sandbox_template: str,
        launch_type: str,
        warmpool_name: str,
        pod_condition: str,
        created_by: str,
    ) -> None: ...

    def observe_first_ready(self, claim: Obj, *, sandbox: Obj | None, now: dt.datetime) -> None: ...


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _key(obj: Obj) -> tuple[str, str]:
    m = meta(obj)
    return str(m.get("namespace") or ""), str(m.get("name") or "")


def _annotations(obj: Obj) -> dict[str, Any]:
    return dict(meta(obj).get("annotations") or {})


def _labels(obj: Obj) -> dict[str, Any]:
    return dict(meta(obj).get("labels") or {})


def _pool_name(claim: Obj) -> str:
    return str(((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name") or "")


@dataclass
class _Pass:
    """What one reconcile knows and still has to write about its claim."""

    claim: Obj
    pending: dict[str, str] = field(default_factory=dict)
    first_ready_stamped: bool = False
    pending_network: bool = False


class ClaimReconciler:
    """Converges one SandboxClaim (spec 4.3.1).

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
            controlled by the claim, in the background (spec 4.3.1 step 2). None skips it.
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
        self._client = client
        self.claims = WriteOverlay(claims)
        self.sandboxes = WriteOverlay(sandboxes)
        self._pools = pools
        self._templates = templates
        self.queue = queue
        self.observed = observed or FirstObserved(clock_ns)
        self._metrics = metrics
        self._recorder = recorder
        self._domains = tuple(allowed_label_domains) or DEFAULT_ALLOWED_LABEL_DOMAINS
        self._persist = persist_observability
        self._tracer = tracer
        self._clock = clock
        self._clock_ns = clock_ns
        self._policies = network_policies
        # per claim key, the UID of the legacy NetworkPolicy deleted (or being deleted), so a
        # cache that still shows it does not cost another DELETE (dropped with the claim)
        self._np_deleted: dict[tuple[str, str], str] = {}
        self._background: set[asyncio.Task[None]] = set()
        # claims (key -> UID) whose first-ready stamp was written before their Ready status
        self._first_ready_owed: dict[tuple[str, str], str] = {}

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
            self._np_deleted.pop(key, None)
            self._first_ready_owed.pop(key, None)
            return Result()
        self._cleanup_legacy_network_policy(claim)
        with self._tracer.object_span("ReconcileSandboxClaim", claim, _span_attributes):
            return await self._reconcile(claim)

    async def drain(self) -> None:
        """Wait for background work (legacy NetworkPolicy cleanups); for tests and shutdown."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def _reconcile(self, claim: Obj) -> Result:
        if meta(claim).get("deletionTimestamp"):
            return Result()
        work = _Pass(claim=claim, pending=self._initial_annotations(claim))
        old_status: Obj = copy.deepcopy(claim.get("status") or {})
        now = self._clock()
        expire_at = (
            lifecycle.expire_at(claim) if (claim.get("spec") or {}).get("lifecycle") else None
        )
        expired = expire_at is not None and now >= expire_at
        ready = find_condition(old_status.get("conditions"), c.CONDITION_READY)
        marked = ready is not None and ready.get("reason") == c.REASON_CLAIM_EXPIRED

        if expired and not marked:
            await self._flush_annotations(work)
            await self._mark_expired(work, old_status, now)
            return Result(requeue_after=EXPIRED_REQUEUE)
        if expired and lifecycle.shutdown_policy(claim) in (
            POLICY_DELETE,
            POLICY_DELETE_FOREGROUND,
        ):
            await self._delete_claim(work.claim)
            return Result()

        sandbox: Obj | None = None
        error: ClaimError | None = None
        try:
            if expired:
                sandbox = await self._reconcile_expired(work)
            else:
                sandbox = await self._reconcile_active(work, now)
        except ClaimError as exc:
            cause = exc.__cause__
            if isinstance(cause, ApiError) and cause.namespace_terminating:
                raise cause from None  # nothing can be created: the runtime ends the work
            error = exc
        except ApiError as exc:
            if exc.namespace_terminating:
                raise
            error = ReconcilerError(str(exc))
        try:
            await self._flush_annotations(work)
        except ClaimError as exc:
            error = error or exc

        if work.pending_network and error is None and sandbox is None:
            age = claim_age(work.claim, self._clock())
            remaining = PENDING_IP_GRACE - (age or 0.0)
            return Result(requeue_after=min(PENDING_IP_REQUEUE, max(remaining, 0.001)))

        time_left = None
        if expire_at is not None and not expired:
            time_left = (expire_at - self._clock()).total_seconds()
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
        authoritative = await self._write_status(work, old_status, new_status)
        if expired_late:
            self._event(work.claim, c.REASON_CLAIM_EXPIRED, "Claim Expired", "Claim expired")
            return Result(requeue_after=EXPIRED_REQUEUE)
        if authoritative:
            await self._record_first_ready(work, old_status, new_status, sandbox)
        return self._result(error, time_left)

    def _result(self, error: ClaimError | None, time_left: float | None) -> Result:
        pending = time_left if time_left is not None and time_left > 0 else None
        if isinstance(error, (WarmPoolNotFoundError, TemplateNotFoundError)):
            return Result(requeue_after=_shorter(NOT_FOUND_REQUEUE, pending))
        if isinstance(error, SandboxCreatePendingError):
            return Result(requeue_after=_shorter(CREATE_PENDING_REQUEUE, pending))
        if error is not None and not error.suppressed:
            raise error
        return Result(requeue_after=pending)

    # --- annotations -----------------------------------------------------------------------

    def _initial_annotations(self, claim: Obj) -> dict[str, str]:
        observed_ns = self.observed.record(claim)
        if not self._persist:
            return {}
        annotations = _annotations(claim)
        wanted: dict[str, str] = {}
        if not annotations.get(c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT):
            wanted[c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT] = rfc3339nano(observed_ns)
        if not annotations.get(c.ANNOTATION_TRACE_CONTEXT):
            trace = self._tracer.trace_context()
            if trace:
                wanted[c.ANNOTATION_TRACE_CONTEXT] = trace
        return wanted

    async def _flush_annotations(self, work: _Pass) -> None:
        if not work.pending:
            return
        patch = {"metadata": {"annotations": dict(work.pending)}}
        try:
            await self._patch_claim(work, patch)
        except ApiError as exc:
            if exc.not_found:
                work.pending.clear()
                return
            raise ReconcilerError(f"failed to initialize claim annotations: {exc}") from exc
        work.pending.clear()

    async def _patch_claim(self, work: _Pass, patch: Obj) -> Obj:
        namespace, name = _key(work.claim)
        updated = await self._client.patch(SANDBOX_CLAIMS, namespace, name, patch)
        self.claims.remember(updated)
        work.claim = updated
        return updated

    # --- expiry ----------------------------------------------------------------------------

    async def _mark_expired(self, work: _Pass, old_status: Obj, now: dt.datetime) -> None:
        status = copy.deepcopy(old_status)
        conditions = status.setdefault("conditions", [])
        set_status_condition(conditions, claim_expired_condition(work.claim), now=now)
        await self._write_status(work, old_status, status)
        self._event(work.claim, c.REASON_CLAIM_EXPIRED, "Claim Expired", "Claim expired")

    async def _delete_claim(self, claim: Obj) -> None:
        policy = lifecycle.shutdown_policy(claim)
        self._event(
            claim, c.REASON_CLAIM_EXPIRED, "Deleting", f"Deleting Claim (ShutdownPolicy={policy})"
        )
        namespace, name = _key(claim)
        try:
            await self._client.delete(
                SANDBOX_CLAIMS,
                namespace,
                name,
                propagation_policy="Foreground" if policy == POLICY_DELETE_FOREGROUND else None,
                preconditions={"uid": str(meta(claim).get("uid"))}
                if meta(claim).get("uid")
                else None,
            )
        except ApiError as exc:
            if not exc.not_found:
                raise ReconcilerError(f"failed to delete expired claim: {exc}") from exc
        log.info("deleted expired claim %s/%s (shutdownPolicy %s)", namespace, name, policy)

    async def _reconcile_expired(self, work: _Pass) -> Obj | None:
        claim = work.claim
        namespace, claim_name = _key(claim)
        target = str(((claim.get("status") or {}).get("sandbox") or {}).get("name") or claim_name)
        sandbox = self.sandboxes.get(namespace, target)
        if sandbox is None:
            return None
        if not is_controlled_by(sandbox, claim):
            raise SandboxNotOwnedError(target, claim_name)
        if not meta(sandbox).get("deletionTimestamp"):
            try:
                await self._client.delete(
                    SANDBOXES, namespace, target, preconditions={"uid": str(meta(sandbox)["uid"])}
                )
                log.info("deleted sandbox %s/%s of expired claim", namespace, target)
            except ApiError as exc:
                if exc.not_found:
                    self.sandboxes.forget(namespace, target)
                    return None
                raise ReconcilerError(f"failed to delete sandbox: {exc}") from exc
        return sandbox

    # --- active ----------------------------------------------------------------------------

    async def _reconcile_active(self, work: _Pass, now: dt.datetime) -> Obj | None:
        claim = work.claim
        extra = (claim.get("spec") or {}).get("additionalPodMetadata") or {}
        try:
            podmetadata.validate_additional_pod_metadata(extra, allowed_label_domains=self._domains)
        except podmetadata.InvalidPodMetadataError as exc:
            raise InvalidMetadataError(str(exc)) from exc
        sandbox = await self._find_or_adopt(work, now)
        if sandbox is not None:
            return await self._sync_pod_metadata(work, sandbox)
        if work.pending_network:
            age = claim_age(work.claim, now)
            if age is not None and age < PENDING_IP_GRACE:
                return None
            log.info(
                "Warm pool candidates did not report Pod IPs within the grace period; "
                "falling back to cold creation",
                extra={"claim": "/".join(_key(claim))},
            )
            work.pending_network = False
        template = self._template_for(work.claim)
        return await self._create_cold(work, template)

    async def _find_or_adopt(self, work: _Pass, now: dt.datetime) -> Obj | None:
        """``getOrCreateSandbox`` steps a-e, without the create."""
        claim = work.claim
        namespace, claim_name = _key(claim)
        annotations, labels = _annotations(claim), _labels(claim)
        assignment = str(annotations.get(c.ANNOTATION_SANDBOX_NAME) or "")
        legacy = not assignment and bool(labels.get(c.LABEL_SANDBOX_NAME_LEGACY))
        if legacy:
            assignment = str(labels[c.LABEL_SANDBOX_NAME_LEGACY])

        # a. the Sandbox recorded in the status
        bound = str(((claim.get("status") or {}).get("sandbox") or {}).get("name") or "")
        if bound:
            sandbox = self.sandboxes.get(namespace, bound)
            if sandbox is not None and is_controlled_by(sandbox, claim):
                warm = assignment == bound or bound != claim_name
                return await self._ensure_launch_type(
                    sandbox, c.LAUNCH_TYPE_WARM if warm else c.LAUNCH_TYPE_COLD
                )

        # b. the Sandbox recorded by the assignment annotation (or legacy label)
        if assignment:
            sandbox = self.sandboxes.get(namespace, assignment)
            if sandbox is not None and is_controlled_by(sandbox, claim):
                if legacy:
                    await self._migrate_legacy_label(work, assignment)
                return await self._ensure_launch_type(sandbox, c.LAUNCH_TYPE_WARM)
            if sandbox is None:
                await self._clear_assignment(work, legacy=legacy)
            elif controlled_by_kind(sandbox, kind=c.KIND_SANDBOX_WARM_POOL) is not None:
                if adoptable_pool(sandbox) == _pool_name(claim):
                    self.queue.remove(namespace, _pool_name(claim), assignment)
                    return await self._complete_adoption(work, sandbox, key=None)
                await self._clear_assignment(work, legacy=legacy)
            elif controlled_by_kind(sandbox, kind=c.KIND_SANDBOX_CLAIM) is not None:
                try:
                    await self._clear_assignment(work, legacy=legacy)
                except ApiError as exc:
                    raise ReconcilerError(
                        f"failed to remove sandbox reference owned by another claim: {exc}"
                    ) from exc

        # c. the Sandbox named like the claim
        sandbox = self.sandboxes.get(namespace, claim_name)
        if sandbox is not None:
            if is_controlled_by(sandbox, claim):
                return await self._ensure_launch_type(sandbox, c.LAUNCH_TYPE_COLD)
            raise ReconcilerError(
                f"sandbox {quote(claim_name)} is not controlled by claim {quote(claim_name)}. "
                "Please use a different claim name or delete the sandbox manually"
            )

        # d. env or volume claim templates force a cold start
        spec = claim.get("spec") or {}
        if spec.get("env") or spec.get("volumeClaimTemplates"):
            return None

        # e. a warm Sandbox from the queue
        pool = _pool_name(claim)
        pick = pick_candidate(
            self.queue,
            namespace,
            pool,
            get_sandbox=self.sandboxes.get,
            get_pool=self._pools.get,
            get_template=self._templates.get,
        )
        if pick.sandbox is None:
            work.pending_network = pick.pending_network > 0
            return None
        return await self._adopt(work, pick.sandbox, pick.key)

    async def _ensure_launch_type(self, sandbox: Obj, value: str) -> Obj:
        if _labels(sandbox).get(c.LABEL_LAUNCH_TYPE):
            return sandbox
        namespace, name = _key(sandbox)
        patch = {"metadata": {"labels": {c.LABEL_LAUNCH_TYPE: value}}}
        try:
            updated = await self._client.patch(SANDBOXES, namespace, name, patch)
        except ApiError as exc:
            raise ReconcilerError(f"failed to set launch type: {exc}") from exc
        self.sandboxes.remember(updated)
        return updated

    async def _migrate_legacy_label(self, work: _Pass, name: str) -> None:
        patch = {
            "metadata": {
                "annotations": {c.ANNOTATION_SANDBOX_NAME: name, **work.pending},
                "labels": {c.LABEL_SANDBOX_NAME_LEGACY: None},
            }
        }
        try:
            await self._patch_claim(work, patch)
            work.pending.clear()
        except ApiError as exc:
            log.warning("claim %s: legacy label migration failed: %s", _key(work.claim), exc)

    async def _clear_assignment(self, work: _Pass, *, legacy: bool) -> None:
        key = c.LABEL_SANDBOX_NAME_LEGACY if legacy else c.ANNOTATION_SANDBOX_NAME
        section = "labels" if legacy else "annotations"
        metadata: Obj = {section: {key: None}}
        if work.first_ready_stamped:
            metadata.setdefault("annotations", {})[c.ANNOTATION_CLAIM_FIRST_READY_AT] = None
        await self._patch_claim(work, {"metadata": metadata})
        if work.first_ready_stamped:
            work.first_ready_stamped = False
            self._first_ready_owed.pop(_key(work.claim), None)

    # --- warm adoption ---------------------------------------------------------------------

    async def _adopt(self, work: _Pass, sandbox: Obj, key: WarmKey | None) -> Obj:
        """Record the assignment on the claim, then take the Sandbox (spec 4.3.5)."""
        namespace, pool = _key(work.claim)[0], _pool_name(work.claim)
        name = _key(sandbox)[1]
        annotations = {**work.pending, c.ANNOTATION_SANDBOX_NAME: name}
        stamp_ready = is_ready(sandbox) and not _annotations(work.claim).get(
            c.ANNOTATION_CLAIM_FIRST_READY_AT
        )
        if stamp_ready:
            annotations[c.ANNOTATION_CLAIM_FIRST_READY_AT] = rfc3339nano(self._clock_ns())
        try:
            await self._write_assignment(work, annotations, name)
        except BaseException:
            if key is not None:
                self.queue.push_back(namespace, pool, key)
            raise
        work.pending.clear()
        if stamp_ready:
            work.first_ready_stamped = True
            self._first_ready_owed[_key(work.claim)] = str(meta(work.claim).get("uid") or "")
        return await self._complete_adoption(work, sandbox, key=key)

    async def _write_assignment(self, work: _Pass, annotations: dict[str, str], name: str) -> None:
        """Claim annotation patch locked on the claim's resourceVersion; 409 -> live re-read."""
        namespace, claim_name = _key(work.claim)
        uid = meta(work.claim).get("uid")
        base = work.claim
        for attempt in range(ASSIGNMENT_RETRIES):
            patch = {
                "metadata": {
                    "resourceVersion": meta(base).get("resourceVersion"),
                    "annotations": annotations,
                }
            }
            try:
                updated = await self._client.patch(SANDBOX_CLAIMS, namespace, claim_name, patch)
            except ApiError as exc:
                if not exc.conflict or attempt == ASSIGNMENT_RETRIES - 1:
                    if exc.conflict:
                        raise AdoptionConflictError(
                            f"failed to record sandbox assignment on claim: "
                            f"{conflict_detail(str(exc))}"
                        ) from exc
                    raise ReconcilerError(f"failed to record sandbox assignment: {exc}") from exc
                await asyncio.sleep(0.01 * (1 + 0.1 * attempt))
                live = await self._client.get(SANDBOX_CLAIMS, namespace, claim_name)
                recorded = _annotations(live).get(c.ANNOTATION_SANDBOX_NAME)
                if meta(live).get("uid") != uid:
                    raise AdoptionConflictError("claim was re-created during adoption") from exc
                if recorded and recorded != name:
                    raise AdoptionConflictError(
                        f"claim already records sandbox {quote(str(recorded))}"
                    ) from exc
                self.claims.remember(live)
                base = live
                continue
            self.claims.remember(updated)
            work.claim = updated
            return

    async def _complete_adoption(self, work: _Pass, sandbox: Obj, *, key: WarmKey | None) -> Obj:
        """The locked adoption patch of the Sandbox; 404/409 resolved with one live GET."""
        claim = work.claim
        namespace, name = _key(sandbox)
        pool = adoptable_pool(sandbox) or ""
        # without the template, the claim's metadata is merged into the existing pod metadata
        template = self._template_or_none(claim)
        base = sandbox
        for attempt in range(ADOPTION_RETRIES):
            target = adoption_target(base, claim, template)
            patch = create_merge_patch(_writable(base), target)
            patch.setdefault("metadata", {})["resourceVersion"] = meta(base).get("resourceVersion")
            try:
                adopted = await self._client.patch(SANDBOXES, namespace, name, patch)
            except ApiError as exc:
                if not (exc.conflict or exc.not_found):
                    raise ReconcilerError(f"failed to adopt sandbox {quote(name)}: {exc}") from exc
                live = await self._live_sandbox(namespace, name)
                if live is not None and is_controlled_by(live, claim):
                    adopted = live
                    break
                if live is None or adoptable_pool(live) != pool or not pool:
                    await self._clear_assignment(work, legacy=False)
                    raise AdoptionConflictError(
                        f"sandbox {quote(name)} was taken or removed during adoption"
                    ) from exc
                if attempt == ADOPTION_RETRIES - 1:
                    raise AdoptionConflictError(
                        f"failed to adopt sandbox {quote(name)}: {conflict_detail(str(exc))}"
                    ) from exc
                base = live
                continue
            break
        self.sandboxes.remember(adopted)
        self._event(claim, "SandboxAdopted", "Adoption", f"Adopted warm pool Sandbox {quote(name)}")
        if self._metrics is not None:
            self._metrics.record_creation(
                namespace=namespace,
                sandbox_template=sandbox_template(adopted),
                launch_type=c.LAUNCH_TYPE_WARM,
                warmpool_name=pool,
                pod_condition="ready" if is_ready(adopted) else "not_ready",
                created_by=c.normalize_created_by(claim_created_by(claim)),
            )
        log.debug("claim %s/%s adopted warm sandbox %s", namespace, _key(claim)[1], name)
        return adopted

    async def _live_sandbox(self, namespace: str, name: str) -> Obj | None:
        try:
            live = await self._client.get(SANDBOXES, namespace, name)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise ReconcilerError(f"failed to read sandbox {quote(name)}: {exc}") from exc
        self.sandboxes.remember(live)
        return live

    # --- templates and metadata ------------------------------------------------------------

    def _template_for(self, claim: Obj, *, prefix: str = "") -> Obj:
        namespace = _key(claim)[0]
        pool_name = _pool_name(claim)
        pool = self._pools.get(namespace, pool_name)
        if pool is None:
            raise WarmPoolNotFoundError(pool_name, prefix=prefix)
        template_name = template_name_of(pool)
        template = self._templates.get(namespace, template_name)
        if template is None:
            raise TemplateNotFoundError(template_name, prefix=prefix)
        return template

    def _template_or_none(self, claim: Obj) -> Obj | None:
        try:
            return self._template_for(claim)
        except (WarmPoolNotFoundError, TemplateNotFoundError):
            return None

    async def _sync_pod_metadata(self, work: _Pass, sandbox: Obj) -> Obj:
        """Fast path step 3: template and claim pod metadata flow to a bound Sandbox."""
        claim = work.claim
        try:
            template = self._template_for(
                claim, prefix="failed to get template for metadata propagation: "
            )
        except (WarmPoolNotFoundError, TemplateNotFoundError):
            if has_additional_pod_metadata(claim):
                raise
            return sandbox
        desired = desired_pod_metadata(claim, template)
        current = (sandbox.get("spec") or {}).get("podTemplate") or {}
        labels = _labels(sandbox)
        want_hash = template_ref_hash(str(meta(template).get("name") or ""))
        created_by = claim_created_by(claim)
        target = copy.deepcopy(_writable(sandbox))
        changed = False
        if not semantic_equal(current.get("metadata") or {}, desired):
            target.setdefault("spec", {}).setdefault("podTemplate", {})["metadata"] = desired
            changed = True
        target_labels = target.setdefault("metadata", {}).setdefault("labels", {})
        if labels.get(c.LABEL_SANDBOX_TEMPLATE_REF_HASH) != want_hash:
            target_labels[c.LABEL_SANDBOX_TEMPLATE_REF_HASH] = want_hash
            changed = True
        if (labels.get(c.LABEL_CREATED_BY) or "") != created_by:
            if created_by:
                target_labels[c.LABEL_CREATED_BY] = created_by
            else:
                target_labels.pop(c.LABEL_CREATED_BY, None)
            changed = True
        if not changed:
            return sandbox
        patch = create_merge_patch(_writable(sandbox), target)
        namespace, name = _key(sandbox)
        try:
            updated = await self._client.patch(SANDBOXES, namespace, name, patch)
        except ApiError as exc:
            raise ReconcilerError(f"failed to update sandbox pod metadata: {exc}") from exc
        self.sandboxes.remember(updated)
        return updated

    # --- cold start ------------------------------------------------------------------------

    async def _create_cold(self, work: _Pass, template: Obj) -> Obj:
        claim = work.claim
        # annotations not yet written (this pass's trace context) already count for the Sandbox
        view = {
            **claim,
            "metadata": {**meta(claim), "annotations": {**_annotations(claim), **work.pending}},
        }
        body = build_cold_sandbox(view, template)
        namespace, name = _key(claim)
        try:
            created = await self._client.create(SANDBOXES, namespace, body)
        except ApiError as exc:
            if exc.already_exists:
                raise SandboxCreatePendingError() from exc
            raise ReconcilerError(f"sandbox create error: {exc}") from exc
        self.sandboxes.remember(created)
        self._event(claim, "SandboxProvisioned", "Provisioning", f"Created Sandbox {quote(name)}")
        if self._metrics is not None:
            self._metrics.record_creation(
                namespace=namespace,
                sandbox_template=sandbox_template(created),
                launch_type=c.LAUNCH_TYPE_COLD,
                warmpool_name=_pool_name(claim),
                pod_condition="not_ready",
                created_by=c.normalize_created_by(claim_created_by(claim)),
            )
        log.info("claim %s/%s: created sandbox %s", namespace, name, name)
        return created

    # --- status ----------------------------------------------------------------------------

    async def _write_status(self, work: _Pass, old_status: Obj, new_status: Obj) -> bool:
        """Write the status if it changed; False when a 409 or 404 made the pass moot."""
        patch = status_write(
            old_status, new_status, resource_version=meta(work.claim).get("resourceVersion")
        )
        if patch is None:
            return True
        namespace, name = _key(work.claim)
        try:
            updated = await self._client.patch(
                SANDBOX_CLAIMS, namespace, name, patch, subresource="status"
            )
        except ApiError as exc:
            if exc.conflict or exc.not_found:
                log.debug("claim %s/%s: status write dropped: %s", namespace, name, exc)
                return False
            raise ReconcilerError(f"failed to update claim status: {exc}") from exc
        self.claims.remember(updated)
        work.claim = updated
        return True

    async def _record_first_ready(
        self, work: _Pass, old_status: Obj, new_status: Obj, sandbox: Obj | None
    ) -> None:
        """Latency metrics once per claim, at its first Ready=True (spec 5.2, delta 7)."""
        if not status_is_ready(new_status):
            return
        claim = work.claim
        uid = str(meta(claim).get("uid") or "")
        annotations = _annotations(claim)
        if self._first_ready_owed.get(_key(claim)) == uid:
            del self._first_ready_owed[_key(claim)]
            self._observe(claim, sandbox)
            return
        if annotations.get(c.ANNOTATION_CLAIM_FIRST_READY_AT):
            return
        if status_is_ready(old_status):
            value = "unknown"
        else:
            self._observe(claim, sandbox)
            value = rfc3339nano(self._clock_ns())
        patch = {"metadata": {"annotations": {c.ANNOTATION_CLAIM_FIRST_READY_AT: value}}}
        try:
            await self._patch_claim(work, patch)
        except ApiError as exc:
            if not exc.not_found:
                raise ReconcilerError(f"failed to stamp first-ready annotation: {exc}") from exc

    def _observe(self, claim: Obj, sandbox: Obj | None) -> None:
        if self._metrics is None:
            return
        annotations = _annotations(claim)
        if not annotations.get(c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT):
            # not persisted (--disable-claim-observability-annotations): the time in memory
            annotations[c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT] = rfc3339nano(
                self.observed.record(claim)
            )
            claim = {**claim, "metadata": {**meta(claim), "annotations": annotations}}
        self._metrics.observe_first_ready(claim, sandbox=sandbox, now=self._clock())

    # --- side work -------------------------------------------------------------------------

    def _event(self, claim: Obj, reason: str, action: str, note: str) -> None:
        if self._recorder is not None:
            self._recorder.event(claim, type_="Normal", reason=reason, action=action, note=note)

    def _cleanup_legacy_network_policy(self, claim: Obj) -> None:
        """Delete ``<claim>-network-policy`` if the cache shows the claim controlling it.

        Reads only the cache; the DELETE runs in the background, once per policy UID.
        """
        if self._policies is None:
            return
        key = _key(claim)
        policy = self._policies.get(key[0], legacy_network_policy_name(key[1]))
        if policy is None:
            self._np_deleted.pop(key, None)
            return
        policy_uid = str(meta(policy).get("uid") or "")
        if not policy_uid or self._np_deleted.get(key) == policy_uid:
            return
        if not is_legacy_network_policy_of(policy, claim):
            return
        self._np_deleted[key] = policy_uid
        task = asyncio.create_task(self._delete_legacy_network_policy(key, policy_uid))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _delete_legacy_network_policy(self, key: tuple[str, str], policy_uid: str) -> None:
        namespace, name = key
        np_name = legacy_network_policy_name(name)
        try:
            await self._client.delete(
                NETWORK_POLICIES, namespace, np_name, preconditions={"uid": policy_uid}
            )
            log.info("deleted legacy network policy %s/%s", namespace, np_name)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return  # gone already, or replaced by another object (a later pass decides)
            self._forget_deletion(key, policy_uid)
            log.warning("legacy network policy cleanup of %s/%s: %s", namespace, np_name, exc)
        except Exception:
            self._forget_deletion(key, policy_uid)
            log.exception("legacy network policy cleanup of %s/%s failed", namespace, np_name)

    def _forget_deletion(self, key: tuple[str, str], policy_uid: str) -> None:
        """Let the next pass try again after a failed DELETE."""
        if self._np_deleted.get(key) == policy_uid:
            del self._np_deleted[key]


def legacy_network_policy_name(claim_name: str) -> str:
    """The name of the per-claim NetworkPolicy older controllers created."""
    return f"{claim_name}-network-policy"


def is_legacy_network_policy_of(policy: Obj, claim: Obj) -> bool:
    """True when ``claim`` (an extensions SandboxClaim, by UID) controls ``policy``."""
    return controlled_by_kind(policy, kind=c.KIND_SANDBOX_CLAIM) is not None and (
        is_controlled_by(policy, claim)
    )


def _writable(obj: Obj) -> Obj:
    """The parts of an object a metadata/spec merge patch is computed over (not status)."""
    return {k: v for k, v in obj.items() if k != "status"}


def _shorter(value: float, other: float | None) -> float:
    if other is not None and 0 < other < value:
        return other
    return value


def _span_attributes(claim: Obj) -> dict[str, str]:
    namespace, name = _key(claim)
    return {"sandboxclaim.name": name, "sandboxclaim.namespace": namespace}
