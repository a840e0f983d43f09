"""REST resources only the idle reconciler touches: heartbeat Leases and PodMetrics."""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import heartbeat
from kube_agent_sandbox.controller.runtime import Resource

__all__ = ["HEARTBEAT_SELECTOR", "LEASES", "POD_METRICS"]

LEASES: Final = Resource(heartbeat.LEASE_GROUP, "v1", heartbeat.LEASE_PLURAL, "Lease")
POD_METRICS: Final = Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics")
HEARTBEAT_SELECTOR: Final = f"{c.LABEL_HEARTBEAT}=true"
"""Only heartbeat Leases are cached (not node or leader-election Leases)."""
