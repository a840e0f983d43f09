"""The warm pool's building blocks: refill shaping, batches, blueprint, status, events, wiring."""

from __future__ import annotations

import asyncio
import copy
import random
import re
from typing import Any

import pytest
from warmpool_harness import NS, POOL, TEMPLATE, template_obj

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOX_WARM_POOLS, SANDBOXES
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import (
    Controller,
    ControllerHandle,
    FakeApi,
    Obj,
    Request,
    Result,
)
from kube_agent_sandbox.extensions.common.blueprint import (
    blueprint_hash,
    blueprint_matches,
    pod_template_hash,
)
from kube_agent_sandbox.extensions.common.ownership import controller_ref_to
from kube_agent_sandbox.extensions.warmpool import setup as wp_setup
from kube_agent_sandbox.extensions.warmpool.batches import slow_start
from kube_agent_sandbox.extensions.warmpool.blueprint import build_member, hashes_of, named_member
from kube_agent_sandbox.extensions.warmpool.indexes import (
    TEMPLATE_REF_INDEX,
    member_index,
    template_ref_index,
)
from kube_agent_sandbox.extensions.warmpool.progress import not_progressing_message
from kube_agent_sandbox.extensions.warmpool.reconciler import WarmPoolSettings
from kube_agent_sandbox.extensions.warmpool.refill import ReplenishHold, TokenBucket
from kube_agent_sandbox.extensions.warmpool.status import desired_status, status_patch


class _Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


# -- token bucket (takeRefillTokens) ---------------------------------------------------------------


@pytest.mark.parametrize(("rate", "wait"), [(4.0, 0.25), (0.5, 2.0), (1.0, 1.0), (3.0, 1 / 3)])
def test_token_bucket_wait_for_the_next_token(rate: float, wait: float) -> None:
    bucket = TokenBucket(rate, clock=_Clock())
    granted, first_wait = bucket.take(1000)
    assert granted == int(max(1, rate))  # a new bucket is full: one second of creates
    assert first_wait == pytest.approx(wait, abs=1e-9)
    granted, again = bucket.take(1)
    assert granted == 0
    assert again == pytest.approx(wait, abs=1e-9)


def test_token_bucket_wait_is_rounded_up_to_nanoseconds() -> None:
    bucket = TokenBucket(3.0, clock=_Clock())
    bucket.take(3)
    _, wait = bucket.take(1)
    assert wait * 1e9 == pytest.approx(333_333_334)


def test_token_bucket_refills_at_the_rate_capped_at_capacity() -> None:
    clock = _Clock()
    bucket = TokenBucket(4.0, clock=clock)
    assert bucket.take(4) == (4, 0.0)
    clock.t += 0.5
    assert bucket.take(10)[0] == 2
    clock.t += 100
    assert bucket.take(10)[0] == 4


def test_token_bucket_slow_rate_has_capacity_one() -> None:
    clock = _Clock()
    bucket = TokenBucket(0.5, clock=clock)
    assert bucket.take(5)[0] == 1
    clock.t += 1.0
    granted, wait = bucket.take(5)
    assert granted == 0
    assert wait == pytest.approx(1.0)
    clock.t += 1.0
    assert bucket.take(5)[0] == 1


def test_token_bucket_refund_is_capped() -> None:
    bucket = TokenBucket(2.0, clock=_Clock())
    bucket.take(2)
    bucket.refund(5)
    assert bucket.tokens == 2.0


@pytest.mark.parametrize("rate", [0.0, -1.0, float("inf"), float("nan")])
def test_token_bucket_refuses_a_bad_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="rate must be"):
        TokenBucket(rate)


# -- replenish hold (observeMembersForReplenish) ---------------------------------------------------


def test_replenish_hold_numbers() -> None:
    clock = _Clock()
    hold = ReplenishHold(30.0, clock=clock)
    assert hold.observe(0, 5) == 0.0  # first observation (initial fill) never holds
    hold.created(5)
    assert hold.observe(5, 5) == 0.0
    assert hold.observe(3, 5) == 30.0  # a drop starts the hold
    clock.t += 10
    assert hold.observe(3, 5) == 20.0  # no new drop: the hold runs down
    assert hold.observe(2, 5) == 30.0  # every drop restarts it
    clock.t += 31
    assert hold.observe(2, 5) == 0.0
    assert hold.observe(1, 5) == 30.0
    assert hold.observe(5, 5) == 0.0  # back at target: cleared
    assert hold.observe(5, 5) == 0.0


