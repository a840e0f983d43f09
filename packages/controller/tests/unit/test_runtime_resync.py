"""Periodic resync (``--sync-period``): cached objects come back to the controllers.

A predicate that stops matching (a child whose tracking label was removed) hides a change from
the controller; the resync reconciles every primary object again, so the reconciler sees and
repairs the drift. Also: the flag's default, parsing and validation, and that the manager hands
the period to every informer.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from kube_agent_sandbox.controller.config import ConfigError, ControllerOptions, parse_args
from kube_agent_sandbox.controller.config import validate as validate_options
from kube_agent_sandbox.controller.runtime import (
    Controller,
    EventHandler,
    FakeApi,
    Informer,
    Manager,
    Obj,
    Request,
    Resource,
    Result,
    RuntimeMetrics,
)
from kube_agent_sandbox.testing.waiting import eventually

PARENTS = Resource("example.com", "v1", "parents", "Parent")
CHILDREN = Resource("", "v1", "configmaps", "ConfigMap")
LABEL = "example.com/tracked"


def tracked(old: Obj | None, new: Obj | None) -> bool:
    obj = new if new is not None else old
    return obj is not None and LABEL in ((obj.get("metadata") or {}).get("labels") or {})


class LabelRepairer:
    """Makes sure the child of each parent carries the tracking label."""

    def __init__(self, api: FakeApi, children: Informer) -> None:
        self.api = api
        self.children = children
        self.calls = 0

    async def reconcile(self, request: Request) -> Result:
        self.calls += 1
        child = self.children.get(request.namespace, request.name)
        if child is not None and LABEL not in (child["metadata"].get("labels") or {}):
            patch = {"metadata": {"labels": {LABEL: "yes"}}}
            await self.api.patch(CHILDREN, request.namespace, request.name, patch)
        return Result()


async def run_repair_scenario(sync_period: float, wait: float) -> tuple[FakeApi, LabelRepairer]:
    api = FakeApi(default_namespace="ns")
    parent = api.add(PARENTS, {"metadata": {"name": "p", "namespace": "ns"}})
    owner = {
        "apiVersion": "example.com/v1",
        "kind": "Parent",
        "name": "p",
        "uid": parent["metadata"]["uid"],
        "controller": True,
    }
    api.add(
        CHILDREN,
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "labels": {LABEL: "yes"},
                "ownerReferences": [owner],
            }
        },
    )
    parents = Informer(api, PARENTS, resync_period=sync_period)
    children = Informer(api, CHILDREN, resync_period=sync_period)
    rec = LabelRepairer(api, children)
    ctrl = Controller(
        "parent",
        for_resource=PARENTS,
        reconciler=rec,
        owns=[(CHILDREN, tracked)],
        metrics=RuntimeMetrics(),
    )
    ctrl.register({PARENTS: parents, CHILDREN: children}.__getitem__)
    for inf in (parents, children):
        inf.start()
    try:
        await parents.wait_for_sync()
        await children.wait_for_sync()
        ctrl.start()
        await eventually(lambda: rec.calls >= 1)
        calls = rec.calls
        # another client removes the tracking label: the predicate hides that change
        api.mutate(CHILDREN, "p", lambda o: o["metadata"].pop("labels"))
        await eventually(
            lambda: LABEL not in (children.get("ns", "p") or {})["metadata"].get("labels", {})
        )
        await asyncio.sleep(wait)
        assert rec.calls >= calls
    finally:
        await ctrl.stop(1)
        for inf in (parents, children):
            await inf.stop()
    return api, rec


async def test_without_resync_the_hidden_drift_stays() -> None:
    api, _ = await run_repair_scenario(sync_period=0, wait=0.4)
    assert LABEL not in (api.obj(CHILDREN, "p") or {})["metadata"].get("labels", {})


async def test_resync_repairs_drift_that_no_event_reports() -> None:
    api, rec = await run_repair_scenario(sync_period=0.1, wait=0.4)
    assert (api.obj(CHILDREN, "p") or {})["metadata"]["labels"] == {LABEL: "yes"}
    assert rec.calls >= 2


async def test_resync_dispatches_every_cached_object_as_an_update_of_itself() -> None:
    api = FakeApi(default_namespace="ns")
    for i in range(600):
        api.add(CHILDREN, {"metadata": {"name": f"c{i}", "namespace": "ns"}})
    inf = Informer(api, CHILDREN)
    seen: list[tuple[Obj, Obj]] = []
    inf.add_event_handler(EventHandler(on_update=lambda old, new: seen.append((old, new))))
    inf.start()
    try:
        await inf.wait_for_sync()
        assert await inf.resync() == 600
    finally:
        await inf.stop()
    assert len(seen) == 600
    assert all(old == new for old, new in seen)
    assert len({new["metadata"]["name"] for _, new in seen}) == 600
    assert inf.resyncs == 1


async def test_no_resync_task_when_disabled() -> None:
    api = FakeApi(default_namespace="ns")
    api.add(CHILDREN, {"metadata": {"name": "c", "namespace": "ns"}})
    inf = Informer(api, CHILDREN, resync_period=0)
    updates: list[Obj] = []
    inf.add_event_handler(EventHandler(on_update=lambda old, new: updates.append(new)))
    inf.start()
    try:
        await inf.wait_for_sync()
        await asyncio.sleep(0.2)
    finally:
        await inf.stop()
    assert updates == []
    assert inf.resyncs == 0


def test_manager_gives_every_informer_the_sync_period() -> None:
    manager = Manager(
        FakeApi(), metrics_bind_address="0", health_bind_address="0", sync_period=42.0
    )
    assert manager.informer(PARENTS).resync_period == 42.0
    assert manager.informer(CHILDREN).resync_period == 42.0


def test_sync_period_flag_default_and_go_duration_syntax() -> None:
    assert ControllerOptions().sync_period == 36000.0  # controller-runtime's 10 h
    assert parse_args(["--sync-period=90s"]).sync_period == 90.0
    assert parse_args(["--sync-period=0"]).sync_period == 0.0
    assert parse_args(["--sync-period", "1h30m"]).sync_period == 5400.0


def test_negative_sync_period_is_refused() -> None:
    with pytest.raises(ConfigError, match="sync-period must be >= 0"):
        validate_options(dataclasses.replace(ControllerOptions(), sync_period=-1.0))


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "message"),
    [
        (0.0, 10.0, 2.0, "must be positive"),
        (10.0, 10.0, 2.0, "lease-duration must be greater"),
        (15.0, 2.0, 2.0, "renew-deadline must be greater"),
    ],
)
def test_inconsistent_lease_timings_are_refused(
    lease: float, renew: float, retry: float, message: str
) -> None:
    options = dataclasses.replace(
        ControllerOptions(),
        leader_elect_lease_duration=lease,
        leader_elect_renew_deadline=renew,
        leader_elect_retry_period=retry,
    )
    with pytest.raises(ConfigError, match=message):
        validate_options(options)
    # without leader election the timings do not matter
    validate_options(dataclasses.replace(options, leader_elect=False))


def test_short_lease_timings_are_accepted() -> None:
    options = parse_args(
        [
            "--leader-elect-lease-duration=4s",
            "--leader-elect-renew-deadline=3s",
            "--leader-elect-retry-period=500ms",
        ]
    )
    validate_options(options)
    assert (
        options.leader_elect_lease_duration,
        options.leader_elect_renew_deadline,
        options.leader_elect_retry_period,
    ) == (4.0, 3.0, 0.5)
