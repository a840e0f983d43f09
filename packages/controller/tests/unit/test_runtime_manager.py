"""Manager: servers on every replica, leader-gated caches and controllers, graceful stop."""

from __future__ import annotations

import asyncio
import threading
import time

import aiohttp
import pytest

from kube_agent_sandbox.api.rest import LEASES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Controller,
    FakeApi,
    LeaderElectionConfig,
    LeaderElectionLost,
    Manager,
    Request,
    Resource,
    Result,
)
from kube_agent_sandbox.testing.waiting import eventually

THINGS = Resource("example.com", "v1", "things", "Thing")


class Recording:
    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.seen: list[Request] = []
        self.finished: list[Request] = []
        self.gate = gate

    async def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        if self.gate is not None:
            await self.gate.wait()
        self.finished.append(request)
        return Result()


class Runnable:
    def __init__(self, log: list[str], name: str) -> None:
        self.log = log
        self.name = name

    async def start(self) -> None:
        self.log.append(f"start {self.name}")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")


def election(identity: str) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        lease_name="mgr-lock",
        lease_namespace="sys",
        identity=identity,
        lease_duration=1.0,
        renew_deadline=0.5,
        retry_period=0.05,
    )


def manager(api: FakeApi, rec: Recording, *, identity: str | None = None, **kw: object) -> Manager:
    mgr = Manager(
        api,
        leader_election=election(identity) if identity else None,
        metrics_bind_address="127.0.0.1:0",
        health_bind_address="127.0.0.1:0",
        **kw,  # type: ignore[arg-type]
    )
    mgr.add_controller(Controller("things", for_resource=THINGS, reconciler=rec, workers=2))
    return mgr


async def http_get(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as resp,
    ):
        return resp.status, await resp.text()


async def test_runs_controllers_serves_probes_and_metrics() -> None:
    api = FakeApi()
    await api.create(THINGS, "ns", {"metadata": {"name": "t1"}})
    rec = Recording()
    mgr = manager(api, rec)
    run = asyncio.create_task(mgr.run())
    try:
        await eventually(mgr.controllers_started.is_set)
        await eventually(lambda: Request("ns", "t1") in rec.finished)
        await api.create(THINGS, "ns", {"metadata": {"name": "t2"}})
        await eventually(lambda: Request("ns", "t2") in rec.finished)
        assert mgr.health_server is not None
        assert mgr.metrics_server is not None
        assert await http_get(mgr.health_server.port, "/healthz") == (200, "ok")
        assert await http_get(mgr.health_server.port, "/readyz") == (200, "ok")
        status, text = await http_get(mgr.metrics_server.port, "/metrics")
        assert status == 200
        assert 'controller_runtime_reconcile_total{controller="things",result="success"}' in text
        assert 'workqueue_depth{name="things"}' in text
    finally:
        mgr.request_stop()
        await asyncio.wait_for(run, 10)


async def test_readyz_fails_until_caches_sync() -> None:
    api = FakeApi()
    api.errors[("list", "things")] = ApiError(500, "InternalError", "not yet")
    rec = Recording()
    mgr = manager(api, rec)
    blocked = asyncio.Event()

    def block_lists(verb: str, *_: object) -> None:
        if verb == "list" and not blocked.is_set():
            raise ApiError(503, "ServiceUnavailable", "still starting")

    api.on_request = block_lists
    run = asyncio.create_task(mgr.run())
    try:
        await eventually(lambda: mgr.health_server is not None and mgr.leading.is_set())
        assert mgr.health_server is not None
        status, text = await http_get(mgr.health_server.port, "/readyz")
        assert status == 500
        assert "informers-synced" in text
        blocked.set()
        await eventually(mgr.controllers_started.is_set)
        assert (await http_get(mgr.health_server.port, "/readyz"))[0] == 200
    finally:
        mgr.request_stop()
        await asyncio.wait_for(run, 10)


