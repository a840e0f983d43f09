"""Refill shaping per pool: the replenish hold and the token-bucket refill rate.

Upstream v0.5.6 extensions/controllers/sandboxwarmpool_controller.go, takeRefillTokens and
observeMembersForReplenish; docs/concepts/warm-pools.md.

Both are in-memory and per pool, like upstream: lost on restart and dropped with the pool.
The clock is injectable (monotonic seconds) so tests can step time exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ReplenishHold", "TokenBucket"]

Clock = Callable[[], float]


@dataclass
class ReplenishHold:
    """``--sandbox-warm-pool-replenish-delay``: postpone replacements after members drop.

    Args:
        delay: Seconds to hold after each drop (``<= 0``: never hold).
        clock: Monotonic seconds.
    """

    delay: float
    clock: Clock = time.monotonic
    last_members: int | None = None
    hold_until: float | None = None

    def observe(self, current: int, desired: int) -> float:
        """Record the active member count of this pass; returns the seconds still held (0: none).

        The first observation never holds (initial fills are not delayed); a drop below the
        last count (re)starts the hold; reaching ``desired`` clears it.
        """
        if self.delay <= 0:
            return 0.0
        if self.last_members is None:
            self.last_members = current
            return 0.0
        dropped = current < self.last_members
        self.last_members = current
        if current >= desired:
            self.hold_until = None
            return 0.0
        now = self.clock()
        if dropped:
            self.hold_until = now + self.delay
        if self.hold_until is None:
            return 0.0
        return max(0.0, self.hold_until - now)

    def created(self, count: int) -> None:
        """Count ``count`` successful creates as members (until the next observation)."""
        if self.last_members is not None:
            self.last_members += count


def _ceil_ns(seconds: float) -> float:
    """Round ``seconds`` up to whole nanoseconds (Go durations are integer nanoseconds)."""
    return math.ceil(round(seconds * 1e9, 3)) / 1e9


@dataclass
class TokenBucket:
    """``--sandbox-warm-pool-max-refill-rate``: at most ``rate`` creates per second.

    Capacity is one second of creates (at least one token); a new bucket starts full.

    Args:
        rate: Creates per second (must be > 0; a pool without pacing has no bucket).
        clock: Monotonic seconds.
    """

    rate: float
    clock: Clock = time.monotonic
    tokens: float = -1.0
    updated: float = 0.0

    def __post_init__(self) -> None:
        if not self.rate > 0 or math.isinf(self.rate):
            raise ValueError(f"rate must be a finite number > 0, got {self.rate}")
        if self.tokens < 0:
            self.tokens = self.capacity
            self.updated = self.clock()

    @property
    def capacity(self) -> float:
        """Most tokens the bucket holds: ``max(1, rate)``."""
        return max(1.0, self.rate)

    def _refill(self) -> None:
        now = self.clock()
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
        self.updated = now

    def take(self, wanted: int) -> tuple[int, float]:
        """Take up to ``wanted`` tokens.

        Returns:
            ``(granted, wait)``: how many creates may run now, and, when fewer than wanted,
            the seconds until the next whole token (``0.0`` when all were granted).
        """
        if wanted <= 0:
            return 0, 0.0
        self._refill()
        granted = wanted if self.tokens >= wanted else math.floor(self.tokens)
        self.tokens -= granted
        if granted >= wanted:
            return granted, 0.0
        return granted, _ceil_ns((1.0 - self.tokens) / self.rate)

    def refund(self, count: int) -> None:
        """Give back ``count`` tokens that were granted but not used (capped at capacity)."""
        if count > 0:
            self.tokens = min(self.capacity, self.tokens + count)
