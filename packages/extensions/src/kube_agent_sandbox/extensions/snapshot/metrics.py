"""The snapshot controller's Prometheus metrics: snapshots that ended, by phase and reason; the
state keeper's snapshots it deleted, by why."""

from __future__ import annotations

import weakref
from typing import Final

from prometheus_client import Counter
from prometheus_client.registry import CollectorRegistry

SNAPSHOTS_FINISHED: Final = "agent_sandbox_snapshots_finished_total"
SNAPSHOTS_DELETED: Final = "agent_sandbox_suspend_snapshots_deleted_total"

_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, tuple[Counter, Counter]] = (
    weakref.WeakKeyDictionary()
)


class SnapshotMetrics:
    """The counters, registered once per registry.

    Args:
        registry: Where to register (the manager's, served at ``/metrics``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        counters = _BY_REGISTRY.get(registry)
        if counters is None:
            counters = (
                Counter(
                    SNAPSHOTS_FINISHED.removesuffix("_total"),
                    "SandboxSnapshots that became Ready or Failed, by namespace, phase and reason.",
                    ["namespace", "phase", "reason"],
                    registry=registry,
                ),
                Counter(
                    SNAPSHOTS_DELETED.removesuffix("_total"),
                    "SandboxSnapshots saved on suspend that the state keeper deleted, by "
                    "namespace and reason (Superseded, SandboxDeleted).",
                    ["namespace", "reason"],
                    registry=registry,
                ),
            )
            _BY_REGISTRY[registry] = counters
        self._finished, self._deleted = counters

    def finished(self, namespace: str, phase: str, reason: str) -> None:
        """Count one snapshot that reached a final phase."""
        self._finished.labels(namespace, phase, reason).inc()

    def deleted(self, namespace: str, reason: str) -> None:
        """Count one snapshot saved on suspend that the state keeper deleted."""
        self._deleted.labels(namespace, reason).inc()
