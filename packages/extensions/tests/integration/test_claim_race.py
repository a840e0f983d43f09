"""THE race: 200 claims against a pool of 50 Ready warm Sandboxes, 50 claim workers.

Every claim must become Ready; every Sandbox is bound to at most one claim (by owner
reference and by ``status.sandbox``); exactly the 50 warm Sandboxes are adopted and the other
150 claims start cold; nothing is left without a claim. The apiserver writes the whole process
made are counted from the client's ``rest_client_requests_total`` and printed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from claim_env import ClaimEnv, conditions, sample, wait_started

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES

pytestmark = pytest.mark.integration

CLAIMS = 200
CONTROLLER_LATENCY = "agent_sandbox_claim_controller_startup_latency_ms"
CLIENT_LATENCY = "agent_sandbox_client_claim_startup_latency_ms"
WARM = 50
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


@pytest.fixture
async def env(
    cluster: Any, namespace: str, extensions_controller: list[Any]
) -> AsyncIterator[ClaimEnv]:
    async with ClaimEnv.connect(cluster.kubeconfig, namespace) as e:
        yield e


def _writes(manager: Any) -> float:
    total = 0.0
    for metric in manager.registry.collect():
        if metric.name != "rest_client_requests":
            continue
        for s in metric.samples:
            if s.name.endswith("_total") and s.labels.get("method") in WRITE_METHODS:
                total += s.value
    return total


class TestClaimRace:
    extensions = ("claim",)

    async def test_many_claims_small_pool(
        self, env: ClaimEnv, extensions_controller: list[Any]
    ) -> None:
        manager = (await wait_started(extensions_controller))[0]
        template = await env.template("tmpl")
        pool = await env.pool("pool", "tmpl", replicas=WARM)
        members = await env.ready_members(pool, template, WARM)
        warm_names = {m["metadata"]["name"] for m in members}
        await asyncio.sleep(1.0)  # let the warm queue see every member Ready
        writes_before = _writes(manager)
        started = time.monotonic()
        await asyncio.gather(*(env.claim(f"claim-{i}", "pool") for i in range(CLAIMS)))

        warm_ready_after: float | None = None

        async def all_ready() -> list[dict[str, Any]] | None:
            nonlocal warm_ready_after
            claims = await env.list(SANDBOX_CLAIMS)
            ready = [cl for cl in claims if conditions(cl).get("Ready", {}).get("status") == "True"]
            warm = [cl for cl in ready if cl["status"]["sandbox"]["name"] in warm_names]
            if warm_ready_after is None and len(warm) == WARM:
                warm_ready_after = time.monotonic() - started
            return claims if len(ready) == CLAIMS else None

        claims = await env.until(all_ready, f"{CLAIMS} claims Ready")
        elapsed = time.monotonic() - started
        sandboxes = await env.list(SANDBOXES)
        by_name = {s["metadata"]["name"]: s for s in sandboxes}
        claim_by_uid = {cl["metadata"]["uid"]: cl for cl in claims}

        bound = Counter(cl["status"]["sandbox"]["name"] for cl in claims)
        assert max(bound.values()) == 1, "a sandbox is bound to two claims"
        for claim in claims:
            sandbox = by_name[claim["status"]["sandbox"]["name"]]
            refs = sandbox["metadata"]["ownerReferences"]
            assert len(refs) == 1
            assert refs[0]["uid"] == claim["metadata"]["uid"]
        # no orphan: every Sandbox belongs to exactly one claim
        assert len(sandboxes) == CLAIMS
        for sandbox in sandboxes:
            refs = sandbox["metadata"]["ownerReferences"]
            assert refs[0]["kind"] == c.KIND_SANDBOX_CLAIM
            assert refs[0]["uid"] in claim_by_uid
        adopted = {n for n in bound if n in warm_names}
        assert adopted == warm_names
        cold = [cl for cl in claims if cl["status"]["sandbox"]["name"] == cl["metadata"]["name"]]
        assert len(cold) == CLAIMS - WARM
        launch = Counter(s["metadata"]["labels"][c.LABEL_LAUNCH_TYPE] for s in sandboxes)
        assert launch == {c.LAUNCH_TYPE_WARM: WARM, c.LAUNCH_TYPE_COLD: CLAIMS - WARM}
        creation = {
            "namespace": env.namespace,
            "sandbox_template": "tmpl",
            "warmpool_name": "pool",
            "created_by": "unknown",
        }
        warm_count = sample(
            manager,
            "agent_sandbox_claim_creation_total",
            {**creation, "launch_type": "warm", "pod_condition": "ready"},
        )
        cold_count = sample(
            manager,
            "agent_sandbox_claim_creation_total",
            {**creation, "launch_type": "cold", "pod_condition": "not_ready"},
        )
        assert (warm_count, cold_count) == (WARM, CLAIMS - WARM)
        await asyncio.sleep(2.0)  # let trailing writes (pod patches) land before counting
        writes = _writes(manager) - writes_before
        print(
            f"\n{WARM} warm claims Ready within {warm_ready_after or 0:.1f}s (polled); "
            f"{CLAIMS} claims Ready in {elapsed:.1f}s; "
            f"{writes:.0f} apiserver writes by the controller process "
            f"({writes / CLAIMS:.1f} per claim, Sandbox controller and events included)"
        )


class TestWarmWriteBudget:
    extensions = ("claim",)

    async def test_writes_per_warm_claim(
        self, env: ClaimEnv, extensions_controller: list[Any]
    ) -> None:
        """Warm claims only: the claim and Sandbox controllers together stay within budget."""
        manager = (await wait_started(extensions_controller))[0]
        count = 20
        template = await env.template("tmpl")
        pool = await env.pool("pool", "tmpl", replicas=count)
        members = await env.ready_members(pool, template, count)
        await asyncio.sleep(3.0)  # members settled: no more writes of their own
        before = _writes(manager)
        latency = {"launch_type": "warm", "sandbox_template": "tmpl"}
        hist = {
            name: (
                sample(manager, f"{name}_sum", latency),
                sample(manager, f"{name}_count", latency),
            )
            for name in (CONTROLLER_LATENCY, CLIENT_LATENCY)
        }
        started = time.monotonic()

        async def one(i: int) -> None:
            now = dt.datetime.now(dt.UTC).isoformat()
            await env.claim(
                f"w-{i}", "pool", annotations={c.ANNOTATION_CLIENT_FIRST_REQUESTED_AT: now}
            )

        await asyncio.gather(*(one(i) for i in range(count)))

        async def all_ready() -> list[dict[str, Any]] | None:
            claims = await env.list(SANDBOX_CLAIMS)
            ready = [cl for cl in claims if conditions(cl).get("Ready", {}).get("status") == "True"]
            return claims if len(ready) == count else None

        claims = await env.until(all_ready, f"{count} warm claims Ready")
        elapsed = time.monotonic() - started
        assert {cl["status"]["sandbox"]["name"] for cl in claims} == {
            m["metadata"]["name"] for m in members
        }
        await asyncio.sleep(3.0)  # the Sandbox controller's pod and status writes
        per_claim = (_writes(manager) - before) / count
        means = {}
        for name, (sum_before, count_before) in hist.items():
            observed = sample(manager, f"{name}_count", latency) - count_before
            assert observed == count
            means[name] = (sample(manager, f"{name}_sum", latency) - sum_before) / observed
        print(
            f"\n{count} warm claims Ready in {elapsed:.2f}s (polled); "
            f"{per_claim:.1f} writes per warm claim (claim + Sandbox controllers, events); "
            f"mean first-observed->Ready {means[CONTROLLER_LATENCY]:.0f} ms, "
            f"client request->Ready {means[CLIENT_LATENCY]:.0f} ms"
        )
        assert per_claim <= 10
