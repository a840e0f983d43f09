"""The warm queue: FIFO, dedup, NodeSpread picks, the feeder rules."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.extensions.claim.warmqueue import (
    WarmKey,
    WarmQueue,
    adoptable_pool,
    feed_delete,
    feed_upsert,
    is_adoptable,
    sandbox_feeder,
    warm_pool_dropper,
    warm_pool_name,
)

NS = "ns"
POOL = "pool"


def _drain(queue: WarmQueue, ns: str = NS, pool: str = POOL) -> list[str]:
    out = []
    while (key := queue.pop(ns, pool)) is not None:
        out.append(key.name)
    return out


# --- FIFO, dedup, remove, drop ---------------------------------------------------------------


def test_empty_and_unknown_queues_pop_none() -> None:
    queue = WarmQueue()
    assert queue.pop(NS, POOL) is None
    assert queue.size(NS, POOL) == 0
    assert queue.keys(NS, POOL) == []


def test_unscheduled_keys_come_out_fifo() -> None:
    queue = WarmQueue()
    for name in ("a", "b", "c"):
        queue.push(NS, POOL, name)
    assert queue.size(NS, POOL) == 3
    assert _drain(queue) == ["a", "b", "c"]
    assert queue.size(NS, POOL) == 0
    assert queue.pools() == []


def test_push_of_existing_key_keeps_position_and_updates_node() -> None:
    queue = WarmQueue()
    queue.push(NS, POOL, "a")
    queue.push(NS, POOL, "b")
    queue.push(NS, POOL, "a", "node-1")
    assert queue.size(NS, POOL) == 2
    assert queue.keys(NS, POOL) == [WarmKey(NS, "a", "node-1"), WarmKey(NS, "b", "")]
    queue.push(NS, POOL, "a", "")
    assert queue.keys(NS, POOL) == [WarmKey(NS, "a", ""), WarmKey(NS, "b", "")]
    assert _drain(queue) == ["a", "b"]


def test_queues_are_per_namespace_and_pool() -> None:
    queue = WarmQueue()
    queue.push("ns1", "p", "x")
    queue.push("ns2", "p", "x")
    queue.push("ns1", "q", "y")
    assert queue.pop("ns1", "p") == WarmKey("ns1", "x", "")
    assert queue.pop("ns1", "p") is None
    assert queue.pop("ns2", "p") == WarmKey("ns2", "x", "")
    assert queue.pop("ns1", "q") == WarmKey("ns1", "y", "")


def test_remove_and_drop_pool() -> None:
    queue = WarmQueue()
    for name in ("a", "b", "c"):
        queue.push(NS, POOL, name, "n1" if name == "b" else "")
    queue.remove(NS, POOL, "b")
    queue.remove(NS, POOL, "missing")
    queue.remove("other", POOL, "a")
    assert not queue.contains(NS, POOL, "b")
    assert _drain(queue) == ["a", "c"]
    queue.push(NS, POOL, "d")
    queue.push(NS, "other-pool", "e")
    queue.drop_pool(NS, POOL)
    queue.drop_pool(NS, "never-existed")
    assert queue.pop(NS, POOL) is None
    assert queue.pop(NS, "other-pool") == WarmKey(NS, "e", "")


def test_push_back_goes_to_the_tail_with_the_new_node() -> None:
    queue = WarmQueue()
    for name in ("a", "b", "c"):
        queue.push(NS, POOL, name)
    key = queue.pop(NS, POOL)
    assert key == WarmKey(NS, "a", "")
    queue.push_back(NS, POOL, WarmKey(NS, "a", ""))
    assert [k.name for k in queue.keys(NS, POOL)] == ["b", "c", "a"]
    # Re-queued meanwhile by the feeder: keeps its place, node updated.
    queue.push_back(NS, POOL, WarmKey(NS, "b", "n9"))
    assert queue.keys(NS, POOL)[0] == WarmKey(NS, "b", "n9")


# --- NodeSpread --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        pytest.param([("a", "")], "a", id="single-unscheduled"),
        pytest.param([("a", "n1")], "a", id="single-scheduled"),
        pytest.param([("a", ""), ("b", ""), ("c", "")], "a", id="none-scheduled-fifo"),
        pytest.param([("a", ""), ("b", "n1")], "b", id="scheduled-beats-older-unscheduled"),
        pytest.param(
            [("a", "n1"), ("b", "n2"), ("c", "n2"), ("d", "n1"), ("e", "n2")],
            "b",
            id="node-with-most-keys",
        ),
        pytest.param(
            [("a", "n1"), ("b", "n2"), ("c", "n2"), ("d", "n1")], "a", id="tie-earliest-key"
        ),
        pytest.param(
            [("a", ""), ("b", "n2"), ("c", "n1"), ("d", "n1"), ("e", "n2")],
            "b",
            id="tie-earliest-key-ignoring-unscheduled",
        ),
        pytest.param(
            [("a", "n1"), ("b", ""), ("c", ""), ("d", ""), ("e", "n2"), ("f", "n2")],
            "e",
            id="unscheduled-counts-are-ignored",
        ),
    ],
)
def test_node_spread_pick(keys: list[tuple[str, str]], expected: str) -> None:
    queue = WarmQueue()
    for name, node in keys:
        queue.push(NS, POOL, name, node)
    picked = queue.pop(NS, POOL)
    assert picked is not None
    assert picked.name == expected
    assert picked.node_name == dict(keys)[expected]
    assert queue.size(NS, POOL) == len(keys) - 1


def test_node_spread_round_robins_across_nodes() -> None:
    queue = WarmQueue()
    for i in range(3):
        for node in ("n1", "n2", "n3"):
            queue.push(NS, POOL, f"{node}-{i}", node)
    nodes = [k.node_name for k in iter(lambda: queue.pop(NS, POOL), None)]
    assert nodes == ["n1", "n2", "n3"] * 3


def test_node_change_moves_key_but_keeps_its_position() -> None:
    queue = WarmQueue()
    queue.push(NS, POOL, "a")
    queue.push(NS, POOL, "b", "n1")
    queue.push(NS, POOL, "c", "n1")
    # "a" gets scheduled on n1 later: it is the oldest key on n1 now.
    queue.push(NS, POOL, "a", "n1")
    assert _drain(queue) == ["a", "b", "c"]


def test_many_moves_and_removals_keep_node_heaps_small() -> None:
    queue = WarmQueue()
    queue.push(NS, POOL, "anchor", "n1")
    for i in range(1000):
        queue.push(NS, POOL, f"k{i}", "n1")
        queue.push(NS, POOL, f"k{i}", "n2")
        queue.push(NS, POOL, f"k{i}", "n1")
        queue.remove(NS, POOL, f"k{i}")
    buckets = queue._queues[(NS, POOL)].buckets
    assert len(buckets["n1"].heap) <= 2 * buckets["n1"].live + 17
    assert "n2" not in buckets
    assert _drain(queue) == ["anchor"]


# --- property: agreement with a literal model of upstream's queue -------------------------------


class _Model:
    """Upstream's SimpleSandboxQueue with the NodeSpread picker, written out naively."""

    def __init__(self) -> None:
        self.items: list[list[str]] = []

    def push(self, name: str, node: str) -> None:
        for item in self.items:
            if item[0] == name:
                item[1] = node
                return
        self.items.append([name, node])

    def remove(self, name: str) -> None:
        self.items = [item for item in self.items if item[0] != name]

    def pop(self) -> tuple[str, str] | None:
        if not self.items:
            return None
        scheduled = [item for item in self.items if item[1]]
        if scheduled:
            counts: dict[str, int] = {}
            for _, node in scheduled:
                counts[node] = counts.get(node, 0) + 1
            top = max(counts.values())
            chosen = next(item for item in scheduled if counts[item[1]] == top)
        else:
            chosen = self.items[0]
        self.items.remove(chosen)
        return chosen[0], chosen[1]


