"""Leader failover in the middle of a claim burst: SIGKILL the leader, the standby takes over.

Two ``agent-sandbox-controller --extensions`` processes elect a leader on a Lease (12 s lease,
10 s renew deadline, 2 s retry; see ``LEASE_DURATION``). A warm pool is filled, then a burst of
claims is created and the leader is SIGKILLed halfway through (no Lease release: the standby
must wait for the Lease to expire). A replica that exits on its own (a leader that could not
renew in time steps down) is restarted, as kubelet restarts a Deployment's container, and
counted. The test measures the takeover time (kill to the new leader's
``leader_election_master_status`` = 1) and checks, once the burst is served, that every claim
became Ready exactly once and was only ever bound to one Sandbox, that no Sandbox is bound
twice or orphaned and that every Sandbox has exactly one Pod.

``RELIABILITY_FAILOVER_CLAIMS`` sets the burst size (200 by default, see ``CLAIMS``). The test
first adds kwok nodes until the cluster has room for every Pod of the burst (``pod_room``): the
local cluster's two nodes hold 220 Pods, and a 500-claim run without more nodes left 283 claims
waiting forever on Pods the scheduler could not place ("Too many pods"), which looked like a
slow controller. If the burst does not finish, the failure message says why: Ready over time,
the unready claims by condition reason with their Sandbox's and Pod's state, and the replicas'
logged errors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from reliability_support import (
    ClaimTracker,
    ControllerProcess,
    add_pod_room,
    check_namespace,
    claim,
    controller_identity,
    create_all,
    describe_unready,
    leader_election_flow_schema,
    metric_sum,
    remove_nodes,
    scrape,
    setup_pool,
    start_controller,
)
from reliability_support import (
    until as poll_until,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_WARM_POOLS
from kube_agent_sandbox.controller.runtime import ApiClient, load_kubeconfig
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner, Identity

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

CLAIMS = int(os.environ.get("RELIABILITY_FAILOVER_CLAIMS", "200"))
"""Claims in the burst; ``RELIABILITY_FAILOVER_CLAIMS=500`` runs the issue's figure. The test
adds kwok nodes until the cluster has room for the burst's Pods (see :func:`pod_room`)."""
POOL = "pool"
POOL_REPLICAS = 50
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 12.0, 10.0, 2.0
# Shorter leases (4 s / 3 s / 1 s) were tried first: on the shared 2-core test machine (load
# average 18) a renewal's GET+PUT took over 3 s while the pool filled, so every leader stepped
# down within seconds. 12 s / 10 s / 2 s is just under controller-runtime's 15 s / 10 s / 2 s.
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


REPLICAS: list[Replicas] = []


