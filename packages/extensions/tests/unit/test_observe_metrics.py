"""The warm pool and idle controllers' metrics: values read from the cache, counters by label."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry

from kube_agent_sandbox.controller.runtime import Obj, Request
from kube_agent_sandbox.extensions.idle.metrics import ACTION_SUSPEND, IdleMetrics
from kube_agent_sandbox.extensions.snapshot.metrics import SnapshotMetrics
from kube_agent_sandbox.extensions.warmpool.metrics import WarmPoolMetrics


class _Pools:
    """The one Reader method the collector uses, over a plain list (or a failure)."""

    def __init__(self, pools: list[Obj] | None) -> None:
        self.pools = pools

    def iterate(self, namespace: str | None = None) -> Iterator[Obj]:
        if self.pools is None:
            raise RuntimeError("cache gone")
        yield from self.pools


def _pool(name: str, replicas: Any, ready: Any) -> Obj:
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"replicas": replicas},
        "status": {} if ready is None else {"readyReplicas": ready},
    }


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_pool_gauges_follow_the_cache_at_every_scrape() -> None:
    registry = CollectorRegistry()
    pools = _Pools([_pool("a", 3, 1), _pool("b", 2, None)])
    WarmPoolMetrics(registry, pools)  # type: ignore[arg-type]
    assert (
        _value(registry, "agent_sandbox_warmpool_desired_replicas", namespace="ns", warmpool="a")
        == 3
    )
    assert (
        _value(registry, "agent_sandbox_warmpool_ready_replicas", namespace="ns", warmpool="a") == 1
    )
    # No status yet, or a value of the wrong type: 0, not an error.
    assert (
        _value(registry, "agent_sandbox_warmpool_ready_replicas", namespace="ns", warmpool="b") == 0
    )
    pools.pools = [_pool("a", "3", True)]
    assert (
        _value(registry, "agent_sandbox_warmpool_desired_replicas", namespace="ns", warmpool="a")
        == 0
    )
    assert (
        _value(registry, "agent_sandbox_warmpool_ready_replicas", namespace="ns", warmpool="b")
        is None
    )


def test_a_failing_cache_yields_empty_gauges_and_the_scrape_goes_on() -> None:
    registry = CollectorRegistry()
    WarmPoolMetrics(registry, _Pools(None))  # type: ignore[arg-type]
    metrics = WarmPoolMetrics(registry, _Pools(None))  # type: ignore[arg-type]
    metrics.members_created(Request("ns", "a"), 2)
    names = {m.name for m in registry.collect()}
    assert "agent_sandbox_warmpool_desired_replicas" in names
    assert (
        _value(
            registry, "agent_sandbox_warmpool_members_created_total", namespace="ns", warmpool="a"
        )
        == 2
    )


def test_registering_again_points_at_the_new_cache_and_keeps_the_counter() -> None:
    registry = CollectorRegistry()
    first = WarmPoolMetrics(registry, _Pools([_pool("a", 1, 1)]))  # type: ignore[arg-type]
    first.members_created(Request("ns", "a"), 1)
    second = WarmPoolMetrics(registry, _Pools([_pool("a", 5, 0)]))  # type: ignore[arg-type]
    second.members_created(Request("ns", "a"), 2)
    second.members_created(Request("ns", "a"), 0)
    assert (
        _value(registry, "agent_sandbox_warmpool_desired_replicas", namespace="ns", warmpool="a")
        == 5
    )
    assert (
        _value(
            registry, "agent_sandbox_warmpool_members_created_total", namespace="ns", warmpool="a"
        )
        == 3
    )


def test_idle_actions_are_counted_by_namespace_action_and_reason() -> None:
    registry = CollectorRegistry()
    IdleMetrics(registry).acted("ns", ACTION_SUSPEND, "IdleSuspended")
    IdleMetrics(registry).acted("ns", ACTION_SUSPEND, "IdleSuspended")
    labels = {"namespace": "ns", "action": "suspend", "reason": "IdleSuspended"}
    assert _value(registry, "agent_sandbox_idle_actions_total", **labels) == 2


def test_finished_snapshots_are_counted_by_namespace_phase_and_reason() -> None:
    registry = CollectorRegistry()
    SnapshotMetrics(registry).finished("ns", "Failed", "SourceDeleted")
    SnapshotMetrics(registry).finished("ns", "Failed", "SourceDeleted")
    labels = {"namespace": "ns", "phase": "Failed", "reason": "SourceDeleted"}
    assert _value(registry, "agent_sandbox_snapshots_finished_total", **labels) == 2
