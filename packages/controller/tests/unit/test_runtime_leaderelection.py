"""Leader election against an in-memory Lease store (FakeApi), client-go semantics."""

from __future__ import annotations

import asyncio

import pytest

from kube_agent_sandbox.api.rest import LEASES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    FakeApi,
    LeaderElectionConfig,
    LeaderElectionLost,
    Obj,
    RuntimeMetrics,
)
from kube_agent_sandbox.controller.runtime.leaderelection import LeaderElector, default_identity


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def cfg(identity: str, **kwargs: float) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        lease_name="lock",
        lease_namespace="sys",
        identity=identity,
        **kwargs,  # type: ignore[arg-type]
    )


def fast(identity: str) -> LeaderElectionConfig:
    return cfg(identity, lease_duration=1.0, renew_deadline=0.5, retry_period=0.05)


async def lease(api: FakeApi) -> Obj:
    return await api.get(LEASES, "sys", "lock")


def status(metrics: RuntimeMetrics) -> float | None:
    return metrics.registry.get_sample_value("leader_election_master_status", {"name": "lock"})


async def test_first_candidate_creates_lease_second_waits() -> None:
    api = FakeApi()
    mono = Clock()
    a = LeaderElector(api, cfg("a"), monotonic=mono)
    b = LeaderElector(api, cfg("b"), monotonic=mono)
    assert await a.try_acquire_or_renew() is True
    spec = (await lease(api))["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["renewTime"].endswith("Z")
    assert "." in spec["renewTime"]
    assert await b.try_acquire_or_renew() is False
    mono.now += 14.9
    assert await b.try_acquire_or_renew() is False


async def test_unrenewed_lease_is_taken_after_duration_on_own_clock() -> None:
    api = FakeApi()
    mono = Clock()
    a = LeaderElector(api, cfg("a"), monotonic=mono)
    b = LeaderElector(api, cfg("b"), monotonic=mono)
    assert await a.try_acquire_or_renew()
    first_acquire = (await lease(api))["spec"]["acquireTime"]
    assert not await b.try_acquire_or_renew()  # b first observes the record now
    mono.now += 15.1
    assert await b.try_acquire_or_renew()
    spec = (await lease(api))["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert spec["acquireTime"] >= first_acquire
    # a's renewal now sees b's fresh record and must not steal it back
    assert not await a.try_acquire_or_renew()


async def test_renewal_keeps_acquire_time_and_transitions() -> None:
    api = FakeApi()
    wall = Clock()
    a = LeaderElector(api, cfg("a"), clock=wall)
    assert await a.try_acquire_or_renew()
    before = (await lease(api))["spec"]
    wall.now += 3
    assert await a.try_acquire_or_renew()
    after = (await lease(api))["spec"]
    assert after["acquireTime"] == before["acquireTime"]
    assert after["renewTime"] > before["renewTime"]
    assert after["leaseTransitions"] == 0


async def test_concurrent_candidates_only_one_wins() -> None:
    api = FakeApi()
    mono = Clock()
    seed = LeaderElector(api, cfg("old"), monotonic=mono)
    assert await seed.try_acquire_or_renew()
    candidates = [LeaderElector(api, cfg(f"c{i}"), monotonic=mono) for i in range(5)]
    for c in candidates:
        assert not await c.try_acquire_or_renew()
    mono.now += 16
    results = await asyncio.gather(*(c.try_acquire_or_renew() for c in candidates))
    assert sorted(results) == [False, False, False, False, True]
    winner = candidates[results.index(True)].config.identity
    assert (await lease(api))["spec"]["holderIdentity"] == winner


async def test_release_lets_successor_acquire_immediately() -> None:
    api = FakeApi()
    metrics = RuntimeMetrics()
    a = LeaderElector(api, fast("a"), metrics=metrics)
    b = LeaderElector(api, fast("b"))
    await asyncio.wait_for(a.acquire(), 5)
    assert a.is_leader
    assert status(metrics) == 1
    assert not await b.try_acquire_or_renew()
    assert await a.release() is True
    spec = (await lease(api))["spec"]
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert status(metrics) == 0
    assert await b.try_acquire_or_renew()  # empty holder: no waiting
    assert (await lease(api))["spec"]["leaseTransitions"] == 1


async def test_release_when_not_leader_is_a_no_op() -> None:
    api = FakeApi()
    a = LeaderElector(api, fast("a"))
    assert await a.release() is True
    assert api.calls == []


async def test_leadership_lost_when_renewals_fail_for_renew_deadline() -> None:
    api = FakeApi()
    metrics = RuntimeMetrics()
    a = LeaderElector(api, fast("a"), metrics=metrics)
    await asyncio.wait_for(a.acquire(), 5)

    def fail_updates(verb: str, *_: object) -> None:
        if verb == "update":
            raise ApiError(500, "InternalError", "etcd unavailable")

    api.on_request = fail_updates
    await asyncio.wait_for(a.renew_until_lost(), 5)
    assert not a.is_leader
    assert status(metrics) == 0


async def test_run_raises_when_lease_lost_and_cancels_leader_work() -> None:
    api = FakeApi()
    a = LeaderElector(api, fast("a"))
    cancelled = asyncio.Event()

    def fail_updates(verb: str, *_: object) -> None:
        if verb == "update":
            raise ApiError(500, "InternalError", "down")

    async def lead() -> None:
        try:
            api.on_request = fail_updates  # the API server goes away while we lead
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(LeaderElectionLost):
        await asyncio.wait_for(a.run(lead), 5)
    assert cancelled.is_set()


async def test_run_releases_after_leader_work_ends() -> None:
    api = FakeApi()
    a = LeaderElector(api, fast("a"))
    ran = []

    async def lead() -> None:
        ran.append(a.is_leader)

    await asyncio.wait_for(a.run(lead), 5)
    assert ran == [True]
    assert (await lease(api))["spec"]["holderIdentity"] == ""


async def test_standby_takes_over_after_leader_vanishes() -> None:
    api = FakeApi()
    a = LeaderElector(api, fast("a"))
    b = LeaderElector(api, fast("b"))
    await asyncio.wait_for(a.acquire(), 5)
    # a crashes: never renews, never releases; b waits about one lease duration
    await asyncio.wait_for(b.acquire(), 5)
    assert (await lease(api))["spec"]["holderIdentity"] == "b"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lease_duration": 10.0, "renew_deadline": 10.0}, "greater than renew_deadline"),
        ({"renew_deadline": 2.0, "retry_period": 2.0}, "1.2"),
        ({"retry_period": 0.0}, "positive"),
        ({"lease_duration": -1.0}, "positive"),
    ],
)
def test_config_validation(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LeaderElector(FakeApi(), cfg("a", **kwargs))


@pytest.mark.parametrize(
    ("name", "ns", "ident"), [("", "sys", "a"), ("x", "", "a"), ("x", "s", "")]
)
def test_config_requires_names(name: str, ns: str, ident: str) -> None:
    with pytest.raises(ValueError, match=r"required|empty"):
        LeaderElectionConfig(lease_name=name, lease_namespace=ns, identity=ident).validate()


def test_default_identity_is_hostname_underscore_uuid() -> None:
    host, _, uid = default_identity().rpartition("_")
    assert host
    assert len(uid) == 36
    assert default_identity() != default_identity()
