"""Holding back status changes that only report progress towards Ready
(``--sandbox-status-coalesce-window``): one write when the Pod is Ready within the window,
the held change written once the window is over, never a held Ready, error or suspension."""

from __future__ import annotations

from typing import Any

import pytest
from sandbox_fakes import FakeCluster, conditions_by_type, make_sandbox, request

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.sandbox.reconciler import SandboxReconciler
from kube_agent_sandbox.controller.sandbox.status import progress_only

WINDOW = 0.5


class Monotonic:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _status_writes(cluster: FakeCluster) -> int:
    return sum(1 for call in cluster.writes(SANDBOXES) if call.subresource == "status")


def _setup(window: float = WINDOW) -> tuple[FakeCluster, Monotonic, SandboxReconciler]:
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox())
    clock = Monotonic()
    rec = cluster.reconciler(status_coalesce_window=window, monotonic=clock)
    return cluster, clock, rec


async def test_a_pod_ready_within_the_window_costs_one_status_write() -> None:
    cluster, clock, rec = _setup()
    first = await rec.reconcile(request())
    assert _status_writes(cluster) == 0
    assert first.requeue_after == pytest.approx(WINDOW)
    clock.now += 0.1
    cluster.set_pod_status("sandbox-name")
    await rec.reconcile(request())
    assert _status_writes(cluster) == 1
    stored = cluster.obj(SANDBOXES, "sandbox-name")
    assert stored is not None
    conditions = conditions_by_type(stored)
    assert conditions["Ready"]["status"] == "True"
    assert conditions["PodScheduled"]["status"] == "True"
    assert conditions["Suspended"]["status"] == "False"


async def test_a_held_change_is_written_when_the_window_is_over() -> None:
    cluster, clock, rec = _setup()
    await rec.reconcile(request())
    clock.now += 0.2
    cluster.set_pod_status("sandbox-name", ready=False, phase="Pending")  # scheduled only
    held = await rec.reconcile(request())
    assert _status_writes(cluster) == 0
    assert held.requeue_after == pytest.approx(WINDOW - 0.2)  # counted from the first change
    clock.now += 0.3
    await rec.reconcile(request())
    assert _status_writes(cluster) == 1
    stored = cluster.obj(SANDBOXES, "sandbox-name")
    assert stored is not None
    conditions = conditions_by_type(stored)
    assert conditions["Ready"]["reason"] == "DependenciesNotReady"
    assert conditions["PodScheduled"]["status"] == "True"


async def test_an_expiry_inside_the_window_starts_from_the_held_status() -> None:
    # Pass 1 holds [Suspended, PodScheduled, Ready]; the Sandbox expires before the window
    # ends. Its expiry write must look as if the held status had been written: Suspended
    # kept, PodScheduled removed, Ready SandboxExpired (as upstream's two writes leave it).
    cluster, clock, rec = _setup()
    await rec.reconcile(request())
    assert _status_writes(cluster) == 0
    cluster.mutate(
        SANDBOXES, "sandbox-name", lambda s: s["spec"].update(shutdownTime="2026-01-01T00:00:00Z")
    )
    clock.now += 0.1
    await rec.reconcile(request())
    assert _status_writes(cluster) == 1
    stored = cluster.obj(SANDBOXES, "sandbox-name")
    assert stored is not None
    assert [cond["type"] for cond in stored["status"]["conditions"]] == ["Suspended", "Ready"]
    assert conditions_by_type(stored)["Ready"]["reason"] == "SandboxExpired"


async def test_window_zero_writes_every_change_at_once() -> None:
    cluster, _, rec = _setup(window=0.0)
    await rec.reconcile(request())
    assert _status_writes(cluster) == 1


def _status(
    ready: tuple[str, str] | None, suspended: str = "False", **extra: object
) -> dict[str, Any]:
    conditions = [{"type": "Suspended", "status": suspended, "reason": "NotSuspended"}]
    if suspended == "True":
        conditions[0]["reason"] = "PodTerminated"
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready[0], "reason": ready[1]})
    return {"conditions": conditions, **extra}


WAITING = ("False", "DependenciesNotReady")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ({}, _status(WAITING), True),
        (_status(WAITING), _status(WAITING, nodeName="n1"), True),
        (_status(WAITING), _status(("True", "DependenciesReady")), False),
        (_status(("True", "DependenciesReady")), _status(WAITING), False),
        (_status(WAITING), _status(("False", "ReconcilerError")), False),
        (_status(("False", "ReconcilerError")), _status(WAITING), False),
        (_status(WAITING), _status(("False", "SandboxSuspended"), suspended="True"), False),
        (_status(WAITING), _status(WAITING, suspended="True"), False),
        ({}, {"conditions": []}, False),
    ],
)
def test_progress_only(old: dict[str, Any], new: dict[str, Any], expected: bool) -> None:
    assert progress_only(old, new) is expected


def test_a_finished_condition_is_never_progress_only() -> None:
    new = _status(WAITING)
    new["conditions"].append({"type": "Finished", "status": "True", "reason": "PodSucceeded"})
    assert progress_only(_status(WAITING), new) is False
