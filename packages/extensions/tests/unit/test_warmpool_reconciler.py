"""The warm pool pass against an in-memory API (upstream's reconcilePool)."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt

import pytest
from warmpool_harness import NS, POOL, TEMPLATE, World, pool_hash, stamp, template_obj

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_WARM_POOLS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import ApiError, Obj
from kube_agent_sandbox.extensions.warmpool.reconciler import (
    EXPECTATIONS_REQUEUE,
    WarmPoolReconcileError,
    WarmPoolSettings,
)

# -- expectations: never over-create ---------------------------------------------------------


async def test_a_cache_that_never_shows_creates_still_gets_exactly_replicas() -> None:
    world = World(replicas=5)
    for _ in range(10):
        await world.reconcile()
    assert world.creates() == 5
    assert len(world.members()) == 5


async def test_twenty_concurrent_reconciles_create_exactly_replicas() -> None:
    world = World(replicas=7, slow=True)
    await asyncio.gather(*(world.reconcile() for _ in range(20)))
    assert world.creates() == 7
    # and again, once the first ones are observed, nothing more is needed
    world.sync()
    await asyncio.gather(*(world.reconcile() for _ in range(20)))
    assert world.creates() == 7


async def test_scaling_from_zero_to_500_issues_exactly_500_creates() -> None:
    world = World(replicas=0)
    await world.reconcile()
    assert world.creates() == 0
    world.set_pool(replicas=500)
    passes = 0
    while world.creates() < 500 and passes < 20:
        await world.reconcile()
        world.sync()
        passes += 1
    for _ in range(3):
        await world.reconcile()
        world.sync()
    assert world.creates() == 500
    assert len(world.members()) == 500
    assert passes == 2  # the max batch (300) then the rest (200)
    assert world.status()["replicas"] == 500


async def test_a_pass_with_unobserved_creates_requeues_instead_of_creating() -> None:
    world = World(replicas=3)
    await world.reconcile()
    world.api.contents(SANDBOXES).clear()  # the creates vanished (e.g. adopted at once)
    world.sandboxes.sync()
    result = await world.reconcile()
    assert world.creates() == 3
    assert result.requeue_after == EXPECTATIONS_REQUEUE
    # the add events arrive: the gate opens
    for _ in range(3):
        world.reconciler.expectations.creation_observed(world.key)
    await world.reconcile()
    assert world.creates() == 6


async def test_failed_creates_lower_the_expectations_and_skip_the_status() -> None:
    world = World(replicas=4)
    world.api.fail("create", "sandboxes", ApiError(403, "Forbidden", "quota"))
    with pytest.raises(WarmPoolReconcileError, match="quota"):
        await world.reconcile()
    assert world.create_calls() == 1  # the first batch (1) failed: nothing more tried
    assert world.reconciler.expectations.satisfied(world.key)
    assert world.status() == {}
    await world.reconcile()
    assert len(world.members()) == 4


async def test_members_are_created_in_slow_start_batches() -> None:
    world = World(replicas=10, slow=True)
    in_flight = 0
    peaks: list[int] = []
    real_create = world.api.create

    async def create(*args: object, **kwargs: object) -> Obj:
        nonlocal in_flight
        in_flight += 1
        peaks.append(in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1
        return await real_create(*args, **kwargs)  # type: ignore[arg-type]

    world.reconciler.client.create = create  # type: ignore[method-assign]
    await world.reconcile()
    assert len(world.members()) == 10
    assert max(peaks) == 4  # batches 1, 2, 4, then the remaining 3


# -- the Sandbox a pool creates ----------------------------------------------------------------


async def test_created_members_have_the_spec_shape() -> None:
    world = World(replicas=1)
    await world.reconcile()
    (member,) = world.members()
    m = member["metadata"]
    assert m["generateName"] == f"{POOL}-"
    assert m["name"].startswith(f"{POOL}-")
    assert m["labels"][c.LABEL_WARM_POOL_SANDBOX] == pool_hash()
    assert m["labels"][c.LABEL_LAUNCH_TYPE] == "warm"
    assert m["labels"][c.LABEL_CREATED_BY] == "controller"
    assert m["annotations"] == {c.ANNOTATION_SANDBOX_TEMPLATE_REF: TEMPLATE}
    (ref,) = m["ownerReferences"]
    assert ref["kind"] == "SandboxWarmPool"
    assert ref["controller"] is True
    assert ref["uid"] == world.pool["metadata"]["uid"]


# -- status --------------------------------------------------------------------------------------


async def test_status_counts_members_and_names_the_selector() -> None:
    world = World(replicas=3)
    world.add_member("a", ready=True)
    world.add_member("b", ready=False)
    await world.reconcile()
    assert world.status() == {
        "replicas": 2,
        "readyReplicas": 1,
        "selector": f"{c.LABEL_WARM_POOL_SANDBOX}={pool_hash()}",
        "observedGeneration": 1,
    }


async def test_status_is_not_patched_when_unchanged() -> None:
    world = World(replicas=1)
    world.add_member("a")
    await world.reconcile()
    world.api.clear_calls()
    await world.reconcile()
    assert world.api.writes(SANDBOX_WARM_POOLS) == []


async def test_observed_generation_follows_the_pool() -> None:
    world = World(replicas=1)
    world.add_member("a")
    await world.reconcile()
    world.set_pool(replicas=1, updateStrategy={"type": "Recreate"})
    await world.reconcile()
    assert world.status()["observedGeneration"] == 2


async def test_zero_values_are_cleared_from_the_status() -> None:
    world = World(replicas=2)
    world.add_member("a")
    world.add_member("b")
    await world.reconcile()
    assert world.status()["replicas"] == 2
    world.set_pool(replicas=0)
    await world.reconcile()
    world.sync()
    await world.reconcile()
    status = world.status()
    assert "replicas" not in status
    assert "readyReplicas" not in status
    patches = [call.body for call in world.api.writes(SANDBOX_WARM_POOLS)]
    assert {"status": {"replicas": None, "readyReplicas": None}} in patches


# -- template -------------------------------------------------------------------------------------


async def test_a_missing_template_creates_nothing_but_writes_status() -> None:
    world = World(replicas=3, with_template=False)
    result = await world.reconcile()
    assert world.creates() == 0
    assert result.requeue_after is None
    assert world.status()["selector"] == f"{c.LABEL_WARM_POOL_SANDBOX}={pool_hash()}"
    world.set_template(template_obj())
    await world.reconcile()
    assert world.creates() == 3


async def test_a_pool_without_a_template_ref_does_not_crash() -> None:
    world = World(replicas=2, with_template=False)
    world.api.mutate(SANDBOX_WARM_POOLS, POOL, lambda p: p["spec"].pop("sandboxTemplateRef"))
    await world.reconcile()
    assert world.creates() == 0


async def test_replicas_default_to_one() -> None:
    world = World(replicas=None)
    await world.reconcile()
    assert world.creates() == 1


async def test_a_deleted_pool_forgets_its_state() -> None:
    world = World(replicas=2)
    await world.reconcile()
    assert len(world.reconciler.expectations) == 1
    world.api.contents(SANDBOX_WARM_POOLS).clear()
    await world.reconcile()
    assert len(world.reconciler.expectations) == 0


# -- staleness ------------------------------------------------------------------------------------


async def test_recreate_deletes_stale_members_and_replaces_them_later() -> None:
    world = World(replicas=2, strategy="Recreate")
    world.add_member("a")
    world.add_member("b")
    world.set_template(template_obj(image="busybox:2"))
    await world.reconcile()
    assert sorted(world.deletes()) == ["a", "b"]
    assert world.creates() == 0  # terminating members still count toward the target
    world.sync()
    await world.reconcile()
    assert world.creates() == 2
    images = {m["spec"]["podTemplate"]["spec"]["containers"][0]["image"] for m in world.members()}
    assert images == {"busybox:2"}


async def test_on_replenish_keeps_stale_members() -> None:
    world = World(replicas=2, strategy="OnReplenish")
    world.add_member("a")
    world.add_member("b")
    world.set_template(template_obj(image="busybox:2"))
    await world.reconcile()
    assert world.deletes() == []
    assert world.creates() == 0


async def test_template_metadata_edits_never_recreate() -> None:
    world = World(replicas=1, strategy="Recreate")
    world.add_member("a")
    template = template_obj()
    template["spec"]["podTemplate"]["metadata"]["labels"]["team"] = "blue"
    world.set_template(template)
    await world.reconcile()
    assert world.deletes() == []


async def test_staleness_compares_once_per_template_hash() -> None:
    world = World(replicas=4, strategy="Recreate")
    for name in "abcd":
        world.add_member(name, labels={c.LABEL_SANDBOX_TEMPLATE_HASH: "old"})
    calls = 0
    from kube_agent_sandbox.extensions.warmpool import members

    real = members.blueprint_matches

    def counting(template: Obj, spec: Obj) -> bool:
        nonlocal calls
        calls += 1
        return real(template, spec)

    members.blueprint_matches = counting  # type: ignore[assignment]
    try:
        await world.reconcile()
    finally:
        members.blueprint_matches = real  # type: ignore[assignment]
    assert calls == 1
    assert world.deletes() == []  # same spec, only the label differs: fresh


# -- orphans and foreign members ---------------------------------------------------------------


async def test_an_orphan_with_the_pool_label_is_adopted() -> None:
    world = World(replicas=2)
    world.add_member("orphan", owned=False)
    await world.reconcile()
    adopted = world.api.obj(SANDBOXES, "orphan")
    assert adopted is not None
    (ref,) = adopted["metadata"]["ownerReferences"]
    assert ref["uid"] == world.pool["metadata"]["uid"]
    assert ref["controller"] is True
    assert adopted["metadata"]["labels"][c.LABEL_LAUNCH_TYPE] == "warm"
    assert world.creates() == 1  # the orphan counts


async def test_a_stale_orphan_is_deleted_not_adopted() -> None:
    world = World(replicas=1, strategy="OnReplenish")
    world.add_member("orphan", owned=False)
    world.set_template(template_obj(image="other"))
    await world.reconcile()
    assert world.deletes() == ["orphan"]
    assert world.creates() == 1
    assert not world.reconciler.expectations.is_pending_deletion(
        world.key, world.members()[0]["metadata"]["uid"]
    )


async def test_a_failed_adoption_is_an_error_naming_the_sandbox() -> None:
    world = World(replicas=1)
    world.add_member("orphan", owned=False)
    world.api.fail("patch", "sandboxes", ApiError(409, "Conflict", "changed"))
    with pytest.raises(WarmPoolReconcileError, match="set controller reference for warm pool"):
        await world.reconcile()


async def test_members_controlled_by_someone_else_are_ignored() -> None:
    world = World(replicas=1)
    member = world.add_member("claimed")
    world.api.mutate(
        SANDBOXES,
        "claimed",
        lambda sb: sb["metadata"]["ownerReferences"][0].update(
            kind="SandboxClaim", uid="other", name="claim"
        ),
    )
    world.sandboxes.sync()
    await world.reconcile()
    assert world.creates() == 1
    assert member["metadata"]["name"] not in world.deletes()


async def test_a_missing_launch_type_label_is_set() -> None:
    world = World(replicas=1)
    world.add_member("a")
    world.api.mutate(SANDBOXES, "a", lambda sb: sb["metadata"]["labels"].pop(c.LABEL_LAUNCH_TYPE))
    world.sandboxes.sync()
    await world.reconcile()
    fixed = world.api.obj(SANDBOXES, "a")
    assert fixed is not None
    assert fixed["metadata"]["labels"][c.LABEL_LAUNCH_TYPE] == "warm"
    assert world.creates() == 0


# -- scale down ------------------------------------------------------------------------------------


async def test_scale_down_deletes_not_ready_first_then_newest() -> None:
    world = World(replicas=4)
    world.add_member("old-ready", created=dt.datetime(2026, 1, 1, 11, 0, tzinfo=dt.UTC))
    world.add_member("new-ready", created=dt.datetime(2026, 1, 1, 11, 30, tzinfo=dt.UTC))
    world.add_member("mid-ready", created=dt.datetime(2026, 1, 1, 11, 15, tzinfo=dt.UTC))
    world.add_member(
        "not-ready", ready=False, created=dt.datetime(2026, 1, 1, 11, 59, tzinfo=dt.UTC)
    )
    world.set_pool(replicas=1)
    await world.reconcile()
    assert world.deletes() == ["not-ready", "new-ready", "mid-ready"]
    # deletions in flight count as terminating: no second round of deletes
    await world.reconcile()
    assert len(world.deletes()) == 3


async def test_a_failed_delete_is_rolled_back() -> None:
    world = World(replicas=0)
    member = world.add_member("a")
    world.api.fail("delete", "sandboxes", ApiError(500, "InternalError", "boom"))
    with pytest.raises(WarmPoolReconcileError):
        await world.reconcile()
    assert not world.reconciler.expectations.is_pending_deletion(
        world.key, member["metadata"]["uid"]
    )
    await world.reconcile()
    assert world.deletes() == ["a", "a"]
    assert world.members() == []


async def test_a_member_deleted_by_hand_is_replaced() -> None:
    world = World(replicas=2)
    await world.reconcile()
    world.sync()
    victim = world.members()[0]["metadata"]["name"]
    await world.api.delete(SANDBOXES, NS, victim)
    world.sync()
    await world.reconcile()
    assert world.creates() == 3
    assert len(world.members()) == 2


# -- stuck and unschedulable members ---------------------------------------------------------


def _unschedulable_pod(name: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": NS},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


async def test_a_young_not_ready_member_is_kept_and_rechecked_after_the_grace() -> None:
    world = World(replicas=1, settings=WarmPoolSettings(readiness_grace=600))
    world.add_member("young", ready=False, created=world.clock.now() - dt.timedelta(seconds=100))
    result = await world.reconcile()
    assert world.deletes() == []
    assert result.requeue_after == pytest.approx(600 - 100 + 2)
    world.jitter = 1.0
    result = await world.reconcile()
    assert result.requeue_after == pytest.approx((600 - 100 + 2) * 1.5)


async def test_a_member_not_ready_past_the_grace_is_replaced() -> None:
    world = World(replicas=1, settings=WarmPoolSettings(readiness_grace=600))
    world.add_member("stuck", ready=False, created=world.clock.now() - dt.timedelta(seconds=601))
    await world.reconcile()
    assert world.deletes() == ["stuck"]
    assert world.creates() == 0  # the terminating member still counts
    world.sync()
    await world.reconcile()
    assert world.creates() == 1


async def test_unschedulable_members_are_held_with_one_event_per_transition() -> None:
    world = World(
        replicas=2, settings=WarmPoolSettings(readiness_grace=600, unschedulable_recheck=45)
    )
    old = world.clock.now() - dt.timedelta(seconds=700)
    world.add_member("ok")
    world.add_member("pending", ready=False, created=old)
    world.api.add(PODS, _unschedulable_pod("pending"))
    result = await world.reconcile()
    assert world.deletes() == []
    assert result.requeue_after == 45
    await world.reconcile()
    assert [(e.type_, e.reason, e.action, e.note) for e in world.recorder.events] == [
        (
            "Warning",
            "WarmPoolNotProgressing",
            "Reconciling",
            "1/2 sandboxes are unschedulable past the 10m0s readiness grace period; holding "
            "them instead of replacing (replacements would be equally unschedulable)",
        )
    ]
    world.api.mutate(
        SANDBOXES,
        "pending",
        lambda sb: sb.update(status={"conditions": [{"type": "Ready", "status": "True"}]}),
    )
    world.sandboxes.sync()
    await world.reconcile()
    await world.reconcile()
    assert [(e.type_, e.reason, e.note) for e in world.recorder.events[1:]] == [
        ("Normal", "WarmPoolProgressing", "Warm pool is progressing again")
    ]


async def test_a_terminating_unschedulable_pod_does_not_hold_its_member() -> None:
    world = World(replicas=1, settings=WarmPoolSettings(readiness_grace=60))
    world.add_member("m", ready=False, created=world.clock.now() - dt.timedelta(seconds=61))
    pod = _unschedulable_pod("m")
    pod["metadata"]["deletionTimestamp"] = stamp(world.clock.now())
    world.api.add(PODS, pod)
    await world.reconcile()
    assert world.deletes() == ["m"]


# -- refill shaping -----------------------------------------------------------------------------


async def test_refill_rate_paces_creates() -> None:
    world = World(replicas=10, settings=WarmPoolSettings(max_refill_rate=4))
    result = await world.reconcile()
    assert world.creates() == 4  # a new bucket is full: one second of creates
    assert result.requeue_after is None  # 0 < granted < deficit: the add events drive on
    world.sync()
    result = await world.reconcile()
    assert world.creates() == 4
    assert result.requeue_after == pytest.approx(0.25)
    world.clock.advance(0.5)
    await world.reconcile()
    assert world.creates() == 6


async def test_tokens_are_refunded_when_the_expectations_gate_refuses() -> None:
    world = World(replicas=4, settings=WarmPoolSettings(max_refill_rate=2))
    await world.reconcile()  # 2 created, cache never shows them
    assert world.creates() == 2
    world.clock.advance(1.0)  # the bucket is full again (2)
    result = await world.reconcile()
    assert result.requeue_after == EXPECTATIONS_REQUEUE
    state = world.reconciler._state[world.key]
    assert state.bucket is not None
    assert state.bucket.tokens == pytest.approx(2.0)


async def test_replenish_delay_holds_replacements_after_a_drop() -> None:
    world = World(replicas=2, settings=WarmPoolSettings(replenish_delay=10))
    await world.reconcile()  # initial fill is not delayed
    assert world.creates() == 2
    world.sync()
    await world.reconcile()
    await world.api.delete(SANDBOXES, NS, world.members()[0]["metadata"]["name"])
    world.sync()
    result = await world.reconcile()
    assert world.creates() == 2
    assert result.requeue_after == pytest.approx(10)
    assert world.status()["replicas"] == 1  # the status is still written during a hold
    world.clock.advance(4)
    result = await world.reconcile()
    assert result.requeue_after == pytest.approx(6)
    world.clock.advance(6)
    await world.reconcile()
    assert world.creates() == 3


# -- bad or unusual input ----------------------------------------------------------------------


async def test_a_pool_being_deleted_is_left_alone_and_forgotten() -> None:
    world = World(replicas=2)
    await world.reconcile()
    world.api.mutate(
        SANDBOX_WARM_POOLS,
        POOL,
        lambda p: p["metadata"].update(deletionTimestamp=stamp(world.clock.now())),
    )
    world.api.clear_calls()
    result = await world.reconcile()
    assert world.api.writes() == []
    assert result.requeue_after is None
    assert len(world.reconciler.expectations) == 0


async def test_a_member_with_a_malformed_creation_time_is_not_judged_stuck() -> None:
    world = World(replicas=1, settings=WarmPoolSettings(readiness_grace=1))
    world.add_member("odd", ready=False)
    world.api.mutate(
        SANDBOXES, "odd", lambda sb: sb["metadata"].update(creationTimestamp="yesterday")
    )
    world.sandboxes.sync()
    world.clock.advance(3600)
    await world.reconcile()
    assert world.deletes() == []
    assert world.status()["replicas"] == 1


async def test_a_status_write_failure_is_an_error_of_the_pass() -> None:
    world = World(replicas=0)
    world.api.fail("patch", "sandboxwarmpools/status", ApiError(500, "InternalError", "etcd"))
    with pytest.raises(ApiError, match="etcd"):
        await world.reconcile()
    await world.reconcile()
    assert world.status()["selector"]


async def test_a_generated_name_collision_is_retried() -> None:
    world = World(replicas=2)
    world.api.fail("create", "sandboxes", ApiError(409, "AlreadyExists", "taken"))
    await world.reconcile()
    assert world.create_calls() == 3
    assert world.creates() == 2
    assert len(world.members()) == 2


async def test_repeated_name_collisions_fail_the_create() -> None:
    world = World(replicas=1)
    taken = [ApiError(409, "AlreadyExists", "taken") for _ in range(3)]
    world.api.fail("create", "sandboxes", *taken)
    with pytest.raises(WarmPoolReconcileError, match="taken"):
        await world.reconcile()
    assert world.members() == []
    assert world.reconciler.expectations.satisfied(world.key)


async def test_an_unknown_update_strategy_reads_as_on_replenish(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(replicas=1, strategy="Sometimes")
    world.add_member("a")
    world.set_template(template_obj(image="busybox:2"))
    with caplog.at_level("INFO"):
        await world.reconcile()
    assert world.deletes() == []
    assert "unknown warm pool update strategy" in caplog.text


async def test_creates_refused_by_a_terminating_namespace_end_the_work() -> None:
    """Raised as the API's own error, which the runtime treats as done rather than retried."""
    world = World(replicas=2)
    terminating = ApiError(
        403,
        "Forbidden",
        "unable to create new content in namespace ns because it is being terminated",
        {"details": {"causes": [{"reason": "NamespaceTerminating"}]}},
    )
    world.api.fail("create", "sandboxes", terminating)
    with pytest.raises(ApiError) as caught:
        await world.reconcile()
    assert caught.value.namespace_terminating
    assert not isinstance(caught.value, WarmPoolReconcileError)


