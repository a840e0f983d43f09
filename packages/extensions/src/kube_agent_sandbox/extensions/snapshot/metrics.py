"""The snapshot controller's Prometheus metric: snapshots that ended, by phase and reason."""

from __future__ import annotations

import weakref
from typing import Final

from prometheus_client import Counter
from prometheus_client.registry import CollectorRegistry

SNAPSHOTS_FINISHED: Final = "agent_sandbox_snapshots_finished_total"

_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


class SnapshotMetrics:
    """The counter, registered once per registry.

    Args:
        registry: Where to register (the manager's, served at ``/metrics``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        counter = _BY_REGISTRY.get(registry)
        if counter is None:
            counter = Counter(
                SNAPSHOTS_FINISHED.removesuffix("_total"),
                "SandboxSnapshots that became Ready or Failed, by namespace, phase and reason.",
                ["namespace", "phase", "reason"],
                registry=registry,
            )
            _BY_REGISTRY[registry] = counter
        self._finished = counter

    def finished(self, namespace: str, phase: str, reason: str) -> None:
        """Count one snapshot that reached a final phase."""
        self._finished.labels(namespace, phase, reason).inc()