def test_replenish_hold_counts_lagging_creates_as_a_drop() -> None:
    hold = ReplenishHold(5.0, clock=_Clock())
    hold.observe(0, 3)
    hold.created(3)
    assert hold.observe(1, 3) == 5.0  # the cache shows only one of the three yet


def test_replenish_hold_off() -> None:
    hold = ReplenishHold(0.0, clock=_Clock())
    hold.observe(5, 5)
    assert hold.observe(0, 5) == 0.0


# -- slow start -----------------------------------------------------------------------------------


async def test_slow_start_doubles_and_stops_at_the_first_failed_batch() -> None:
    finished: list[int] = []
    batch_of: dict[int, int] = {}  # item -> items finished before it started

    async def op(item: int) -> None:
        batch_of[item] = len(finished)
        await asyncio.sleep(0)
        finished.append(item)
        if item == 9:
            raise RuntimeError("nine")

    done, errors = await slow_start(list(range(20)), op)
    sizes: dict[int, int] = {}
    for before in batch_of.values():
        sizes[before] = sizes.get(before, 0) + 1
    assert list(sizes.values()) == [1, 2, 4, 8]  # item 9 is in the 4th batch: no 5th
    assert done == 14
    assert [str(e) for e in errors] == ["nine"]


async def test_slow_start_of_nothing() -> None:
    async def op(item: int) -> None:
        raise AssertionError("not called")

    assert await slow_start([], op) == (0, [])


# -- blueprint (buildSandboxCR) --------------------------------------------------------------------


def _pool() -> Obj:
    return {
        "metadata": {"name": POOL, "namespace": NS, "uid": "u-1"},
        "spec": {"sandboxTemplateRef": {"name": TEMPLATE}},
    }


def test_member_blueprint_is_exactly_the_spec() -> None:
    template = template_obj(service=True)
    before = copy.deepcopy(template)
    member = build_member(_pool(), template, hashes=hashes_of(template), enable_eviction=True)
    assert template == before
    pt_hash, bp_hash = pod_template_hash(template), blueprint_hash(template)
    assert member["metadata"] == {
        "generateName": f"{POOL}-",
        "namespace": NS,
        "labels": {
            c.LABEL_WARM_POOL_SANDBOX: name_hash(POOL),
            c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(TEMPLATE),
            c.LABEL_LAUNCH_TYPE: "warm",
            c.LABEL_SANDBOX_POD_TEMPLATE_HASH: pt_hash,
            c.LABEL_SANDBOX_TEMPLATE_HASH: bp_hash,
            c.LABEL_CREATED_BY: "controller",
        },
        "annotations": {c.ANNOTATION_SANDBOX_TEMPLATE_REF: TEMPLATE},
        "ownerReferences": [controller_ref_to(_pool(), kind="SandboxWarmPool")],
    }
    assert member["spec"] == {
        "podTemplate": {
            "metadata": {
                "labels": {
                    "app": "x",
                    c.LABEL_WARM_POOL_SANDBOX: name_hash(POOL),
                    c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(TEMPLATE),
                    c.LABEL_SANDBOX_POD_TEMPLATE_HASH: pt_hash,
                    c.LABEL_SANDBOX_TEMPLATE_HASH: bp_hash,
                },
                "annotations": {c.ANNOTATION_SAFE_TO_EVICT: "true"},
            },
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "automountServiceAccountToken": False,
                "dnsPolicy": "None",
                "dnsConfig": {"nameservers": ["8.8.8.8", "1.1.1.1"]},
            },
        },
        "service": True,
    }


def test_a_named_member_looks_generated_and_names_its_pod() -> None:
    template = template_obj()
    member = build_member(_pool(), template, hashes=hashes_of(template), enable_eviction=False)
    named = named_member(member, rng=random.Random(7))
    m = named["metadata"]
    assert re.fullmatch(rf"{POOL}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", m["name"])
    assert "generateName" not in m
    assert m["annotations"] == {
        c.ANNOTATION_SANDBOX_TEMPLATE_REF: TEMPLATE,
        c.ANNOTATION_POD_NAME: m["name"],
    }
    assert {k: v for k, v in m.items() if k not in ("name", "annotations")} == {
        k: v for k, v in member["metadata"].items() if k not in ("generateName", "annotations")
    }
    assert named["spec"] == member["spec"]
    assert member["metadata"]["generateName"] == f"{POOL}-"  # the blueprint is not changed
    assert c.ANNOTATION_POD_NAME not in member["metadata"]["annotations"]


