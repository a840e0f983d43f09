"""The warm create path spends no API read it can avoid, and says where its time went."""

from __future__ import annotations

import time
from typing import Any

import pytest
from gateway_fakes import TENANT, Gateway, add_pool

from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.gateway.controlplane.lifecycle import CACHE_CATCH_UP_SECONDS
from kube_agent_sandbox.gateway.controlplane.timing import PhaseTimer
from kube_agent_sandbox.gateway.index import SandboxIndex


async def _create(gw: Gateway, template: str = "base") -> tuple[str, str]:
    response = await gw.client.post(
        "/v2/sandboxes", json={"templateID": template}, headers=gw.headers()
    )
    assert response.status_code == 201, response.text
    return str(response.json()["sandboxID"]), response.headers.get("server-timing", "")


def _reads_of(gw: Gateway, *plurals: str) -> list[Any]:
    return [c for c in gw.api.calls if c.verb == "get" and c.plural in plurals]


async def test_a_warm_create_reads_no_pool_or_template_and_writes_only_the_claim(
    gateway: Gateway,
) -> None:
    await _create(gateway)  # the first create of a tenant is no different; clear after it
    gateway.api.calls.clear()
    await _create(gateway)
    assert _reads_of(gateway, "sandboxwarmpools", "sandboxtemplates") == []
    writes = [(c.verb, c.plural) for c in gateway.api.writes()]
    # no Secret without envVars, no policy patch without a policy: the claim only
    assert writes == [("create", "sandboxclaims")]


async def test_a_pool_the_cache_has_not_seen_is_read_from_the_api(gateway: Gateway) -> None:
    gateway.state.index.warm_pools = None  # as if the pool had been created a moment ago
    gateway.api.calls.clear()
    await _create(gateway)
    assert [c.name for c in _reads_of(gateway, "sandboxwarmpools")] == ["base"]


async def test_a_template_the_cache_has_not_seen_is_read_from_the_api(gateway: Gateway) -> None:
    gateway.api.add(
        SANDBOX_TEMPLATES,
        {"metadata": {"name": "fresh", "namespace": TENANT}, "spec": {"podTemplate": {}}},
    )
    gateway.state.index.templates = None
    gateway.api.calls.clear()
    await _create(gateway, "fresh")
    assert [c.name for c in _reads_of(gateway, "sandboxtemplates")] == ["fresh"]


async def test_an_unknown_template_is_still_404_with_the_caches(gateway: Gateway) -> None:
    response = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "missing"}, headers=gateway.headers()
    )
    assert response.status_code == 404
    # both pool names and the template were looked for (cache miss, then the API)
    names = sorted(str(c.name) for c in _reads_of(gateway, "sandboxwarmpools", "sandboxtemplates"))
    assert names == ["missing", "missing", "shadow-pool-missing"]


async def test_a_pool_of_another_tenant_does_not_serve_this_one(gateway: Gateway) -> None:
    add_pool(gateway.api, "someone-else", "private")
    response = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "private"}, headers=gateway.headers()
    )
    assert response.status_code == 404


async def test_the_create_answers_with_its_phases(gateway: Gateway) -> None:
    _, timing = await _create(gateway)
    names = [entry.split(";")[0].strip() for entry in timing.split(",")]
    assert names == ["resolve", "claim", "ready", "policy", "init", "total"]
    assert all(";dur=" in entry for entry in timing.split(","))


async def test_connect_right_after_a_create_does_not_wait_for_a_write_that_changed_nothing(
    gateway: Gateway,
) -> None:
    sid, _ = await _create(gateway)
    for _ in range(3):  # at least two land in one second: the deadline write is a no-op
        began = time.monotonic()
        response = await gateway.client.post(
            f"/sandboxes/{sid}/connect", json={"timeout": 300}, headers=gateway.headers()
        )
        assert response.status_code == 200, response.text
        assert time.monotonic() - began < CACHE_CATCH_UP_SECONDS / 2


class _Cache:
    def __init__(self, *objs: Obj) -> None:
        self.objs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.objs.get((namespace, name))


def test_the_index_hides_pools_and_templates_being_deleted() -> None:
    live = {"metadata": {"namespace": "t", "name": "a"}}
    going = {
        "metadata": {"namespace": "t", "name": "b", "deletionTimestamp": "2026-01-01T00:00:00Z"}
    }
    empty = _Cache()
    index = SandboxIndex(empty, empty, empty, warm_pools=_Cache(live, going), templates=None)  # type: ignore[arg-type]
    assert index.warm_pool("t", "a") is live
    assert index.warm_pool("t", "b") is None
    assert index.warm_pool("u", "a") is None
    assert index.template("t", "a") is None  # no cache: every lookup misses


def test_phase_timer_splits_and_adds_up() -> None:
    timer = PhaseTimer()
    timer.mark("a")
    timer.mark("b")
    timer.mark("a")
    assert list(timer.phases) == ["a", "b"]
    assert sum(timer.phases.values()) <= timer.elapsed()
    header = timer.header()
    assert header.startswith("a;dur=")
    assert header.split(", ")[-1].startswith("total;dur=")
    assert "a " in timer.summary()
    assert " ms" in timer.summary()


@pytest.mark.parametrize("name", ["", "a b", "a;dur=1", "x,y"])
def test_phase_timer_refuses_names_that_break_the_header(name: str) -> None:
    with pytest.raises(ValueError, match="not a token"):
        PhaseTimer().mark(name)
