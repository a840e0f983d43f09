"""Leader failover in the middle of a claim burst: SIGKILL the leader, the standby takes over.

Two ``agent-sandbox-controller --extensions`` processes elect a leader on a short Lease (4 s
lease, 3 s renew deadline, 1 s retry). A warm pool is filled, then a burst of claims is created
and the leader is SIGKILLed halfway through (no Lease release: the standby must wait for the
Lease to expire). The test measures the takeover time (kill to the standby's
``leader_election_master_status`` = 1) and checks, once the burst is served, that every claim
became Ready exactly once and was only ever bound to one Sandbox, that no Sandbox is bound twice
or orphaned and that every Sandbox has exactly one Pod.

``RELIABILITY_FAILOVER_CLAIMS`` sets the burst size (500 by default).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import Any

import pytest
from reliability_support import (
    ClaimTracker,
    ControllerProcess,
    check_namespace,
    claim,
    controller_identity,
    create_all,
    metric_sum,
    scrape,
    setup_pool,
    start_controller,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime.client import ApiClient
from kube_agent_sandbox.controller.runtime.config import load_kubeconfig
from kube_agent_sandbox.extensions.common.resources import SANDBOX_CLAIMS, SANDBOX_WARM_POOLS
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

CLAIMS = int(os.environ.get("RELIABILITY_FAILOVER_CLAIMS", "500"))
POOL = "pool"
POOL_REPLICAS = 50
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 1.0
MASTER = "leader_election_master_status"


def lease_flags(namespace: str) -> list[str]:
    return [
        "--leader-elect=true",
        f"--leader-election-namespace={namespace}",
        f"--leader-elect-lease-duration={LEASE_DURATION:g}s",
        f"--leader-elect-renew-deadline={RENEW_DEADLINE:g}s",
        f"--leader-elect-retry-period={RETRY_PERIOD:g}s",
    ]


async def leading(ctrl: ControllerProcess) -> bool:
    samples = await scrape(ctrl.metrics_url, seconds=2.0)
    return samples is not None and metric_sum(samples, MASTER, name=c.LEADER_ELECTION_ID) == 1


async def until(what: str, probe: Any, *, seconds: float, poll: float = 0.2) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {seconds:.0f}s")
        await asyncio.sleep(poll)


async def pool_ready(api: ApiClient, namespace: str) -> bool:
    pool = await api.get(SANDBOX_WARM_POOLS, namespace, POOL)
    return int((pool.get("status") or {}).get("readyReplicas") or 0) >= POOL_REPLICAS


async def test_standby_takes_over_a_claim_burst_after_sigkill(
    cluster: ClusterAccess,
    controller_runner: ControllerRunner,
    namespace: str,
    agent_sandbox_crds: list[str],
    record_property: Any,
) -> None:
    identity = controller_identity(controller_runner, namespace)
    first = start_controller(
        controller_runner, identity, name="replica-a", flags=lease_flags(namespace)
    )
    api = ApiClient(load_kubeconfig(str(cluster.kubeconfig)))
    tracker: ClaimTracker | None = None
    try:
        await until("replica-a to lead", lambda: leading(first), seconds=90)
        second = start_controller(
            controller_runner, identity, name="replica-b", flags=lease_flags(namespace)
        )
        await until("replica-b to serve metrics", lambda: scrape(second.metrics_url), seconds=90)
        assert not await leading(second), "two leaders"
        await setup_pool(api, namespace, pool=POOL, replicas=POOL_REPLICAS)
        await until("the warm pool", lambda: pool_ready(api, namespace), seconds=120)
        tracker = ClaimTracker.start(api, namespace)
        await tracker.informer.wait_for_sync()

        burst_started = time.monotonic()
        names = [f"c{i:04d}" for i in range(CLAIMS)]
        half = CLAIMS // 2
        await create_all(api, namespace, [(SANDBOX_CLAIMS, claim(n, POOL)) for n in names[:half]])
        ready_at_kill = tracker.ready_count()
        os.kill(first.process.pid, signal.SIGKILL)
        killed = time.monotonic()
        rest = asyncio.create_task(
            create_all(api, namespace, [(SANDBOX_CLAIMS, claim(n, POOL)) for n in names[half:]])
        )
        await until("replica-b to lead", lambda: leading(second), seconds=60, poll=0.05)
        takeover = time.monotonic() - killed
        await rest
        stalled = tracker.ready_count()

        async def served_again() -> bool:
            return tracker is not None and tracker.ready_count() > stalled

        await until("the new leader to serve claims", served_again, seconds=60, poll=0.05)
        first_served = time.monotonic() - killed

        async def all_ready() -> bool:
            return tracker is not None and tracker.ready_count() == CLAIMS

        await until(f"{CLAIMS} claims Ready", all_ready, seconds=240, poll=0.5)
        burst = time.monotonic() - burst_started
        log.info(
            "failover: %d claims, %d Ready at the kill; takeover %.2fs (lease %gs), "
            "first claim served by the new leader %.2fs after the kill, burst done in %.1fs",
            CLAIMS,
            ready_at_kill,
            takeover,
            LEASE_DURATION,
            first_served,
            burst,
        )
        record_property("claims", CLAIMS)
        record_property("takeover_seconds", round(takeover, 2))
        record_property("first_served_after_kill_seconds", round(first_served, 2))
        record_property("burst_seconds", round(burst, 1))

        # the standby waits for the Lease to expire (measured from its last observed renewal)
        # and notices on its next retry
        assert takeover <= LEASE_DURATION + 2 * RETRY_PERIOD, takeover
        assert first.process.returncode == -signal.SIGKILL

        problems: list[str] = []

        async def consistent() -> bool:
            nonlocal problems
            problems = await check_namespace(
                api, namespace, claims=CLAIMS, pool=POOL, pool_replicas=POOL_REPLICAS
            )
            return not problems

        try:
            await until("a consistent namespace", consistent, seconds=90, poll=1.0)
        except AssertionError:
            pytest.fail("\n".join(problems[:30]))
        twice = {n: k for n, k in tracker.ready_transitions.items() if k != 1}
        assert twice == {}, f"claims not Ready exactly once: {twice}"
        rebound = {n: s for n, s in tracker.bound_to.items() if len(s) != 1}
        assert rebound == {}, f"claims bound to several sandboxes: {rebound}"
        assert sorted(tracker.ready_transitions) == names

        survivor = await scrape(second.metrics_url)
        assert survivor is not None
        assert metric_sum(survivor, "controller_runtime_reconcile_panics_total") == 0
        log.info(
            "new leader: %d claim reconciles, %d errors, %d sandbox reconciles",
            metric_sum(survivor, "controller_runtime_reconcile_total", controller="sandboxclaim"),
            metric_sum(survivor, "controller_runtime_reconcile_errors_total"),
            metric_sum(survivor, "controller_runtime_reconcile_total", controller="sandbox"),
        )
        assert second.process.alive(), second.process.log_tail()
    finally:
        if tracker is not None:
            await tracker.stop()
        await api.close()
