"""Write-behind coalescing of Pod metadata patches (``--sandbox-write-behind-window``, upstream
v0.5.6 writeDeferral).

Time is a settable monotonic clock: no sleeps. Off by default; when on, only the metadata
patch of a Pod the Sandbox already controls is deferred, by ``min(window, 1s)``, and the
deferred passes are requeued for the end of the window, where one patch carries every change.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sandbox_fakes import (
    FakeCluster,
    hash_label,
    make_pod,
    make_sandbox,
    request,
)

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import ApiError, FakeApi, Manager, Result
from kube_agent_sandbox.controller.sandbox.reconciler import SandboxReconciler
from kube_agent_sandbox.controller.sandbox.setup import setup
from kube_agent_sandbox.controller.sandbox.writebehind import (
    POD_PATCH_BOUND,
    DeferralClock,
    WriteDeferral,
    effective_window,
)


class Monotonic:
    """A settable monotonic clock (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _relabel(cluster: FakeCluster, value: str, key: str = "app") -> None:
    def change(sandbox: dict[str, Any]) -> None:
        template = sandbox["spec"]["podTemplate"]
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels[key] = value

    cluster.mutate(SANDBOXES, "sandbox-name", change)


def _pod_patches(cluster: FakeCluster) -> list[dict[str, Any]]:
    return [w.body for w in cluster.writes(PODS) if w.verb == "patch"]


def _pod_labels(cluster: FakeCluster) -> dict[str, str]:
    pod = cluster.obj(PODS, "sandbox-name")
    assert pod is not None
    labels: dict[str, str] = pod["metadata"]["labels"]
    return labels


async def _running(
    window: float, **kwargs: Any
) -> tuple[FakeCluster, SandboxReconciler, Monotonic]:
    """A Sandbox whose Pod exists and matches; the returned reconciler defers by ``window``."""
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox(template_labels={"app": "v1"}, **kwargs))
    clock = Monotonic()
    rec = cluster.reconciler(write_behind_window=window, monotonic=clock)
    await rec.reconcile(request())
    assert _pod_labels(cluster)["app"] == "v1"
    cluster.clear_calls()
    return cluster, rec, clock


class TestWindow:
    @pytest.mark.parametrize(
        ("flag", "window"), [(0.0, 0.0), (-1.0, 0.0), (0.3, 0.3), (1.0, 1.0), (5.0, 1.0)]
    )
    def test_effective_window_is_capped_at_one_second(self, flag: float, window: float) -> None:
        assert effective_window(flag) == window
        assert POD_PATCH_BOUND == 1.0

    def test_clock_first_sighting_then_remaining_then_due(self) -> None:
        now = Monotonic()
        clock = DeferralClock(now=now)
        key = ("ns", "a")
        assert clock.observe(key, 0.5) == (False, 0.5)
        now.now += 0.2
        due, wait = clock.observe(key, 0.5)
        assert (due, round(wait, 6)) == (False, 0.3)
        now.now += 0.3
        assert clock.observe(key, 0.5) == (True, 0.0)
        assert clock.pending(key)
        clock.clear(key)
        assert not clock.pending(key)
        assert len(clock) == 0

    def test_deferral_keeps_the_shortest_wait(self) -> None:
        now = Monotonic()
        clock = DeferralClock(now=now)
        deferral = WriteDeferral(clock, ("ns", "a"), 0.5)
        assert deferral.should_write() is False
        now.now += 0.1
        assert deferral.should_write() is False
        assert (deferral.deferred, round(deferral.wait, 6)) == (True, 0.4)


class TestOffByDefault:
    async def test_drift_is_patched_in_the_same_pass(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(template_labels={"app": "v1"}))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        _relabel(cluster, "v2")
        assert await rec.reconcile(request()) == Result()
        assert _pod_labels(cluster)["app"] == "v2"

    def test_flag_defaults_to_zero(self) -> None:
        assert ControllerOptions().sandbox_write_behind_window == 0.0


