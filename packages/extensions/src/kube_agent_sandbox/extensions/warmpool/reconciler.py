"""One pass over a SandboxWarmPool: count members, replace what is stale or stuck, refill or
trim to ``spec.replicas``, and write the status (upstream v0.5.6
extensions/controllers/sandboxwarmpool_controller.go, reconcilePool).

This module keeps the top-level flow of :meth:`WarmPoolReconciler.reconcile` and the state
that outlives a pass; each step lives in its own module: :mod:`.active` (``filterActiveSandboxes``),
:mod:`.stuck`, :mod:`.scale` (refill and trim), :mod:`.progress` (``setNotProgressing``) and
:mod:`.status` (``updateStatus``). Steps collect their errors on the pass;
:meth:`~WarmPoolReconciler.reconcile` raises them once, at the end.

Reads come from caches; the only thing that stops a lagging cache from causing a double
create is :class:`Expectations`, never a wait: a pass that finds earlier writes unobserved
skips creating and deleting, and the Sandbox events that lower the expectations requeue the
pool. State (expectations, refill shaping, not-progressing) is per pool, so pools never wait
on each other.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from collections.abc import Callable
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    EventRecorder,
    Expectations,
    Obj,
    Reader,
    Request,
    Result,
    TransientError,
    controller_ref,
    meta,
)
from kube_agent_sandbox.extensions.common.ownership import is_extension_ref
from kube_agent_sandbox.extensions.warmpool.active import filter_active
from kube_agent_sandbox.extensions.warmpool.blueprint import (
    TemplateHashes,
    build_member,
    hashes_of,
    pool_selector,
    template_name_of,
)
from kube_agent_sandbox.extensions.warmpool.indexes import MEMBER_INDEX, member_key
from kube_agent_sandbox.extensions.warmpool.members import (
    StalenessCheck,
    is_ready,
    is_terminating,
    pod_name_of,
)
from kube_agent_sandbox.extensions.warmpool.metrics import WarmPoolMetrics
from kube_agent_sandbox.extensions.warmpool.passes import Pass, PoolState, uid_of
from kube_agent_sandbox.extensions.warmpool.progress import (
    ProgressSignal,
    not_progressing_message,
)
from kube_agent_sandbox.extensions.warmpool.refill import ReplenishHold, TokenBucket
from kube_agent_sandbox.extensions.warmpool.scale import (
    EXPECTATIONS_REQUEUE,
    GENERATE_NAME_ATTEMPTS,
    create_members,
    trim_members,
)
from kube_agent_sandbox.extensions.warmpool.settings import (
    DEFAULT_GRACE,
    DEFAULT_MAX_BATCH,
    DEFAULT_RECHECK,
    STATUS_INTERVAL,
    WarmPoolSettings,
)
from kube_agent_sandbox.extensions.warmpool.status import desired_status, write_status
from kube_agent_sandbox.extensions.warmpool.stuck import stuck_pass

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_RECHECK",
    "EXPECTATIONS_REQUEUE",
    "GENERATE_NAME_ATTEMPTS",
    "STATUS_INTERVAL",
    "WarmPoolReconcileError",
    "WarmPoolReconciler",
    "WarmPoolSettings",
    "pool_key_of_sandbox",
]

log = logging.getLogger(__name__)

_HASH_MEMO_LIMIT: Final = 1024


def _namespace_terminating(error: BaseException) -> bool:
    return isinstance(error, ApiError) and error.namespace_terminating


class WarmPoolReconcileError(TransientError):
    """One or more writes of a pass failed; the pass is retried with backoff."""

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _desired_replicas(pool: Obj) -> int:
    replicas = (pool.get("spec") or {}).get("replicas")
    return 1 if replicas is None else max(0, int(replicas))


def pool_key_of_sandbox(sandbox: Obj) -> Request | None:
    """The pool controlling ``sandbox`` (by its controller reference), if any."""
    ref = controller_ref(sandbox)
    if not is_extension_ref(ref, kind=c.KIND_SANDBOX_WARM_POOL) or ref is None:
        return None
    name = ref.get("name")
    if not name:
        return None
    return Request(str(meta(sandbox).get("namespace") or ""), str(name))


class WarmPoolReconciler:
    """Reconciles SandboxWarmPools.

    Args:
        client: Writes go here.
        pools: Cache of SandboxWarmPools.
        sandboxes: Cache of Sandboxes with the :data:`MEMBER_INDEX` index.
        templates: Cache of SandboxTemplates.
        pods: Cache of Pods (for the unschedulable check).
        recorder: Events as ``sandboxwarmpool-controller``.
        settings: Flags.
        expectations: Shared with the Sandbox event handler (a new one if omitted).
        clock: Monotonic seconds (refill shaping).
        now: Wall clock (member ages).
        jitter: Random number in [0, 1) for the grace requeue jitter.
        metrics: Where created members are counted (none when omitted).
    """

    def __init__(
        self,
        client: Client,
        *,
        pools: Reader,
        sandboxes: Reader,
        templates: Reader,
        pods: Reader,
        recorder: EventRecorder,
        settings: WarmPoolSettings | None = None,
        expectations: Expectations | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], dt.datetime] = _utcnow,
        jitter: Callable[[], float] = random.random,
        metrics: WarmPoolMetrics | None = None,
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.pools = pools
        self.sandboxes = sandboxes
        self.templates = templates
        self.pods = pods
        self.settings = settings or WarmPoolSettings()
        self.expectations = expectations if expectations is not None else Expectations()
        self.progress = ProgressSignal(recorder)
        self._clock = clock
        self._now = now
        self._jitter = jitter
        self._state: dict[Request, PoolState] = {}
        self._hashes: dict[tuple[str, str], TemplateHashes] = {}

    def _hashes_of(self, template: Obj) -> TemplateHashes:
        """The template's hashes, computed once per template version (uid, resourceVersion)."""
        m = meta(template)
        version = (str(m.get("uid") or ""), str(m.get("resourceVersion") or ""))
        if not all(version):
            return hashes_of(template)
        found = self._hashes.get(version)
        if found is None:
            if len(self._hashes) >= _HASH_MEMO_LIMIT:
                self._hashes.clear()
            found = self._hashes[version] = hashes_of(template)
        return found

    # -- Sandbox events (called by the informer before the pool is queued) ------------------
    def observe_added(self, sandbox: Obj) -> Request | None:
        """A Sandbox appeared in the cache: lower its pool's pending creations."""
        key = pool_key_of_sandbox(sandbox)
        if key is not None:
            self.expectations.creation_observed(key)
        return key

    def observe_deleted(self, sandbox: Obj) -> Request | None:
        """A Sandbox left the cache: its pool's deletion of it is observed."""
        key = pool_key_of_sandbox(sandbox)
        if key is not None:
            self.expectations.deletion_observed(key, uid_of(sandbox))
        return key

    def forget(self, key: Request) -> None:
        """Drop every in-memory record of a pool (it is gone or being deleted)."""
        self.expectations.forget(key)
        self.progress.forget(key)
        self._state.pop(key, None)

    def _pool_state(self, key: Request) -> PoolState:
        state = self._state.get(key)
        if state is None:
            state = PoolState(ReplenishHold(self.settings.replenish_delay, clock=self._clock))
            if self.settings.max_refill_rate > 0:
                state.bucket = TokenBucket(self.settings.max_refill_rate, clock=self._clock)
            self._state[key] = state
        return state

    # -- the pass -----------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        """Converge one pool (upstream's reconcilePool)."""
        pool = self.pools.get(request.namespace, request.name)
        if pool is None or is_terminating(pool):
            self.forget(request)
            return Result()
        template_name = template_name_of(pool)
        template = self.templates.get(request.namespace, template_name) if template_name else None
        run = Pass(request, pool, template)
        pool_hash = name_hash(request.name)
        listed = self.sandboxes.by_index(MEMBER_INDEX, member_key(request.namespace, pool_hash))
        await filter_active(
            run,
            listed,
            staleness=self._staleness(run),
            client=self.client,
            expectations=self.expectations,
        )
        await stuck_pass(
            run,
            pod_of=self._pod_of,
            now=self._now(),
            grace=self.settings.grace,
            jitter=self._jitter,
            client=self.client,
            expectations=self.expectations,
        )

        desired = _desired_replicas(pool)
        current = len(run.active)
        total = current + run.terminating + run.adopting
        status = desired_status(
            replicas=current,
            ready_replicas=sum(1 for sb in run.active if is_ready(sb)),
            selector=pool_selector(pool_hash),
            observed_generation=int(meta(pool).get("generation") or 0),
        )
        state = self._pool_state(request)
        hold = state.hold.observe(current, desired)
        if template is not None:
            if hold > 0 and current < desired:
                run.requeue.at_most(hold)
            elif total < desired:
                created = await create_members(
                    run,
                    state,
                    min(desired - total, self.settings.batch),
                    body=lambda: self._member_of(pool, template),
                    client=self.client,
                    expectations=self.expectations,
                )
                if self.metrics is not None:
                    self.metrics.members_created(request, created)
        if current > desired:
            await trim_members(
                run,
                min(current - desired, self.settings.batch),
                client=self.client,
                expectations=self.expectations,
            )
        self._signal_progress(run, desired)

        if run.errors:
            terminating = [e for e in run.errors if _namespace_terminating(e)]
            if len(terminating) == len(run.errors):
                raise terminating[0]  # its namespace is going away: the runtime ends the work
            raise WarmPoolReconcileError(run.errors)
        await write_status(
            run,
            state,
            status,
            client=self.client,
            interval=self.settings.status_interval,
            clock=self._clock,
        )
        return Result(requeue_after=run.requeue.after)

    def _staleness(self, run: Pass) -> StalenessCheck | None:
        """The staleness check of the pool's template (None if the template is missing)."""
        if run.template is None:
            return None
        return StalenessCheck(
            run.template, template_name_of(run.pool), self._hashes_of(run.template).blueprint
        )

    def _pod_of(self, sandbox: Obj) -> Obj | None:
        return self.pods.get(str(meta(sandbox).get("namespace") or ""), pod_name_of(sandbox))

    def _member_of(self, pool: Obj, template: Obj) -> Obj:
        """The Sandbox the pool creates (upstream's buildSandboxCR)."""
        return build_member(
            pool,
            template,
            hashes=self._hashes_of(template),
            enable_eviction=self.settings.enable_eviction,
        )

    def _signal_progress(self, run: Pass, desired: int) -> None:
        if run.unschedulable > 0:
            message = not_progressing_message(run.unschedulable, desired, grace=self.settings.grace)
            self.progress.update(run.key, run.pool, stalled=True, message=message)
            run.requeue.at_most(self.settings.recheck)
        else:
            self.progress.update(run.key, run.pool, stalled=False)
