"""The warm pool pass against an in-memory API (upstream's reconcilePool): orphans and foreign
members, scale down, stuck and unschedulable members, refill shaping and unusual input."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from warmpool_harness import NS, POOL, World, stamp, template_obj

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_WARM_POOLS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import ApiError, Obj
from kube_agent_sandbox.extensions.warmpool import blueprint
from kube_agent_sandbox.extensions.warmpool.reconciler import (
    EXPECTATIONS_REQUEUE,
    WarmPoolReconcileError,
    WarmPoolSettings,
)

CREATED_BY = c.LABEL_CREATED_BY  # a user's orphan has no created-by: controller

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


async def test_an_orphan_whose_adoption_conflicts_is_not_replaced() -> None:
    """The cache's copy of a new orphan is often one version behind (its own controller is
    writing to it), so the adoption meets a conflict. The orphan still holds its place: the
    pass creates nothing, and the retry adopts it."""
    world = World(replicas=1)
    world.add_member("orphan", owned=False)
    world.api.fail("patch", "sandboxes", ApiError(409, "Conflict", "modified"))
    with pytest.raises(WarmPoolReconcileError, match="set controller reference"):
        await world.reconcile()
    assert world.creates() == 0
    await world.reconcile()
    adopted = world.api.obj(SANDBOXES, "orphan")
    assert adopted is not None
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == world.pool["metadata"]["uid"]
    assert world.creates() == 0
    assert world.deletes() == []


async def test_an_orphan_whose_adoption_is_refused_is_replaced() -> None:
    """Any other failure keeps upstream's behavior: the orphan is not counted."""
    world = World(replicas=1)
    world.add_member("orphan", owned=False)
    world.api.fail("patch", "sandboxes", ApiError(403, "Forbidden", "no"))
    with pytest.raises(WarmPoolReconcileError, match="set controller reference"):
        await world.reconcile()
    assert world.creates() == 1


async def test_an_orphan_seen_late_is_kept_and_the_pool_made_member_trimmed() -> None:
    """The pool's first pass runs before its cache shows the orphan and creates a member; a
    later pass adopts the orphan, the one after trims the excess. Both were made within the
    same second and neither is Ready yet: the adopted orphan stays, whatever order the cache
    lists them in (here the orphan's name sorts first)."""
    world = World(replicas=1)
    world.add_member("orphan", owned=False, ready=False)
    world.api.mutate(SANDBOXES, "orphan", lambda sb: sb["metadata"]["labels"].pop(CREATED_BY))
    world.sync(hide={"orphan"})
    await world.reconcile()  # no orphan in sight: creates a member
    (made,) = (n for n in (o["metadata"]["name"] for o in world.members()) if n != "orphan")
    world.sync(hide={made})  # the orphan's event arrives before the new member's
    await world.reconcile()  # adopts the orphan; the creation is not observed yet
    adopted = world.api.obj(SANDBOXES, "orphan")
    assert adopted is not None
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == world.pool["metadata"]["uid"]
    world.sync()
    await world.reconcile()  # two members, one wanted
    assert world.deletes() == [made]
    assert world.api.obj(SANDBOXES, "orphan") is not None


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


async def test_scale_down_ties_of_creation_time_go_against_members_the_pool_made() -> None:
    """Same readiness, same second: pool-made members go before adopted ones, then by name
    (never the cache's listing order)."""
    world = World(replicas=4)
    same = dt.datetime(2026, 1, 1, 11, 0, tzinfo=dt.UTC)
    world.add_member("adopted-a", created=same, labels={c.LABEL_CREATED_BY: "python-client"})
    world.add_member("made-b", created=same)
    world.add_member("made-a", created=same)
    world.add_member("adopted-b", created=same, labels={c.LABEL_CREATED_BY: "python-client"})
    world.add_member("older", created=dt.datetime(2026, 1, 1, 10, 0, tzinfo=dt.UTC))
    world.set_pool(replicas=1)
    await world.reconcile()
    assert world.deletes() == ["made-a", "made-b", "adopted-a", "adopted-b"]


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


async def test_a_drawn_name_taken_by_another_sandbox_is_drawn_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool names members itself; a name already in use leaves that Sandbox alone."""
    first = random.Random(3).choices(blueprint._SUFFIX_ALPHABET, k=5)
    taken = f"{POOL}-{''.join(first)}"
    monkeypatch.setattr(blueprint, "_names", random.Random(3))
    world = World(replicas=1)
    before = world.api.add(SANDBOXES, {"metadata": {"name": taken, "namespace": NS}, "spec": {}})
    await world.reconcile()
    assert world.create_calls() == 2
    (member,) = [m for m in world.members() if m["metadata"]["name"] != taken]
    assert member["metadata"]["annotations"][c.ANNOTATION_POD_NAME] == member["metadata"]["name"]
    assert world.api.obj(SANDBOXES, taken) == before


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