async def test_only_the_leader_reconciles_and_release_hands_over() -> None:
    api = FakeApi()
    await api.create(THINGS, "ns", {"metadata": {"name": "t1"}})
    log: list[str] = []
    rec_a, rec_b = Recording(), Recording()
    mgr_a = manager(api, rec_a, identity="a")
    mgr_b = manager(api, rec_b, identity="b")
    for name, mgr in (("a", mgr_a), ("b", mgr_b)):
        mgr.add_runnable(Runnable(log, f"webhook-{name}"))
        mgr.add_runnable(Runnable(log, f"leader-{name}"), needs_leader=True)
    run_a = asyncio.create_task(mgr_a.run())
    await eventually(mgr_a.controllers_started.is_set)
    run_b = asyncio.create_task(mgr_b.run())
    try:
        await eventually(lambda: "start webhook-b" in log)
        await asyncio.sleep(0.3)  # b keeps retrying the held lease
        assert not mgr_b.leading.is_set()
        assert "start leader-b" not in log
        assert rec_b.seen == []
        assert mgr_b.health_server is not None
        assert (await http_get(mgr_b.health_server.port, "/readyz"))[0] == 200  # standby ready
        assert Request("ns", "t1") in rec_a.finished

        mgr_a.request_stop()
        await asyncio.wait_for(run_a, 10)
        assert (await api.get(LEASES, "sys", "mgr-lock"))["spec"]["holderIdentity"] in ("", "b")
        await eventually(mgr_b.controllers_started.is_set, within=5)
        await eventually(lambda: Request("ns", "t1") in rec_b.finished)
        assert log.index("stop leader-a") < log.index("stop webhook-a")
        assert "start leader-b" in log
    finally:
        mgr_a.request_stop()
        mgr_b.request_stop()
        await asyncio.wait_for(asyncio.gather(run_a, run_b, return_exceptions=True), 10)


async def test_losing_the_lease_stops_controllers_and_raises() -> None:
    api = FakeApi()
    rec = Recording()
    mgr = manager(api, rec, identity="a")
    log: list[str] = []
    mgr.add_runnable(Runnable(log, "leader"), needs_leader=True)
    run = asyncio.create_task(mgr.run())
    await eventually(mgr.controllers_started.is_set)

    def fail_updates(verb: str, *_: object) -> None:
        if verb == "update":
            raise ApiError(500, "InternalError", "etcd gone")

    api.on_request = fail_updates
    with pytest.raises(LeaderElectionLost):
        await asyncio.wait_for(run, 10)
    assert log == ["start leader", "stop leader"]
    assert mgr.controllers_started.is_set()
    assert all(c.queue.shutting_down for c in mgr.controllers)


async def test_graceful_stop_finishes_in_flight_reconcile() -> None:
    api = FakeApi()
    await api.create(THINGS, "ns", {"metadata": {"name": "slow"}})
    gate = asyncio.Event()
    rec = Recording(gate)
    mgr = manager(api, rec, graceful_shutdown_timeout=5.0)
    run = asyncio.create_task(mgr.run())
    await eventually(lambda: rec.seen == [Request("ns", "slow")])
    mgr.request_stop()
    await asyncio.sleep(0.05)
    assert not run.done()  # waiting for the in-flight reconcile
    gate.set()
    await asyncio.wait_for(run, 10)
    assert rec.finished == [Request("ns", "slow")]


async def test_stop_before_leadership_returns_cleanly() -> None:
    api = FakeApi()
    holder = manager(api, Recording(), identity="holder")
    run_holder = asyncio.create_task(holder.run())
    await eventually(holder.controllers_started.is_set)
    waiting = manager(api, Recording(), identity="waiter")
    run_waiting = asyncio.create_task(waiting.run())
    await asyncio.sleep(0.1)
    waiting.request_stop()
    await asyncio.wait_for(run_waiting, 5)
    assert not waiting.leading.is_set()
    holder.request_stop()
    await asyncio.wait_for(run_holder, 5)


