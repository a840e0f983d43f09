"""The warm pool controller's flags as one frozen value (docs/concepts/warm-pools.md, Flags).

Kept apart from the reconciler so the defaults that stand in for zero or negative flags are
read in one place by every step of a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.config import ControllerOptions

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_RECHECK",
    "STATUS_INTERVAL",
    "WarmPoolSettings",
]

DEFAULT_MAX_BATCH: Final = 300
DEFAULT_GRACE: Final = 300.0
DEFAULT_RECHECK: Final = 60.0
STATUS_INTERVAL: Final = 1.0
"""Seconds between two status writes of one pool that only count members (the controller's
setting; a claim burst would otherwise patch the pool's status for every member it takes)."""


@dataclass(frozen=True, slots=True)
class WarmPoolSettings:
    """The flags the warm pool controller uses (durations in seconds).

    Zero or negative batch size, grace and re-check fall back to upstream's defaults, as a
    reconciler built without them does upstream.
    """

    max_batch_size: int = DEFAULT_MAX_BATCH
    enable_eviction: bool = True
    readiness_grace: float = DEFAULT_GRACE
    unschedulable_recheck: float = DEFAULT_RECHECK
    replenish_delay: float = 0.0
    max_refill_rate: float = 0.0
    status_interval: float = 0.0
    """Coalesce member-count status changes of a pool into one write per this many seconds
    (0: write every change at once); a new ``observedGeneration`` is always written at once."""

    @classmethod
    def from_options(cls, options: ControllerOptions) -> WarmPoolSettings:
        """The settings of parsed controller flags."""
        return cls(
            max_batch_size=options.sandbox_warm_pool_max_batch_size,
            enable_eviction=options.enable_warm_pool_eviction,
            readiness_grace=options.sandbox_warm_pool_readiness_grace_period,
            unschedulable_recheck=options.sandbox_warm_pool_unschedulable_recheck_interval,
            replenish_delay=options.sandbox_warm_pool_replenish_delay,
            max_refill_rate=options.sandbox_warm_pool_max_refill_rate,
            status_interval=STATUS_INTERVAL,
        )

    @property
    def batch(self) -> int:
        """Max creates or deletes per pass."""
        return self.max_batch_size if self.max_batch_size > 0 else DEFAULT_MAX_BATCH

    @property
    def grace(self) -> float:
        """Readiness grace period."""
        return self.readiness_grace if self.readiness_grace > 0 else DEFAULT_GRACE

    @property
    def recheck(self) -> float:
        """Re-check interval while unschedulable members are held."""
        return self.unschedulable_recheck if self.unschedulable_recheck > 0 else DEFAULT_RECHECK
