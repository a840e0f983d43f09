"""The warm pool pass against an in-memory API (upstream's reconcilePool): creating members
under expectations, their spec, the pool status and its coalescing, template changes and
staleness."""

from __future__ import annotations

import asyncio
import copy
import logging
import re

import pytest
from warmpool_harness import POOL, TEMPLATE, World, pool_hash, template_obj

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_WARM_POOLS, SANDBOXES
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


async def test_a_create_pass_logs_at_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    """The debug line of a create names no LogRecord attribute (``created`` raised KeyError
    and failed every create pass of a controller run with ``--zap-log-level=debug``)."""
    caplog.set_level(logging.DEBUG, logger="kube_agent_sandbox.extensions.warmpool")
    world = World(replicas=2)
    await world.reconcile()
    assert world.creates() == 2
    (record,) = [r for r in caplog.records if r.getMessage() == "created warm pool sandboxes"]
    assert record.__dict__["count"] == 2


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
    # named like generateName would, and saying so in the pod-name annotation from the start
    assert "generateName" not in m
    assert re.fullmatch(rf"{POOL}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", m["name"])
    assert m["labels"][c.LABEL_WARM_POOL_SANDBOX] == pool_hash()
    assert m["labels"][c.LABEL_LAUNCH_TYPE] == "warm"
    assert m["labels"][c.LABEL_CREATED_BY] == "controller"
    assert m["annotations"] == {
        c.ANNOTATION_SANDBOX_TEMPLATE_REF: TEMPLATE,
        c.ANNOTATION_POD_NAME: m["name"],
    }
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
