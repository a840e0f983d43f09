"""The idle controller's Prometheus metric: the suspensions and deletions it made."""

from __future__ import annotations

import weakref
from typing import Final

from prometheus_client import Counter
from prometheus_client.registry import CollectorRegistry

IDLE_ACTIONS: Final = "agent_sandbox_idle_actions_total"
ACTION_SUSPEND: Final = "suspend"
ACTION_DELETE: Final = "delete"

_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


class IdleMetrics:
    """The idle controller's counter, registered once per registry.

    Args:
        registry: Where to register (the manager's, served at ``/metrics``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        counter = _BY_REGISTRY.get(registry)
        if counter is None:
            counter = Counter(
                IDLE_ACTIONS.removesuffix("_total"),
                "Sandboxes the idle controller suspended or deleted, by namespace, action and "
                "reason (IdleSuspended, TimeoutSuspended, IdleDeleted).",
                ["namespace", "action", "reason"],
                registry=registry,
            )
            _BY_REGISTRY[registry] = counter
        self._actions = counter

    def acted(self, namespace: str, action: str, reason: str) -> None:
        """Count one suspension or deletion."""
        self._actions.labels(namespace, action, reason).inc()