# -- status coalescing -----------------------------------------------------------------------------


class LaggingPools:
    """A pool cache that keeps showing the pool as it was when :meth:`freeze` was called."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.frozen: Obj | None = None

    def freeze(self) -> None:
        self.frozen = copy.deepcopy(self.world.api.obj(SANDBOX_WARM_POOLS, POOL))

    def get(self, namespace: str, name: str) -> Obj | None:
        if self.frozen is not None:
            return copy.deepcopy(self.frozen)
        return self.world.api.obj(SANDBOX_WARM_POOLS, name, namespace)


def adopt_by_claim(sb: Obj) -> None:
    sb["metadata"]["labels"].pop(c.LABEL_WARM_POOL_SANDBOX)
    sb["metadata"]["ownerReferences"] = [
        {
            "apiVersion": c.EXTENSIONS_API_VERSION,
            "kind": c.KIND_SANDBOX_CLAIM,
            "name": "claim",
            "uid": "uid-claim",
            "controller": True,
        }
    ]


def status_writes(world: World) -> list[Obj]:
    return [call.body for call in world.api.writes(SANDBOX_WARM_POOLS)]


async def test_member_count_changes_are_coalesced_into_one_write_per_interval() -> None:
    world = World(replicas=3, settings=WarmPoolSettings(status_interval=1.0))
    for name in ("a", "b", "c"):
        world.add_member(name)
    await world.reconcile()
    assert world.status()["readyReplicas"] == 3
    world.api.clear_calls()
    # two members taken by claims within the interval: no write yet, a requeue at its end
    for name in ("a", "b"):
        world.api.mutate(SANDBOXES, name, adopt_by_claim)
        world.sandboxes.sync()
        world.clock.advance(0.2)
        result = await world.reconcile()
        assert status_writes(world) == []
        assert result.requeue_after is not None
        assert 0 < result.requeue_after <= 0.8 + 1e-9
    world.clock.advance(0.6)  # the interval is over: one write with the latest counts
    await world.reconcile()
    # c (Ready) and the replacement for a, created by the first pass and now cached
    assert status_writes(world) == [{"status": {"replicas": 2, "readyReplicas": 1}}]


async def test_a_new_generation_is_written_at_once_despite_the_interval() -> None:
    world = World(replicas=1, settings=WarmPoolSettings(status_interval=60.0))
    world.add_member("a")
    await world.reconcile()
    world.set_pool(replicas=1, updateStrategy={"type": "Recreate"})
    world.clock.advance(0.1)
    await world.reconcile()
    assert world.status()["observedGeneration"] == 2


async def test_a_status_the_cache_does_not_show_yet_is_not_written_twice() -> None:
    world = World(replicas=1)
    pools = LaggingPools(world)
    world.reconciler.pools = pools
    world.add_member("a")
    pools.freeze()  # the cache will not show the coming status write
    await world.reconcile()
    assert len(status_writes(world)) == 1
    world.api.clear_calls()
    world.sync()
    for _ in range(3):
        await world.reconcile()
    assert status_writes(world) == []
    # once the cache moves on (another writer changed the pool), it is trusted again
    world.api.mutate(SANDBOX_WARM_POOLS, POOL, lambda p: p.update(status={}))
    pools.freeze()
    await world.reconcile()
    assert len(status_writes(world)) == 1