class TestCoalescing:
    async def test_drifts_within_the_window_flush_as_one_patch(self) -> None:
        cluster, rec, clock = await _running(0.3)
        _relabel(cluster, "v2")
        first = await rec.reconcile(request())
        assert first == Result(requeue_after=0.3)
        assert _pod_patches(cluster) == []
        assert _pod_labels(cluster)["app"] == "v1"

        clock.now += 0.1
        _relabel(cluster, "v3")
        _relabel(cluster, "x", key="extra")
        second = await rec.reconcile(request())
        assert second.requeue_after == pytest.approx(0.2)
        assert _pod_patches(cluster) == []

        clock.now += 0.2
        assert await rec.reconcile(request()) == Result()
        [patch] = _pod_patches(cluster)
        assert patch["metadata"]["labels"] == {"app": "v3", "extra": "x"}
        assert _pod_labels(cluster)["app"] == "v3"

        cluster.clear_calls()
        assert await rec.reconcile(request()) == Result()  # nothing pending: clock cleared
        assert _pod_patches(cluster) == []
        _relabel(cluster, "v4")
        assert await rec.reconcile(request()) == Result(requeue_after=0.3)  # a fresh window

    async def test_window_above_one_second_is_bounded(self) -> None:
        cluster, rec, clock = await _running(30.0)
        _relabel(cluster, "v2")
        assert await rec.reconcile(request()) == Result(requeue_after=1.0)
        clock.now += 0.999
        await rec.reconcile(request())
        assert _pod_patches(cluster) == []
        clock.now += 0.001
        await rec.reconcile(request())
        assert len(_pod_patches(cluster)) == 1

    async def test_status_is_computed_from_the_pod_as_it_will_be(self) -> None:
        cluster, rec, _ = await _running(0.5)
        cluster.set_pod_status("sandbox-name")
        _relabel(cluster, "v2")
        await rec.reconcile(request())
        assert _pod_patches(cluster) == []
        sandbox = cluster.obj(SANDBOXES, "sandbox-name")
        assert sandbox is not None
        ready = next(c for c in sandbox["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"  # readiness does not wait for the deferred write

    async def test_shutdown_timer_and_window_take_the_earlier(self) -> None:
        cluster, rec, _ = await _running(0.4, shutdown_time="2026-01-02T04:04:05Z")
        _relabel(cluster, "v2")
        assert await rec.reconcile(request()) == Result(requeue_after=0.4)

    async def test_slow_retried_error_does_not_stretch_the_window(self) -> None:
        vct = {"metadata": {"name": "data"}, "spec": {}}
        cluster, rec, _ = await _running(0.4, vcts=[vct])
        cluster.store["persistentvolumeclaims"].clear()  # recreated: refused below
        cluster.fail("create", "persistentvolumeclaims", ApiError(422, "Invalid", "bad"))
        _relabel(cluster, "v2")
        assert await rec.reconcile(request()) == Result(requeue_after=0.4)


class TestNotDeferred:
    async def test_adoption_of_an_unowned_pod_is_synchronous(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label()))
        rec = cluster.reconciler(write_behind_window=0.5, monotonic=Monotonic())
        assert await rec.reconcile(request()) == Result()
        pod = cluster.obj(PODS, "sandbox-name")
        assert pod is not None
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Sandbox"

    async def test_pod_create_and_status_are_synchronous(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(template_labels={"app": "v1"}))
        rec = cluster.reconciler(write_behind_window=0.5, monotonic=Monotonic())
        assert await rec.reconcile(request()) == Result()
        assert [w.verb for w in cluster.writes(PODS)] == ["create"]
        verbs = [(w.verb, w.subresource) for w in cluster.writes(SANDBOXES)]
        assert ("patch", "status") in verbs
        assert ("patch", None) in verbs  # the pod-name annotation

    async def test_deleted_sandbox_forgets_its_clock(self) -> None:
        cluster, rec, _ = await _running(0.5)
        _relabel(cluster, "v2")
        await rec.reconcile(request())
        del cluster.store["sandboxes"][("default", "sandbox-name")]
        assert await rec.reconcile(request()) == Result()
        assert len(rec._deferrals) == 0

    async def test_terminating_sandbox_forgets_its_clock(self) -> None:
        cluster, rec, _ = await _running(0.5)
        _relabel(cluster, "v2")
        await rec.reconcile(request())
        cluster.mutate(
            SANDBOXES,
            "sandbox-name",
            lambda s: s["metadata"].update(deletionTimestamp="2026-01-02T03:04:05Z"),
        )
        await rec.reconcile(request())
        assert len(rec._deferrals) == 0


class TestStartupLog:
    def test_enabled_logs_the_window_and_the_bound(self, caplog: pytest.LogCaptureFixture) -> None:
        manager = Manager(FakeApi(), metrics_bind_address="0", health_bind_address="0")
        with caplog.at_level(logging.INFO):
            setup(manager, ControllerOptions(sandbox_write_behind_window=0.3))
        [record] = [
            r
            for r in caplog.records
            if r.getMessage()
            == "Sandbox controller write deferral enabled (--sandbox-write-behind-window)"
        ]
        assert (record.window, record.podPatchBound) == ("300ms", "1s")  # type: ignore[attr-defined]

    def test_off_logs_nothing(self, caplog: pytest.LogCaptureFixture) -> None:
        manager = Manager(FakeApi(), metrics_bind_address="0", health_bind_address="0")
        with caplog.at_level(logging.INFO):
            setup(manager, ControllerOptions())
        assert not [r for r in caplog.records if "write deferral" in r.getMessage()]
