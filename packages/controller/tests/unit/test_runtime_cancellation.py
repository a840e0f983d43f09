"""Cancellation and bad reconciler results against controller-runtime's contract.

A lost lease cancels in-flight reconciles at once and never starts controllers late; a
cancelled run leaves no lease candidate or stop waiter behind; a reconciler that returns no
Result or meets a foreign cancellation is an error, not a dead worker; stopping still cancels.
"""

from __future__ import annotations

import asyncio

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


class Blocking:
    """A reconciler that blocks on a gate and records whether it was cancelled."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.seen: list[Request] = []
        self.finished: list[Request] = []
        self.cancelled: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled.append(request)
            raise
        self.finished.append(request)
        return Result()


def manager(api: FakeApi, rec: Blocking, identity: str, **kw: object) -> Manager:
    mgr = Manager(
        api,
        leader_election=LeaderElectionConfig(
            lease_name="review-lock",
            lease_namespace="sys",
            identity=identity,
            lease_duration=1.0,
            renew_deadline=0.5,
            retry_period=0.05,
        ),
        metrics_bind_address="0",
        health_bind_address="0",
        **kw,  # type: ignore[arg-type]
    )
    mgr.add_controller(Controller("things", for_resource=THINGS, reconciler=rec))
    return mgr


def fail_lease_updates(verb: str, *_: object) -> None:
    if verb == "update":
        raise ApiError(500, "InternalError", "etcd gone")


def tasks_running(qualname: str) -> list[asyncio.Task[object]]:
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and getattr(t.get_coro(), "__qualname__", "") == qualname
    ]


async def test_lost_lease_cancels_in_flight_reconciles_without_grace() -> None:
    # controller-runtime drops the graceful shutdown timeout when the Lease is lost: another
    # replica may already lead, so in-flight reconciles must not go on writing.
    api = FakeApi()
    await api.create(THINGS, "ns", {"metadata": {"name": "slow"}})
    rec = Blocking()
    mgr = manager(api, rec, "a", graceful_shutdown_timeout=3600.0)
    run = asyncio.create_task(mgr.run())
    await eventually(lambda: rec.seen == [Request("ns", "slow")])
    api.on_request = fail_lease_updates
    with pytest.raises(LeaderElectionLost):
        await asyncio.wait_for(run, 10)
    assert rec.cancelled == [Request("ns", "slow")]
    assert rec.finished == []
    assert not rec.gate.is_set()


async def test_lease_lost_while_caches_sync_never_starts_controllers() -> None:
    api = FakeApi()
    # the first LIST keeps failing, so the caches are still syncing when the Lease is lost
    api.fail("list", "things", *[ApiError(500, "InternalError", "slow")] * 50)
    rec = Blocking()
    mgr = manager(api, rec, "a")
    run = asyncio.create_task(mgr.run())
    await eventually(mgr.leading.is_set)
    api.on_request = fail_lease_updates
    with pytest.raises(LeaderElectionLost):
        await asyncio.wait_for(run, 10)
    assert not mgr.controllers_started.is_set()
    assert rec.seen == []


async def test_cancelled_run_leaves_no_candidate_acquiring_the_lease() -> None:
    api = FakeApi()
    holder = manager(api, Blocking(), "holder")
    run_holder = asyncio.create_task(holder.run())
    await eventually(holder.controllers_started.is_set)
    waiting = manager(api, Blocking(), "waiter")
    run_waiting = asyncio.create_task(waiting.run())
    # the holder's election runs; the waiter's starts beside it and keeps acquiring
    assert len(tasks_running("LeaderElector.run")) == 1
    await eventually(lambda: len(tasks_running("LeaderElector.run")) == 2)
    run_waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run_waiting
    await asyncio.sleep(0)  # let cancelled tasks finish
    # a leaked acquire loop would take the Lease once the holder releases it and never let go
    assert len(tasks_running("LeaderElector.run")) == 1  # the holder's only
    holder.request_stop()
    await asyncio.wait_for(run_holder, 10)
    lease = await api.get(LEASES, "sys", "review-lock")
    assert lease["spec"]["holderIdentity"] == ""


async def test_cancelled_run_leaves_no_stop_waiter_behind() -> None:
    api = FakeApi()
    mgr = manager(api, Blocking(), "a")
    run = asyncio.create_task(mgr.run())
    await eventually(mgr.controllers_started.is_set)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await asyncio.sleep(0)
    assert tasks_running("Event.wait") == []


class ReturnsNothingFirst:
    """Forgets ``return Result()`` on its first call (a common Python slip)."""

    def __init__(self) -> None:
        self.calls: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.calls.append(request)
        if len(self.calls) == 1:
            return None  # type: ignore[return-value]
        return Result()


async def test_a_reconciler_returning_no_result_is_an_error_not_a_dead_worker() -> None:
    rec = ReturnsNothingFirst()
    ctrl = Controller("nothing", for_resource=THINGS, reconciler=rec, workers=1, slow_retry=0.05)
    ctrl.queue.add(Request("ns", "first"))
    ctrl.queue.add(Request("ns", "second"))
    ctrl.start()
    try:
        await eventually(lambda: Request("ns", "second") in rec.calls)
        # a bug: retried, but slowly (after slow_retry, not the 5 ms backoff)
        assert ctrl.queue.num_requeues(Request("ns", "first")) == 1
        await eventually(lambda: rec.calls.count(Request("ns", "first")) == 2)
    finally:
        assert await ctrl.stop(grace=5.0)


class AwaitsACancelledTask:
    """Awaits work of its own that something else cancels (first call only)."""

    def __init__(self) -> None:
        self.calls: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.calls.append(request)
        if len(self.calls) == 1:
            helper = asyncio.create_task(asyncio.sleep(3600))
            asyncio.get_running_loop().call_soon(helper.cancel)
            await helper  # raises CancelledError although this worker is not being stopped
        return Result()


async def test_a_foreign_cancellation_inside_reconcile_is_an_error_not_a_dead_worker() -> None:
    rec = AwaitsACancelledTask()
    ctrl = Controller("foreign-cancel", for_resource=THINGS, reconciler=rec, workers=1)
    ctrl.queue.add(Request("ns", "first"))
    ctrl.queue.add(Request("ns", "second"))
    ctrl.start()
    try:
        await eventually(lambda: Request("ns", "second") in rec.calls)
        await eventually(lambda: rec.calls.count(Request("ns", "first")) == 2)  # retried
        assert ctrl.queue.processing() == frozenset()
    finally:
        assert await ctrl.stop(grace=5.0)


async def test_stopping_still_cancels_an_in_flight_reconcile() -> None:
    rec = Blocking()
    ctrl = Controller("stopping", for_resource=THINGS, reconciler=rec, workers=1)
    ctrl.queue.add(Request("ns", "slow"))
    ctrl.start()
    await eventually(lambda: rec.seen == [Request("ns", "slow")])
    assert not await ctrl.stop(grace=0.0)
    assert rec.cancelled == [Request("ns", "slow")]
    assert ctrl.queue.processing() == frozenset()
    assert ctrl.queue.delayed() == frozenset()  # a stop is not a retried error