_names = st.sampled_from([f"s{i}" for i in range(12)])
_nodes = st.sampled_from(["", "", "n1", "n2", "n3", "n4"])
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), _names, _nodes),
        st.tuples(st.just("remove"), _names, st.just("")),
        st.tuples(st.just("pop"), st.just(""), st.just("")),
        st.tuples(st.just("push_back"), st.just(""), _nodes),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(ops=_ops)
def test_queue_matches_upstream_model_and_never_duplicates_or_loses(
    ops: list[tuple[str, str, str]],
) -> None:
    queue = WarmQueue()
    model = _Model()
    outstanding: list[WarmKey] = []  # popped, not yet pushed back
    popped_names: set[str] = set()
    for op, name, node in ops:
        if op == "push":
            queue.push(NS, POOL, name, node)
            model.push(name, node)
        elif op == "remove":
            queue.remove(NS, POOL, name)
            model.remove(name)
        elif op == "pop":
            key = queue.pop(NS, POOL)
            expected = model.pop()
            assert (None if key is None else (key.name, key.node_name)) == expected
            if key is not None:
                assert not queue.contains(NS, POOL, key.name)
                outstanding.append(key)
                popped_names.add(key.name)
        elif outstanding:
            key = outstanding.pop(0)
            queue.push_back(NS, POOL, WarmKey(NS, key.name, node))
            model.push(key.name, node)
        assert queue.size(NS, POOL) == len(model.items)
        assert [(k.name, k.node_name) for k in queue.keys(NS, POOL)] == [
            (item[0], item[1]) for item in model.items
        ]
    # Draining yields each remaining key exactly once, in the model's order.
    drained = []
    while (key := queue.pop(NS, POOL)) is not None:
        drained.append((key.name, key.node_name))
    expected_drain = []
    while (item := model.pop()) is not None:
        expected_drain.append(item)
    assert drained == expected_drain
    assert len({name for name, _ in drained}) == len(drained)


