"""The warm pool controller's Prometheus metrics: each pool's desired and ready replicas, and
the members it creates.

The replica gauges are read from the pool cache at every scrape (``spec.replicas`` and the
``status.readyReplicas`` the controller last wrote), so they stay right across deletions,
restarts and leader changes. The creation counter is the pool's refill rate.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator
from typing import Final

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from kube_agent_sandbox.controller.runtime import Reader, Request, meta

log = logging.getLogger(__name__)

DESIRED_REPLICAS: Final = "agent_sandbox_warmpool_desired_replicas"
READY_REPLICAS: Final = "agent_sandbox_warmpool_ready_replicas"
MEMBERS_CREATED: Final = "agent_sandbox_warmpool_members_created_total"
_LABELS: Final = ("namespace", "warmpool")


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class PoolReplicaCollector(Collector):
    """The desired and ready replica gauges over the pool cache.

    Args:
        pools: The SandboxWarmPool cache (read at every scrape).
    """

    def __init__(self, pools: Reader) -> None:
        self.pools = pools

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                DESIRED_REPLICAS, "Replicas a warm pool asks for (spec.replicas).", labels=_LABELS
            ),
            GaugeMetricFamily(
                READY_REPLICAS,
                "Ready members of a warm pool (status.readyReplicas).",
                labels=_LABELS,
            ),
        )

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield both gauges with one sample per pool."""
        desired, ready = self._families()
        try:
            for pool in self.pools.iterate():
                m = meta(pool)
                labels = [str(m.get("namespace") or ""), str(m.get("name") or "")]
                desired.add_metric(labels, _int((pool.get("spec") or {}).get("replicas")))
                ready.add_metric(labels, _int((pool.get("status") or {}).get("readyReplicas")))
        except Exception:
            log.exception("cannot list warm pools for their replica metrics")
            desired, ready = self._families()
        yield desired
        yield ready

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """Describe without listing (registration must not touch the cache)."""
        yield from self._families()


class WarmPoolMetrics:
    """The warm pool controller's metrics, registered once per registry.

    Registering again on the same registry (several managers sharing one, as in tests) points
    the replica collector at the new cache and reuses the counter.

    Args:
        registry: Where to register (the manager's, served at ``/metrics``).
        pools: The SandboxWarmPool cache.
    """

    def __init__(self, registry: CollectorRegistry, pools: Reader) -> None:
        existing = _BY_REGISTRY.get(registry)
        if existing is None:
            collector = PoolReplicaCollector(pools)
            registry.register(collector)
            created = Counter(
                MEMBERS_CREATED.removesuffix("_total"),
                "Sandboxes a warm pool created to fill itself.",
                _LABELS,
                registry=registry,
            )
            _BY_REGISTRY[registry] = (collector, created)
        else:
            collector, created = existing
            collector.pools = pools
        self._created = created

    def members_created(self, pool: Request, count: int) -> None:
        """Count ``count`` members created for ``pool``."""
        if count > 0:
            self._created.labels(pool.namespace, pool.name).inc(count)


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, tuple[PoolReplicaCollector, Counter]] = (
    weakref.WeakKeyDictionary()
)
