"""Watch plumbing of the claim controller: predicates, mappings, read-your-writes overlay."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.rbac import normalize_rules
from kube_agent_sandbox.controller.runtime import FakeApi, Manager, Obj, Request, WorkQueue
from kube_agent_sandbox.extensions.claim.observed import FirstObserved, rfc3339nano
from kube_agent_sandbox.extensions.claim.overlay import WriteOverlay
from kube_agent_sandbox.extensions.claim.setup import (
    CLAIM_POOL_INDEX,
    POOL_TEMPLATE_INDEX,
    RBAC_RULES,
    claim_pool_index,
    legacy_policy_change_matters,
    pool_handler,
    pool_template_index,
    sandbox_change_matters,
    setup,
    template_handler,
)
from kube_agent_sandbox.testing.waiting import eventually


class Indexed:
    def __init__(self, index: str, func: Any, objects: list[Obj]) -> None:
        self.index, self.func, self.objects = index, func, objects

    def by_index(self, index: str, value: str) -> list[Obj]:
        assert index == self.index
        return [o for o in self.objects if value in self.func(o)]


def _claim(name: str, pool: str, **extra: Any) -> Obj:
    obj: Obj = {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"warmPoolRef": {"name": pool}},
    }
    obj.update(extra)
    return obj


def _sandbox(**status: Any) -> Obj:
    return {"metadata": {"name": "s", "namespace": "ns"}, "status": status}


def _ready(status: str, gen: int = 1) -> list[Obj]:
    return [{"type": "Ready", "status": status, "observedGeneration": gen}]


def test_owned_sandbox_predicate() -> None:
    base = _sandbox(conditions=_ready("False"), podIPs=["1.1.1.1"])
    assert sandbox_change_matters(None, base)
    assert sandbox_change_matters(base, None)
    assert not sandbox_change_matters(
        base, _sandbox(conditions=_ready("False"), podIPs=["1.1.1.1"])
    )
    assert sandbox_change_matters(base, _sandbox(conditions=_ready("True"), podIPs=["1.1.1.1"]))
    assert sandbox_change_matters(base, _sandbox(conditions=_ready("False", 2), podIPs=["1.1.1.1"]))
    assert sandbox_change_matters(base, _sandbox(conditions=_ready("False"), podIPs=["2.2.2.2"]))
    scheduled = [*_ready("False"), {"type": "PodScheduled", "status": "True"}]
    assert not sandbox_change_matters(base, _sandbox(conditions=scheduled, podIPs=["1.1.1.1"]))
    deleting = _sandbox(conditions=_ready("False"), podIPs=["1.1.1.1"])
    deleting["metadata"]["deletionTimestamp"] = "2026-08-01T00:00:00Z"
    assert sandbox_change_matters(base, deleting)


def _policy(name: str, owner: str | None, kind: str = "SandboxClaim") -> Obj:
    metadata: Obj = {"name": name, "namespace": "ns"}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": kind,
                "name": owner,
                "uid": "u1",
                "controller": True,
            }
        ]
    return {"metadata": metadata, "spec": {}}


def test_legacy_policy_predicate() -> None:
    legacy = _policy("c-network-policy", "c")
    assert legacy_policy_change_matters(None, legacy)
    assert legacy_policy_change_matters(legacy, legacy)
    assert not legacy_policy_change_matters(legacy, None)  # a delete needs no pass
    assert not legacy_policy_change_matters(None, _policy("c-network-policy", None))
    assert not legacy_policy_change_matters(None, _policy("other-network-policy", "c"))
    assert not legacy_policy_change_matters(None, _policy("c", "c"))


async def test_policy_controlled_by_a_claim_enqueues_it_and_is_deleted() -> None:
    """The owned-policy watch brings a claim back when its legacy policy appears later."""
    api = FakeApi(default_namespace="ns")
    manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
    reconciler = setup(manager, ControllerOptions(extensions=True))
    task = asyncio.create_task(manager.run())
    try:
        await asyncio.wait_for(manager.controllers_started.wait(), 10)
        claim = await api.create(
            SANDBOX_CLAIMS,
            "ns",
            {"metadata": {"name": "c"}, "spec": {"warmPoolRef": {"name": "missing"}}},
        )
        # reconciled once (the pool is missing: the next pass is a minute away)
        await eventually(lambda: (api.obj(SANDBOX_CLAIMS, "c") or {}).get("status"))
        policy = _policy("c-network-policy", "c")
        policy["metadata"]["ownerReferences"][0]["uid"] = claim["metadata"]["uid"]
        kept = _policy("x-network-policy", "c")  # controlled by the claim, other name
        kept["metadata"]["ownerReferences"][0]["uid"] = claim["metadata"]["uid"]
        api.add(NETWORK_POLICIES, kept)
        api.add(NETWORK_POLICIES, policy)
        await eventually(lambda: api.obj(NETWORK_POLICIES, "c-network-policy") is None)
        await reconciler.drain()
        assert api.obj(NETWORK_POLICIES, "x-network-policy") is not None
        assert [c for c in api.calls if c.plural == "networkpolicies" and c.verb == "get"] == []
    finally:
        manager.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


def test_pool_events_enqueue_unbound_live_claims_on_generation_change() -> None:
    claims = Indexed(
        CLAIM_POOL_INDEX,
        claim_pool_index,
        [
            _claim("free", "p"),
            _claim("bound", "p", status={"sandbox": {"name": "x"}}),
            _claim("other", "q"),
            {
                **_claim("gone", "p"),
                "metadata": {"name": "gone", "namespace": "ns", "deletionTimestamp": "t"},
            },
        ],
    )
    queue: WorkQueue[Request] = WorkQueue("t")
    handler = pool_handler(queue, claims)  # type: ignore[arg-type]
    pool = {"metadata": {"name": "p", "namespace": "ns", "generation": 1}}
    assert handler.on_update is not None
    assert handler.on_add is not None
    handler.on_update(pool, {**pool, "status": {"replicas": 3}})
    assert len(queue) == 0  # status-only update
    handler.on_update(pool, {"metadata": {**pool["metadata"], "generation": 2}})
    assert len(queue) == 1
    handler.on_add(pool)
    assert len(queue) == 1  # deduplicated: only "free"


def test_template_create_enqueues_bound_and_unbound_claims_of_its_pools() -> None:
    pools = Indexed(
        POOL_TEMPLATE_INDEX,
        pool_template_index,
        [
            {
                "metadata": {"name": "p1", "namespace": "ns"},
                "spec": {"sandboxTemplateRef": {"name": "t"}},
            },
            {
                "metadata": {"name": "p2", "namespace": "ns"},
                "spec": {"sandboxTemplateRef": {"name": "u"}},
            },
        ],
    )
    claims = Indexed(
        CLAIM_POOL_INDEX,
        claim_pool_index,
        [
            _claim("a", "p1"),
            _claim("b", "p1", status={"sandbox": {"name": "x"}}),
            _claim("c", "p2"),
        ],
    )
    queue: WorkQueue[Request] = WorkQueue("t")
    handler = template_handler(queue, pools, claims)  # type: ignore[arg-type]
    assert handler.on_add is not None
    assert handler.on_update is None
    assert handler.on_delete is None
    handler.on_add({"metadata": {"name": "t", "namespace": "ns"}})
    assert len(queue) == 2


def test_rbac_rules_cover_claim_writes() -> None:
    rules = {(r.api_groups, r.resources): set(r.verbs) for r in normalize_rules(RBAC_RULES)}
    flat = {(g, res): verbs for (gs, ress), verbs in rules.items() for g in gs for res in ress}
    assert {"patch", "delete"} <= flat[("extensions.agents.x-k8s.io", "sandboxclaims")]
    assert "patch" in flat[("extensions.agents.x-k8s.io", "sandboxclaims/status")]
    assert "update" in flat[("extensions.agents.x-k8s.io", "sandboxclaims/finalizers")]
    assert {"create", "patch", "delete"} <= flat[("agents.x-k8s.io", "sandboxes")]
    assert flat[("networking.k8s.io", "networkpolicies")] == {"get", "list", "watch", "delete"}


def test_overlay_shadows_until_cache_catches_up() -> None:
    api = FakeApi(default_namespace="ns")
    stored = api.add(SANDBOXES, {"metadata": {"name": "s"}, "spec": {}})
    overlay = WriteOverlay(api.reader(SANDBOXES))
    written = {**stored, "metadata": {**stored["metadata"], "resourceVersion": "999"}}
    overlay.remember(written)
    assert overlay.get("ns", "s")["metadata"]["resourceVersion"] == "999"  # type: ignore[index]
    overlay.observe(stored)  # an older version arrives: still shadowed
    assert len(overlay) == 1
    overlay.observe(written)
    assert len(overlay) == 0
    assert (
        overlay.get("ns", "s")["metadata"]["resourceVersion"]
        == stored["metadata"]["resourceVersion"]
    )  # type: ignore[index]


def test_first_observed_and_rfc3339nano() -> None:
    times = iter([1_000_000_000_500_000_000, 2_000_000_000_000_000_000])
    observed = FirstObserved(lambda: next(times))
    claim = {"metadata": {"name": "c", "namespace": "ns", "uid": "u1"}}
    assert observed.predicate(None, claim)
    assert observed.record(claim) == 1_000_000_000_500_000_000
    observed.predicate(claim, None)
    assert len(observed) == 0
    assert rfc3339nano(1_000_000_000_500_000_000) == "2001-09-09T01:46:40.5Z"
    assert rfc3339nano(1_000_000_000_000_000_000) == "2001-09-09T01:46:40Z"
