"""One pass over a SandboxWarmPool: count members, replace what is stale or stuck, refill or
trim to ``spec.replicas``, and write the status (spec 4.2.1 as amended by delta 4).

Reads come from caches; the only thing that stops a lagging cache from causing a double
create is :class:`Expectations`, never a wait: a pass that finds earlier writes unobserved
skips creating and deleting, and the Sandbox events that lower the expectations requeue the
pool. State (expectations, refill shaping, not-progressing) is per pool, so pools never wait
on each other.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.controller.runtime.expectations import Expectations
from kube_agent_sandbox.controller.runtime.objects import controller_ref, meta, name_of
from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    Client,
    EventRecorder,
    Obj,
    Reader,
    Request,
    Result,
    TransientError,
)
from kube_agent_sandbox.extensions.common.blueprint import (
    ON_REPLENISH,
    RECREATE,
    update_strategy,
)
from kube_agent_sandbox.extensions.common.ownership import controller_ref_to, is_extension_ref
from kube_agent_sandbox.extensions.common.resources import SANDBOX_WARM_POOLS, SANDBOXES
from kube_agent_sandbox.extensions.warmpool.batches import slow_start
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
    StuckVerdict,
    deletion_order,
    is_ready,
    is_terminating,
    pod_name_of,
    stuck_verdict,
)
from kube_agent_sandbox.extensions.warmpool.progress import (
    ProgressSignal,
    not_progressing_message,
)
from kube_agent_sandbox.extensions.warmpool.refill import ReplenishHold, TokenBucket
from kube_agent_sandbox.extensions.warmpool.status import desired_status, status_patch

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.config import ControllerOptions

log = logging.getLogger(__name__)

EXPECTATIONS_REQUEUE: Final = 30.0
"""Seconds before re-checking a pool whose earlier writes are not yet in the cache."""
_HASH_MEMO_LIMIT: Final = 1024
_KNOWN_STRATEGIES: Final = frozenset({RECREATE, ON_REPLENISH})
GENERATE_NAME_ATTEMPTS: Final = 3
"""Tries of a create whose generated name collides (AlreadyExists) before it counts as failed."""
DEFAULT_MAX_BATCH: Final = 300
DEFAULT_GRACE: Final = 300.0
DEFAULT_RECHECK: Final = 60.0
STATUS_INTERVAL: Final = 1.0
"""Seconds between two status writes of one pool that only count members (the controller's
setting; a claim burst would otherwise patch the pool's status for every member it takes)."""


def _namespace_terminating(error: BaseException) -> bool:
    return isinstance(error, ApiError) and error.namespace_terminating


class WarmPoolReconcileError(TransientError):
    """One or more writes of a pass failed; the pass is retried with backoff."""

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class WarmPoolSettings:
    """The flags the warm pool controller uses (durations in seconds).

    Zero or negative batch size, grace and re-check fall back to upstream's defaults, as a
    reconciler built without them does upstream.
    """

    max_batch_size: int = DEFAULT_MAX_BATCH
    enable_eviction: bool = True
    readiness_grace: float = DEFAULT_GRACE
    unschedulable_recheck: float = DEFAULT_RECHECK
    replenish_delay: float = 0.0
    max_refill_rate: float = 0.0
    status_interval: float = 0.0
    """Coalesce member-count status changes of a pool into one write per this many seconds
    (0: write every change at once); a new ``observedGeneration`` is always written at once."""

    @classmethod
    def from_options(cls, options: ControllerOptions) -> WarmPoolSettings:
        """The settings of parsed controller flags."""
        return cls(
            max_batch_size=options.sandbox_warm_pool_max_batch_size,
            enable_eviction=options.enable_warm_pool_eviction,
            readiness_grace=options.sandbox_warm_pool_readiness_grace_period,
            unschedulable_recheck=options.sandbox_warm_pool_unschedulable_recheck_interval,
            replenish_delay=options.sandbox_warm_pool_replenish_delay,
            max_refill_rate=options.sandbox_warm_pool_max_refill_rate,
            status_interval=STATUS_INTERVAL,
        )

    @property
    def batch(self) -> int:
        """Max creates or deletes per pass."""
        return self.max_batch_size if self.max_batch_size > 0 else DEFAULT_MAX_BATCH

    @property
    def grace(self) -> float:
        """Readiness grace period."""
        return self.readiness_grace if self.readiness_grace > 0 else DEFAULT_GRACE

    @property
    def recheck(self) -> float:
        """Re-check interval while unschedulable members are held."""
        return self.unschedulable_recheck if self.unschedulable_recheck > 0 else DEFAULT_RECHECK


@dataclass
class _PoolState:
    hold: ReplenishHold
    bucket: TokenBucket | None = None
    status_written_at: float | None = None
    written: tuple[str, dict[str, Any]] | None = None
    """(resourceVersion the last status write started from, the status it wrote): the cache
    shows that version until the write arrives, and must not cause the same write again."""


@dataclass
class _Requeue:
    """The minimum non-zero requeue of a pass."""

    after: float | None = None

    def at_most(self, seconds: float | None) -> None:
        if seconds is not None and seconds > 0 and (self.after is None or seconds < self.after):
            self.after = seconds


@dataclass
class _Pass:
    """What one pass found and did (kept together so the steps stay small)."""

    key: Request
    pool: Obj
    template: Obj | None
    active: list[Obj] = field(default_factory=list)
    terminating: int = 0
    unschedulable: int = 0
    errors: list[BaseException] = field(default_factory=list)
    requeue: _Requeue = field(default_factory=_Requeue)

    @property
    def namespace(self) -> str:
        return self.key.namespace


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _uid(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


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
    ) -> None:
        self.client = client
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
        self._state: dict[Request, _PoolState] = {}
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
            self.expectations.deletion_observed(key, _uid(sandbox))
        return key

    def forget(self, key: Request) -> None:
        """Drop every in-memory record of a pool (it is gone or being deleted)."""
        self.expectations.forget(key)
        self.progress.forget(key)
        self._state.pop(key, None)

    def _pool_state(self, key: Request) -> _PoolState:
        state = self._state.get(key)
        if state is None:
            state = _PoolState(ReplenishHold(self.settings.replenish_delay, clock=self._clock))
            if self.settings.max_refill_rate > 0:
                state.bucket = TokenBucket(self.settings.max_refill_rate, clock=self._clock)
            self._state[key] = state
        return state

    # -- the pass -----------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        """Converge one pool (spec 4.2.1)."""
        pool = self.pools.get(request.namespace, request.name)
        if pool is None or is_terminating(pool):
            self.forget(request)
            return Result()
        template_name = template_name_of(pool)
        template = self.templates.get(request.namespace, template_name) if template_name else None
        run = _Pass(request, pool, template)
        pool_hash = name_hash(request.name)
        listed = self.sandboxes.by_index(MEMBER_INDEX, member_key(request.namespace, pool_hash))
        await self._filter_active(run, listed)
        await self._stuck_pass(run)

        desired = _desired_replicas(pool)
        current = len(run.active)
        total = current + run.terminating
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
                await self._create(run, state, min(desired - total, self.settings.batch))
        if current > desired:
            await self._trim(run, min(current - desired, self.settings.batch))
        self._signal_progress(run, desired)

        if run.errors:
            terminating = [e for e in run.errors if _namespace_terminating(e)]
            if len(terminating) == len(run.errors):
                raise terminating[0]  # its namespace is going away: the runtime ends the work
            raise WarmPoolReconcileError(run.errors)
        await self._write_status(run, state, status)
        return Result(requeue_after=run.requeue.after)

    async def _filter_active(self, run: _Pass, listed: list[Obj]) -> None:
        """``filterActiveSandboxes`` (spec 4.2.3): count, delete the stale, adopt orphans."""
        pool_uid = _uid(run.pool)
        staleness: StalenessCheck | None = None
        if run.template is not None:
            staleness = StalenessCheck(
                run.template, template_name_of(run.pool), self._hashes_of(run.template).blueprint
            )
        recreate = update_strategy(run.pool) == RECREATE
        asked = ((run.pool.get("spec") or {}).get("updateStrategy") or {}).get("type")
        if asked and asked not in _KNOWN_STRATEGIES:
            log.info(
                "unknown warm pool update strategy, using OnReplenish",
                extra={"pool": str(run.key), "updateStrategy": asked},
            )
        stale: list[tuple[Obj, bool]] = []
        fixes: list[tuple[Obj, bool]] = []
        for sb in listed:
            ref = controller_ref(sb)
            owned = ref is not None and bool(pool_uid) and ref.get("uid") == pool_uid
            if is_terminating(sb):
                run.terminating += owned
                continue
            if owned and self.expectations.is_pending_deletion(run.key, _uid(sb)):
                run.terminating += 1
                continue
            if ref is not None and not owned:
                continue
            orphan = ref is None
            if staleness is not None and (recreate or orphan) and staleness.is_stale(sb):
                stale.append((sb, owned))
                continue
            labels = meta(sb).get("labels") or {}
            if orphan or labels.get(c.LABEL_LAUNCH_TYPE) != c.LAUNCH_TYPE_WARM:
                fixes.append((sb, orphan))
                continue
            run.active.append(sb)
        if stale:
            await self._delete_stale(run, stale)
        if fixes:
            await self._fix_members(run, fixes)

    async def _delete_stale(self, run: _Pass, stale: list[tuple[Obj, bool]]) -> None:
        async def delete(item: tuple[Obj, bool]) -> None:
            sb, owned = item
            try:
                if owned:
                    await self._delete_member(run.key, sb)
                else:
                    await self._delete(sb)
            except Exception as exc:
                run.errors.append(exc)
                if owned:
                    run.active.append(sb)  # still ours and still there
                return
            run.terminating += owned

        await asyncio.gather(*(delete(item) for item in stale))

    async def _fix_members(self, run: _Pass, fixes: list[tuple[Obj, bool]]) -> None:
        """Set the ``launch-type: warm`` label, and adopt orphans (controller reference)."""

        async def fix(item: tuple[Obj, bool]) -> None:
            sb, orphan = item
            m = meta(sb)
            patch_meta: dict[str, Any] = {
                "resourceVersion": m.get("resourceVersion"),
                "labels": {c.LABEL_LAUNCH_TYPE: c.LAUNCH_TYPE_WARM},
            }
            if orphan:
                refs = [r for r in m.get("ownerReferences") or () if isinstance(r, dict)]
                patch_meta["ownerReferences"] = [
                    *refs,
                    controller_ref_to(run.pool, kind=c.KIND_SANDBOX_WARM_POOL),
                ]
            try:
                updated = await self.client.patch(
                    SANDBOXES, run.namespace, name_of(sb), {"metadata": patch_meta}
                )
            except Exception as exc:
                if orphan:
                    run.errors.append(
                        RuntimeError(
                            "set controller reference for warm pool sandbox "
                            f"{run.namespace}/{name_of(sb)}: {exc}"
                        )
                    )
                    return
                run.errors.append(exc)
                run.active.append(sb)
                return
            if orphan:
                log.info(
                    "adopted orphan sandbox into warm pool",
                    extra={"pool": str(run.key), "sandbox": name_of(sb)},
                )
            run.active.append(updated)

        await asyncio.gather(*(fix(item) for item in fixes))

    async def _stuck_pass(self, run: _Pass) -> None:
        """Delete members not Ready past the grace period, except unschedulable ones (held)."""
        now = self._now()
        grace = self.settings.grace
        keep: list[Obj] = []
        stuck: list[Obj] = []
        earliest: float | None = None
        for sb in run.active:
            verdict, retry = stuck_verdict(sb, pod_of=self._pod_of, now=now, grace=grace)
            if verdict is StuckVerdict.STUCK:
                stuck.append(sb)
                continue
            if verdict is StuckVerdict.HOLD:
                run.unschedulable += 1
            elif retry is not None and (earliest is None or retry < earliest):
                earliest = retry
            keep.append(sb)
        if earliest is not None:
            run.requeue.at_most(earliest * (1.0 + 0.5 * self._jitter()))
        if stuck:
            log.info(
                "deleting warm pool sandboxes not ready past the grace period",
                extra={"pool": str(run.key), "count": len(stuck)},
            )

            async def delete(sb: Obj) -> None:
                try:
                    await self._delete_member(run.key, sb)
                except Exception as exc:
                    run.errors.append(exc)
                    keep.append(sb)
                    return
                run.terminating += 1

            await asyncio.gather(*(delete(sb) for sb in stuck))
        run.active = keep

    def _pod_of(self, sandbox: Obj) -> Obj | None:
        return self.pods.get(str(meta(sandbox).get("namespace") or ""), pod_name_of(sandbox))

    async def _create(self, run: _Pass, state: _PoolState, deficit: int) -> None:
        """Create up to ``deficit`` members, paced and gated by the expectations."""
        assert run.template is not None
        granted = deficit
        if state.bucket is not None:
            granted, wait = state.bucket.take(deficit)
            if granted == 0:
                run.requeue.at_most(wait)
                return
        if not self.expectations.try_expect_creations(run.key, granted):
            if state.bucket is not None:
                state.bucket.refund(granted)
            run.requeue.at_most(EXPECTATIONS_REQUEUE)
            return
        body = build_member(
            run.pool,
            run.template,
            hashes=self._hashes_of(run.template),
            enable_eviction=self.settings.enable_eviction,
        )

        async def create(_: int) -> None:
            for attempt in range(GENERATE_NAME_ATTEMPTS):
                try:
                    await self.client.create(SANDBOXES, run.namespace, body)
                    return
                except ApiError as exc:
                    # a generated name collided with an existing one: draw another
                    if not exc.already_exists or attempt + 1 == GENERATE_NAME_ATTEMPTS:
                        raise

        created, errors = await slow_start(range(granted), create)
        for _ in range(granted - created):
            self.expectations.creation_observed(run.key)
        state.hold.created(created)
        log.debug(
            "created warm pool sandboxes",
            extra={"pool": str(run.key), "created": created, "wanted": granted},
        )
        run.errors.extend(errors)

    async def _trim(self, run: _Pass, excess: int) -> None:
        """Delete ``excess`` members: not Ready first, then newest first."""
        if not self.expectations.satisfied(run.key):
            run.requeue.at_most(EXPECTATIONS_REQUEUE)
            return
        victims = deletion_order(run.active)[:excess]

        async def delete(sb: Obj) -> None:
            await self._delete_member(run.key, sb)

        _, errors = await slow_start(victims, delete)
        run.errors.extend(errors)

    def _signal_progress(self, run: _Pass, desired: int) -> None:
        if run.unschedulable > 0:
            message = not_progressing_message(run.unschedulable, desired, grace=self.settings.grace)
            self.progress.update(run.key, run.pool, stalled=True, message=message)
            run.requeue.at_most(self.settings.recheck)
        else:
            self.progress.update(run.key, run.pool, stalled=False)

    # -- writes ---------------------------------------------------------------------------------
    async def _delete_member(self, key: Request, sandbox: Obj) -> None:
        """Delete a pool-owned member, expecting the deletion first (rolled back on failure)."""
        uid = _uid(sandbox)
        self.expectations.expect_deletion(key, uid)
        try:
            gone = await self._delete(sandbox)
        except BaseException:
            self.expectations.deletion_observed(key, uid)
            raise
        if gone:
            self.expectations.deletion_observed(key, uid)

    async def _delete(self, sandbox: Obj) -> bool:
        """Delete ``sandbox`` (this UID only). Returns True if it was already gone."""
        m = meta(sandbox)
        uid = _uid(sandbox)
        try:
            await self.client.delete(
                SANDBOXES,
                str(m.get("namespace") or ""),
                name_of(sandbox),
                preconditions={"uid": uid} if uid else None,
            )
        except ApiError as exc:
            if exc.not_found or (exc.conflict and "Precondition" in exc.message):
                return True
            raise
        return False

    async def _write_status(self, run: _Pass, state: _PoolState, desired: dict[str, Any]) -> None:
        """Patch the owned status fields that changed, coalescing member-count changes.

        A write the cache does not show yet counts as the current status (no repeat). A change
        that only counts members, within ``status_interval`` of the previous write, waits for
        the end of the interval (the pass requeues itself then), so a burst of claims costs one
        status write per interval instead of one per member taken or refilled.
        """
        pool = run.pool
        m = meta(pool)
        version = str(m.get("resourceVersion") or "")
        current = pool.get("status") or {}
        if state.written is not None:
            if state.written[0] == version:
                current = state.written[1]
            else:
                state.written = None
        patch = status_patch(current, desired)
        if not patch:
            return
        interval = self.settings.status_interval
        last = state.status_written_at
        if interval > 0 and last is not None and "observedGeneration" not in patch:
            wait = last + interval - self._clock()
            if wait > 0:
                run.requeue.at_most(wait)
                return
        try:
            await self.client.patch(
                SANDBOX_WARM_POOLS,
                str(m.get("namespace") or ""),
                name_of(pool),
                {"status": patch},
                subresource="status",
            )
        except ApiError as exc:
            if not exc.not_found:
                raise
            return
        state.status_written_at = self._clock()
        state.written = (version, {**current, **patch}) if version else None
