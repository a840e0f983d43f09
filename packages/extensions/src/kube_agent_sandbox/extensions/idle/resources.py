"""Which Leases the idle reconciler caches (the Lease and PodMetrics descriptors are api-types')."""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as c

__all__ = ["HEARTBEAT_SELECTOR"]

HEARTBEAT_SELECTOR: Final = f"{c.LABEL_HEARTBEAT}=true"
"""Only heartbeat Leases are cached (not node or leader-election Leases)."""