def test_long_random_run_matches_the_model_and_bounds_the_node_ranking() -> None:
    rng = random.Random(7)
    queue = WarmQueue()
    model = _Model()
    nodes = ["", *(f"n{i}" for i in range(30))]
    for _ in range(20000):
        roll = rng.random()
        name = f"s{rng.randrange(300)}"
        if roll < 0.55:
            node = rng.choice(nodes)
            queue.push(NS, POOL, name, node)
            model.push(name, node)
        elif roll < 0.7:
            queue.remove(NS, POOL, name)
            model.remove(name)
        else:
            key = queue.pop(NS, POOL)
            assert (None if key is None else (key.name, key.node_name)) == model.pop()
        pool_queue = queue._queues.get((NS, POOL))
        if pool_queue is not None:
            assert pool_queue.level_entries <= 4 * len(pool_queue.buckets) + 17
            assert sum(len(h) for h in pool_queue.levels.values()) == pool_queue.level_entries
    assert _drain(queue) == [name for name, _ in iter(model.pop, None)]


# --- adoptability and the feeder ----------------------------------------------------------------


def _pool_ref(name: str = POOL, *, version: str = "v1beta1", controller: bool = True) -> Obj:
    return {
        "apiVersion": f"{c.EXTENSIONS_GROUP}/{version}",
        "kind": c.KIND_SANDBOX_WARM_POOL,
        "name": name,
        "uid": f"uid-{name}",
        "controller": controller,
    }


def _sandbox(
    name: str = "sb",
    *,
    node: str = "",
    refs: list[Obj] | None = None,
    labels: dict[str, str] | None = None,
    deleting: bool = False,
) -> Obj:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "labels": labels
        if labels is not None
        else {c.LABEL_WARM_POOL_SANDBOX: "h1", c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "h2"},
        "ownerReferences": refs if refs is not None else [_pool_ref()],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj: Obj = {"metadata": meta, "status": {}}
    if node:
        obj["status"]["nodeName"] = node
    return obj


@pytest.mark.parametrize(
    ("sandbox", "pool"),
    [
        pytest.param(_sandbox(), POOL, id="adoptable"),
        pytest.param(_sandbox(refs=[_pool_ref(version="v1alpha1")]), POOL, id="v1alpha1-ref"),
        pytest.param(_sandbox(deleting=True), None, id="deleting"),
        pytest.param(
            _sandbox(labels={c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "h"}), None, id="no-pool-label"
        ),
        pytest.param(
            _sandbox(labels={c.LABEL_WARM_POOL_SANDBOX: "h"}), None, id="no-template-label"
        ),
        pytest.param(_sandbox(refs=[]), None, id="unowned"),
        pytest.param(_sandbox(refs=[_pool_ref(controller=False)]), None, id="not-controller"),
        pytest.param(
            _sandbox(
                refs=[
                    {
                        "apiVersion": f"{c.EXTENSIONS_GROUP}/v1beta1",
                        "kind": c.KIND_SANDBOX_CLAIM,
                        "name": "claim",
                        "controller": True,
                    }
                ]
            ),
            None,
            id="claim-owned",
        ),
        pytest.param(
            _sandbox(
                refs=[
                    {
                        "apiVersion": "other.io/v1",
                        "kind": c.KIND_SANDBOX_WARM_POOL,
                        "name": POOL,
                        "controller": True,
                    }
                ]
            ),
            None,
            id="foreign-group",
        ),
    ],
)
def test_adoptable_pool(sandbox: Obj, pool: str | None) -> None:
    assert adoptable_pool(sandbox) == pool
    assert is_adoptable(sandbox) is (pool is not None)