async def test_reader_and_informer_options() -> None:
    api = FakeApi()
    mgr = Manager(api, metrics_bind_address="0", health_bind_address="0")
    pods = Resource("", "v1", "pods", "Pod")
    inf = mgr.informer(pods, label_selector="a=b")
    assert mgr.reader(pods) is inf
    assert mgr.informer(pods, label_selector="a=b") is inf
    with pytest.raises(ValueError, match="other options"):
        mgr.informer(pods, label_selector="c=d")
    mgr.add_controller(Controller("c", for_resource=pods, reconciler=Recording()))
    with pytest.raises(ValueError, match="already added"):
        mgr.add_controller(Controller("c", for_resource=pods, reconciler=Recording()))
    assert mgr.event_recorder("x").reporting_controller == "x"


async def test_manager_serves_the_client_metric_set() -> None:
    from kube_agent_sandbox.controller.runtime import ApiClient, ClusterConfig, RuntimeMetrics

    metrics = RuntimeMetrics()
    client = ApiClient(ClusterConfig(host="http://127.0.0.1:1"), metrics=metrics)
    mgr = Manager(client, metrics_bind_address="0", health_bind_address="0")
    assert mgr.metrics is metrics
    ctrl = Controller("bound", for_resource=THINGS, reconciler=Recording())
    mgr.add_controller(ctrl)
    ctrl.queue.add(Request("ns", "x"))
    assert metrics.registry.get_sample_value("workqueue_adds_total", {"name": "bound"}) == 1
    explicit = RuntimeMetrics()
    own = Controller("own", for_resource=THINGS, reconciler=Recording(), metrics=explicit)
    mgr.add_controller(own)
    own.queue.add(Request("ns", "x"))
    assert explicit.registry.get_sample_value("workqueue_adds_total", {"name": "own"}) == 1
    assert metrics.registry.get_sample_value("workqueue_adds_total", {"name": "own"}) is None
    await client.close()


async def test_sigterm_stops_gracefully() -> None:
    import os
    import signal

    api = FakeApi()
    await api.create(THINGS, "ns", {"metadata": {"name": "t1"}})
    rec = Recording()
    mgr = manager(api, rec, identity="sig")
    run = asyncio.create_task(mgr.run_until_signal())
    await eventually(lambda: Request("ns", "t1") in rec.finished)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(run, 10)
    lease = await api.get(LEASES, "sys", "mgr-lock")
    assert lease["spec"]["holderIdentity"] == ""  # released on the way out
    assert all(c.queue.shutting_down for c in mgr.controllers)


async def test_lease_is_renewed_through_the_leader_election_client() -> None:
    api, lease_api = FakeApi(), FakeApi()
    await api.create(THINGS, "ns", {"metadata": {"name": "t1"}})
    rec = Recording()
    mgr = manager(api, rec, identity="me", leader_election_client=lease_api)
    run = asyncio.create_task(mgr.run())
    try:
        await eventually(lambda: Request("ns", "t1") in rec.finished)
        renewals = len(lease_api.calls)
        await eventually(lambda: len(lease_api.calls) > renewals + 2)  # renewing
    finally:
        mgr.request_stop()
        await asyncio.wait_for(run, 10)
    assert {call.plural for call in lease_api.calls} == {"leases"}
    assert [call for call in api.calls if call.plural == "leases"] == []


async def test_leader_election_can_run_on_a_thread_of_its_own() -> None:
    api, lease_api = FakeApi(), FakeApi()
    await api.create(THINGS, "ns", {"metadata": {"name": "t1"}})
    threads: set[str] = set()
    lease_api.on_request = lambda *_: threads.add(threading.current_thread().name)
    rec = Recording()
    mgr = manager(api, rec, identity="me", leader_election_client_factory=lambda: lease_api)
    run = asyncio.create_task(mgr.run())
    try:
        await eventually(lambda: Request("ns", "t1") in rec.finished)
        renewals = len(lease_api.calls)
        await eventually(lambda: len(lease_api.calls) > renewals + 2)
        # a reconcile hogging the manager's loop does not stop the renewals
        hog_started = len(lease_api.calls)
        time.sleep(0.3)  # noqa: ASYNC251 - blocks the manager's loop on purpose
        assert len(lease_api.calls) > hog_started
    finally:
        mgr.request_stop()
        await asyncio.wait_for(run, 10)
    assert threads == {"leader-election"}
    lease = lease_api.obj(LEASES, "mgr-lock", "sys")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == ""  # released on the way out