def test_named_members_draw_new_names_and_fit_a_name_when_the_pool_name_is_long() -> None:
    long_pool = {**_pool(), "metadata": {**_pool()["metadata"], "name": "p" * 63}}
    template = template_obj()
    member = build_member(long_pool, template, hashes=hashes_of(template), enable_eviction=False)
    rng = random.Random(1)
    names = {named_member(member, rng=rng)["metadata"]["name"] for _ in range(50)}
    assert len(names) == 50
    assert {len(n) for n in names} == {63}  # the API server's generateName cuts the prefix to 58
    assert all(n.startswith("p" * 58) for n in names)
    assert member["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert blueprint_matches(template, member["spec"])


def test_eviction_annotation_respects_the_flag_and_the_template() -> None:
    template = template_obj()
    off = build_member(_pool(), template, hashes=hashes_of(template), enable_eviction=False)
    assert "annotations" not in off["spec"]["podTemplate"]["metadata"]
    template["spec"]["podTemplate"]["metadata"]["annotations"] = {
        c.ANNOTATION_SAFE_TO_EVICT: "false"
    }
    kept = build_member(_pool(), template, hashes=hashes_of(template), enable_eviction=True)
    assert kept["spec"]["podTemplate"]["metadata"]["annotations"] == {
        c.ANNOTATION_SAFE_TO_EVICT: "false"
    }


def test_custom_network_policy_leaves_dns_alone() -> None:
    template = template_obj(networkPolicy={"egress": []})
    member = build_member(_pool(), template, hashes=hashes_of(template), enable_eviction=True)
    assert "dnsPolicy" not in member["spec"]["podTemplate"]["spec"]


def test_a_template_without_pod_metadata_gets_the_labels() -> None:
    template = {"metadata": {"name": TEMPLATE}, "spec": {"podTemplate": {"spec": {}}}}
    member = build_member(_pool(), template, hashes=hashes_of(template), enable_eviction=False)
    assert member["spec"]["podTemplate"]["metadata"]["labels"][c.LABEL_WARM_POOL_SANDBOX] == (
        name_hash(POOL)
    )


# -- status ---------------------------------------------------------------------------------------


def test_status_patch_clears_zero_values_and_keeps_foreign_fields() -> None:
    want = desired_status(replicas=0, ready_replicas=0, selector="s", observed_generation=3)
    assert want == {"selector": "s", "observedGeneration": 3}
    current = {"replicas": 3, "readyReplicas": 2, "selector": "s", "other": 1}
    assert status_patch(current, want) == {
        "replicas": None,
        "readyReplicas": None,
        "observedGeneration": 3,
    }
    assert status_patch({**want, "other": 1}, want) == {}
    assert status_patch(None, {}) == {}


def test_not_progressing_message_prints_go_durations() -> None:
    assert not_progressing_message(2, 5, grace=90) == (
        "2/5 sandboxes are unschedulable past the 1m30s readiness grace period; holding them "
        "instead of replacing (replacements would be equally unschedulable)"
    )
    assert "past the 5m0s readiness" in not_progressing_message(1, 1, grace=300)
    assert "past the 1h0m0s readiness" in not_progressing_message(1, 1, grace=3600)


# -- settings and wiring ---------------------------------------------------------------------


def test_settings_from_flags_and_fallbacks() -> None:
    options = ControllerOptions(
        sandbox_warm_pool_max_batch_size=7,
        enable_warm_pool_eviction=False,
        sandbox_warm_pool_readiness_grace_period=90.0,
        sandbox_warm_pool_unschedulable_recheck_interval=15.0,
        sandbox_warm_pool_replenish_delay=3.0,
        sandbox_warm_pool_max_refill_rate=2.5,
    )
    settings = WarmPoolSettings.from_options(options)
    assert (settings.batch, settings.grace, settings.recheck) == (7, 90.0, 15.0)
    assert (settings.replenish_delay, settings.max_refill_rate) == (3.0, 2.5)
    assert settings.enable_eviction is False
    zero = WarmPoolSettings(max_batch_size=0, readiness_grace=0, unschedulable_recheck=-1)
    assert (zero.batch, zero.grace, zero.recheck) == (300, 300.0, 60.0)


def test_indexes() -> None:
    sandbox = {"metadata": {"namespace": NS, "labels": {c.LABEL_WARM_POOL_SANDBOX: "h"}}}
    assert list(member_index(sandbox)) == [f"{NS}/h"]
    assert list(member_index({"metadata": {"namespace": NS}})) == []
    assert list(template_ref_index(_pool())) == [f"{NS}/{TEMPLATE}"]
    assert list(template_ref_index({"metadata": {"namespace": NS}, "spec": {}})) == []


class _NoopReconciler:
    async def reconcile(self, request: Request) -> Result:
        return Result()


def test_sandbox_events_lower_expectations_before_queueing_the_pool() -> None:
    from warmpool_harness import World

    world = World(replicas=3)
    controller = Controller(
        "test-warmpool", for_resource=SANDBOX_WARM_POOLS, reconciler=_NoopReconciler()
    )
    reconciler = world.reconciler
    seen: list[tuple[int, frozenset[str]]] = []
    real_add = controller.queue.add

    def add(req: Request) -> None:
        seen.append(reconciler.expectations.pending(req))
        real_add(req)

    controller.queue.add = add  # type: ignore[method-assign]
    handler = wp_setup.sandbox_handler(ControllerHandle(controller), reconciler, delay=0.0)
    reconciler.expectations.expect_creations(world.key, 2)
    reconciler.expectations.expect_deletion(world.key, "gone-uid")
    member: dict[str, Any] = {
        "metadata": {
            "name": "m",
            "namespace": NS,
            "uid": "gone-uid",
            "ownerReferences": [controller_ref_to(world.pool, kind="SandboxWarmPool")],
        }
    }
    assert handler.on_add is not None
    assert handler.on_delete is not None
    assert handler.on_update is not None
    handler.on_add(member)
    assert seen[-1] == (1, frozenset({"gone-uid"}))
    handler.on_delete(member)
    assert seen[-1] == (1, frozenset())
    claimed = copy.deepcopy(member)
    claimed["metadata"]["ownerReferences"] = [
        {
            "apiVersion": c.EXTENSIONS_API_VERSION,
            "kind": "SandboxClaim",
            "name": "cl",
            "uid": "x",
            "controller": True,
        }
    ]
    before = len(seen)
    handler.on_update(member, claimed)  # adoption by a claim: the old pool is queued
    assert len(seen) == before + 1
    assert len(controller.queue) == 1
    # a Sandbox of nobody queues nothing
    handler.on_add({"metadata": {"name": "x", "namespace": NS}})
    assert len(seen) == before + 1


async def test_a_burst_of_member_changes_queues_the_pool_once_after_the_delay() -> None:
    from warmpool_harness import World

    world = World(replicas=3)
    controller = Controller(
        "test-warmpool", for_resource=SANDBOX_WARM_POOLS, reconciler=_NoopReconciler()
    )
    handler = wp_setup.sandbox_handler(ControllerHandle(controller), world.reconciler, delay=0.2)
    assert handler.on_add is not None
    assert handler.on_update is not None
    world.reconciler.expectations.expect_creations(world.key, 5)
    members = [
        {
            "metadata": {
                "name": f"m{i}",
                "namespace": NS,
                "uid": f"u{i}",
                "ownerReferences": [controller_ref_to(world.pool, kind="SandboxWarmPool")],
            }
        }
        for i in range(5)
    ]
    for member in members:
        handler.on_add(member)
        handler.on_update(member, member)
    # expectations are lowered at once, the pass waits for the delay
    assert world.reconciler.expectations.pending(world.key) == (0, frozenset())
    assert len(controller.queue) == 0
    assert controller.queue.delayed() == frozenset({world.key})
    await asyncio.sleep(0.3)
    assert len(controller.queue) == 1
    assert controller.queue.delayed() == frozenset()


def test_templates_map_to_the_pools_using_them() -> None:
    api = FakeApi(default_namespace=NS)
    api.add(SANDBOX_WARM_POOLS, _pool())
    other = _pool()
    other["metadata"].update(name="other", uid="u-2")
    other["spec"]["sandboxTemplateRef"]["name"] = "another"
    api.add(SANDBOX_WARM_POOLS, other)
    pools = api.reader(SANDBOX_WARM_POOLS, indexes={TEMPLATE_REF_INDEX: template_ref_index})
    mapper = wp_setup.templates_mapper(pools)  # type: ignore[arg-type]
    assert list(mapper({"metadata": {"name": TEMPLATE, "namespace": NS}})) == [Request(NS, POOL)]
    assert list(mapper({"metadata": {"name": TEMPLATE, "namespace": "elsewhere"}})) == []


def test_rbac_rules_cover_what_the_controller_touches() -> None:
    granted = {
        (r.to_dict()["apiGroups"][0], res)
        for r in wp_setup.RBAC_RULES
        for res in r.to_dict()["resources"]
    }
    for needed in [
        (c.EXTENSIONS_GROUP, "sandboxwarmpools"),
        (c.EXTENSIONS_GROUP, "sandboxwarmpools/status"),
        (c.EXTENSIONS_GROUP, "sandboxtemplates"),
        (c.GROUP, SANDBOXES.plural),
        ("", "pods"),
        ("events.k8s.io", "events"),
    ]:
        assert needed in granted