def test_warm_pool_name_falls_back_to_any_pool_owner_ref() -> None:
    assert warm_pool_name(_sandbox(refs=[_pool_ref("p2", controller=False)])) == "p2"
    claim_ref = {
        "apiVersion": f"{c.EXTENSIONS_GROUP}/v1beta1",
        "kind": c.KIND_SANDBOX_CLAIM,
        "name": "claim",
        "controller": True,
    }
    assert warm_pool_name(_sandbox(refs=[claim_ref])) == ""
    assert warm_pool_name(_sandbox(refs=[claim_ref, _pool_ref("p3", controller=False)])) == "p3"
    assert warm_pool_name({"metadata": {}}) == ""


@pytest.mark.parametrize(
    ("old", "new", "pushed"),
    [
        pytest.param(None, _sandbox(), True, id="create-adoptable"),
        pytest.param(None, _sandbox(refs=[]), False, id="create-not-adoptable"),
        pytest.param(_sandbox(refs=[]), _sandbox(), True, id="became-adoptable"),
        pytest.param(_sandbox(), _sandbox(), False, id="no-change"),
        pytest.param(_sandbox(), _sandbox(node="n1"), True, id="got-scheduled"),
        pytest.param(_sandbox(node="n1"), _sandbox(node="n2"), True, id="node-changed"),
        pytest.param(_sandbox(refs=[_pool_ref("old")]), _sandbox(), True, id="pool-changed"),
        pytest.param(_sandbox(), _sandbox(deleting=True), False, id="now-deleting"),
    ],
)
def test_feed_upsert(old: Obj | None, new: Obj, pushed: bool) -> None:
    queue = WarmQueue()
    assert feed_upsert(queue, old, new) is pushed
    assert queue.size(NS, POOL) == (1 if pushed else 0)
    if pushed:
        assert queue.keys(NS, POOL) == [WarmKey(NS, "sb", new["status"].get("nodeName", ""))]


def test_feed_upsert_keeps_an_entry_that_stopped_being_adoptable() -> None:
    queue = WarmQueue()
    feed_upsert(queue, None, _sandbox())
    assert not feed_upsert(queue, _sandbox(), _sandbox(refs=[]))
    assert queue.contains(NS, POOL, "sb")


def test_feed_delete_removes_from_the_owning_pool() -> None:
    queue = WarmQueue()
    feed_upsert(queue, None, _sandbox("a"))
    feed_upsert(queue, None, _sandbox("b"))
    assert feed_delete(queue, _sandbox("a", deleting=True))
    assert not feed_delete(queue, _sandbox("b", refs=[]))
    assert [k.name for k in queue.keys(NS, POOL)] == ["b"]


def test_event_handlers() -> None:
    queue = WarmQueue()
    feeder = sandbox_feeder(queue)
    assert feeder.on_add is not None
    assert feeder.on_update is not None
    assert feeder.on_delete is not None
    feeder.on_add(_sandbox("a"))
    feeder.on_add(_sandbox("b"))
    feeder.on_update(_sandbox("a"), _sandbox("a", node="n1"))
    assert queue.keys(NS, POOL) == [WarmKey(NS, "a", "n1"), WarmKey(NS, "b", "")]
    feeder.on_delete(_sandbox("a"))
    assert [k.name for k in queue.keys(NS, POOL)] == ["b"]
    dropper = warm_pool_dropper(queue)
    assert dropper.on_delete is not None
    dropper.on_delete({"metadata": {"namespace": NS, "name": POOL}})
    assert queue.size(NS, POOL) == 0