@dataclass
class Replicas:
    """Two controller replicas; one that exits on its own is restarted, as kubelet would.

    A leader that cannot renew within the renew deadline exits (a lost Lease may already be
    someone else's); in a Deployment its container restarts and becomes a standby. The test
    restarts it the same way and counts these step-downs.
    """

    runner: ControllerRunner
    identity: Identity
    flags: list[str]
    members: list[ControllerProcess] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)
    logs: set[Any] = field(default_factory=set)
    step_downs: int = 0
    started: int = 0

    def start_one(self) -> ControllerProcess:
        self.started += 1
        member = start_controller(
            self.runner, self.identity, name=f"replica-{self.started}", flags=self.flags
        )
        self.members.append(member)
        self.logs.add(member.process.log_path)
        return member

    def heal(self) -> None:
        for member in list(self.members):
            if member.process.alive():
                continue
            self.members.remove(member)
            if member.process.pid not in self.killed:
                self.step_downs += 1
                log.warning("%s exited on its own (lost its Lease); restarting", member.name)
            self.start_one()

    async def leader(self) -> ControllerProcess | None:
        self.heal()
        for member in self.members:
            if await leading(member):
                return member
        return None

    def kill(self, member: ControllerProcess) -> bool:
        """SIGKILL ``member``; False if it had exited already."""
        self.killed.add(member.process.pid)
        try:
            os.kill(member.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.members.remove(member)
        return True


async def until(what: str, probe: Any, *, seconds: float, poll: float = 0.2) -> Any:
    """Poll as :func:`reliability_support.until`, healing a replica that exited meanwhile."""
    return await poll_until(what, probe, seconds=seconds, poll=poll, between=heal_first)


def heal_first() -> None:
    if REPLICAS:
        REPLICAS[0].heal()


async def pool_ready(api: ApiClient, namespace: str) -> bool:
    pool = await api.get(SANDBOX_WARM_POOLS, namespace, POOL)
    return int((pool.get("status") or {}).get("readyReplicas") or 0) >= POOL_REPLICAS


async def sample_progress(tracker: ClaimTracker, progress: list[tuple[int, int]]) -> None:
    """Record (seconds since start, claims Ready) every 10 s, for the failure message."""
    started = time.monotonic()
    while True:
        progress.append((round(time.monotonic() - started), tracker.ready_count()))
        log.info("failover progress: %s", progress[-1])
        await asyncio.sleep(10.0)


def controller_errors(replicas: Replicas, *, limit: int = 40) -> list[str]:
    """The replicas' logged errors and tracebacks (the last ``limit`` such lines of each)."""
    lines: list[str] = []
    for path in sorted({m.process.log_path for m in replicas.members} | replicas.logs):
        text = path.read_text(errors="replace").splitlines() if path.exists() else []
        hits = [ln for ln in text if "ERROR" in ln or "Traceback" in ln or "Error:" in ln]
        lines.append(f"{path.name}: {len(hits)} error lines")
        lines += [f"  {ln[:300]}" for ln in hits[-limit:]]
    return lines


@pytest.fixture
def pod_room(cluster: ClusterAccess) -> Iterator[list[str]]:
    """Extra kwok nodes, so every Pod of the burst can be scheduled; removed afterwards.

    The burst needs a Pod per claim plus the pool's: its 50 at the start and the 50 that
    replace the ones claims adopt. The local cluster's two kwok nodes hold 220 Pods; beyond
    that Pods stay Pending ("Too many pods") and their claims never become Ready. Listed first
    among the test's fixtures, so it is torn down last (after the namespace's deletion began;
    kube-controller-manager's pod GC removes what was left on the deleted nodes).
    """
    names = add_pod_room(
        cluster, pods=CLAIMS + 2 * POOL_REPLICAS, prefix=f"kwok-failover-{secrets.token_hex(3)}"
    )
    try:
        yield names
    finally:
        remove_nodes(cluster, names)


@pytest.mark.timeout(1200)
async def test_standby_takes_over_a_claim_burst_after_sigkill(
    pod_room: list[str],
    cluster: ClusterAccess,
    controller_runner: ControllerRunner,
    namespace: str,
    agent_sandbox_crds: list[str],
    record_property: Any,
) -> None:
    identity = controller_identity(controller_runner, namespace)
    cluster.apply(leader_election_flow_schema(namespace, identity.name))
    replicas = Replicas(controller_runner, identity, lease_flags(namespace))
    REPLICAS[:] = [replicas]
    replicas.start_one()
    api = ApiClient(load_kubeconfig(str(cluster.kubeconfig)))
    tracker: ClaimTracker | None = None
    sampler: asyncio.Task[None] | None = None
    try:
        await until("a leader", replicas.leader, seconds=90)
        replicas.start_one()
        await setup_pool(api, namespace, pool=POOL, replicas=POOL_REPLICAS)
        await until("the warm pool", lambda: pool_ready(api, namespace), seconds=180)
        tracker = ClaimTracker.start(api, namespace)
        await tracker.informer.wait_for_sync()
        progress: list[tuple[int, int]] = []
        sampler = asyncio.create_task(sample_progress(tracker, progress))

        burst_started = time.monotonic()
        names = [f"c{i:04d}" for i in range(CLAIMS)]
        half = CLAIMS // 2
        await create_all(api, namespace, [(SANDBOX_CLAIMS, claim(n, POOL)) for n in names[:half]])
        ready_at_kill = tracker.ready_count()
        while True:
            leader = await until("a leader to kill", replicas.leader, seconds=90)
            standbys = [m for m in replicas.members if m is not leader]
            if standbys and replicas.kill(leader):
                break  # else it stepped down meanwhile: kill whoever leads now
        killed = time.monotonic()
        rest = asyncio.create_task(
            create_all(api, namespace, [(SANDBOX_CLAIMS, claim(n, POOL)) for n in names[half:]])
        )
        new_leader = await until("a new leader", replicas.leader, seconds=90, poll=0.05)
        takeover = time.monotonic() - killed
        log.info("failover: takeover %.2fs after SIGKILL (lease %gs)", takeover, LEASE_DURATION)
        replicas.start_one()  # the killed replica's restart, a standby again
        await rest
        stalled = tracker.ready_count()

        async def served_again() -> bool:
            return tracker is not None and tracker.ready_count() > stalled

        await until("the new leader to serve claims", served_again, seconds=60, poll=0.05)
        first_served = time.monotonic() - killed

        async def all_ready() -> bool:
            return tracker is not None and tracker.ready_count() == CLAIMS

        try:
            await until(f"{CLAIMS} claims Ready", all_ready, seconds=420, poll=0.5)
        except AssertionError as error:
            details = await describe_unready(api, namespace)
            pytest.fail(
                "\n".join(
                    [
                        str(error),
                        f"kill {round(killed - burst_started)} s after the burst start; "
                        f"(s after the burst start, claims Ready): {progress}",
                        *details,
                        *controller_errors(replicas),
                    ]
                )
            )
        burst = time.monotonic() - burst_started
        all_served = time.monotonic() - killed
        log.info(
            "failover: %d claims, %d Ready at the kill; takeover %.2fs (lease %gs), "
            "first claim served by the new leader %.2fs and all %.1fs after the kill, "
            "burst done in %.1fs, %d step-downs under load, %d nodes added",
            CLAIMS,
            ready_at_kill,
            takeover,
            LEASE_DURATION,
            first_served,
            all_served,
            burst,
            replicas.step_downs,
            len(pod_room),
        )
        record_property("claims", CLAIMS)
        record_property("takeover_seconds", round(takeover, 2))
        record_property("first_served_after_kill_seconds", round(first_served, 2))
        record_property("all_ready_after_kill_seconds", round(all_served, 1))
        record_property("burst_seconds", round(burst, 1))
        record_property("step_downs", replicas.step_downs)

        # the standby waits for the Lease to expire (measured from its last observed renewal)
        # and notices on its next retry
        # The standby sees the holder's last renewal up to one jittered retry period late
        # (client-go's JitterFactor 1.2), counts the lease duration from then, and notices the
        # expiry at its next jittered retry; 2 s more cover the acquiring write under load.
        assert takeover <= LEASE_DURATION + 2 * RETRY_PERIOD * 1.2 + 2.0, takeover
        assert leader.process.returncode == -signal.SIGKILL

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
        log.info(
            "failover: consistent; %d Ready transitions for %d claims, none re-bound, "
            "no Sandbox bound twice or orphaned, one Pod per Sandbox",
            sum(tracker.ready_transitions.values()),
            CLAIMS,
        )

        survivor = await scrape(new_leader.metrics_url)
        assert survivor is not None
        assert metric_sum(survivor, "controller_runtime_reconcile_panics_total") == 0
        log.info(
            "new leader: %d claim reconciles, %d errors, %d sandbox reconciles",
            metric_sum(survivor, "controller_runtime_reconcile_total", controller="sandboxclaim"),
            metric_sum(survivor, "controller_runtime_reconcile_errors_total"),
            metric_sum(survivor, "controller_runtime_reconcile_total", controller="sandbox"),
        )
        leaders = [m for m in replicas.members if await leading(m)]
        assert len(leaders) <= 1, "two leaders"
    finally:
        if sampler is not None:
            sampler.cancel()
        if tracker is not None:
            await tracker.stop()
        await api.close()
