"""Rate limiters: a token bucket, per-item exponential backoff, and their combination.

The API client throttles itself with a token bucket (``--kube-api-qps``/``--kube-api-burst``),
and the work queue delays retries with controller-runtime's default limiter: the larger of a
per-item exponential backoff (5 ms doubling up to 1000 s) and an overall 10 qps / burst 100
bucket. Times come from an injectable monotonic clock so tests need no sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from typing import Protocol

Clock = Callable[[], float]


class TokenBucket:
    """A token bucket like Go's ``rate.Limiter`` with reservations (tokens may go negative).

    Args:
        qps: tokens added per second; ``<= 0`` disables limiting.
        burst: bucket size; must be positive when limiting.
        clock: monotonic time source in seconds.

    Raises:
        ValueError: if ``qps > 0`` and ``burst < 1``.
    """

    def __init__(self, qps: float, burst: int, *, clock: Clock = time.monotonic) -> None:
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be positive when qps > 0, got {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    @property
    def unlimited(self) -> bool:
        """True when the bucket never delays."""
        return self.qps <= 0

    def reserve(self) -> float:
        """Take one token now and return how long the caller must wait before using it."""
        if self.unlimited:
            return 0.0
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps

    async def wait(self) -> float:
        """Take one token, sleeping as long as needed; returns the time waited."""
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
        return delay


class RateLimiter(Protocol):
    """Decides how long an item waits before it is retried (client-go ``RateLimiter``)."""

    def when(self, item: Hashable) -> float:
        """Delay in seconds for the next retry of ``item`` (counts a failure)."""
        ...

    def forget(self, item: Hashable) -> None:
        """Reset the failure history of ``item``."""
        ...

    def num_requeues(self, item: Hashable) -> int:
        """How many times ``item`` failed since it was last forgotten."""
        ...


class ItemExponentialBackoff:
    """Per-item backoff: ``base * 2**failures``, capped at ``cap`` seconds.

    Args:
        base: first delay in seconds (default 5 ms).
        cap: maximum delay in seconds (default 1000 s).

    Raises:
        ValueError: if ``base`` is not positive or ``cap < base``.
    """

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"need 0 < base <= cap, got base={base} cap={cap}")
        self.base = base
        self.cap = cap
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        """See :meth:`RateLimiter.when`."""
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        if failures >= 64:  # 2**64 * base overflows any cap
            return self.cap
        return min(self.cap, self.base * (2.0**failures))

    def forget(self, item: Hashable) -> None:
        """See :meth:`RateLimiter.forget`."""
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        """See :meth:`RateLimiter.num_requeues`."""
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """Overall limit shared by all items (client-go ``BucketRateLimiter``).

    Args:
        bucket: the token bucket every retry draws from.
    """

    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket

    def when(self, item: Hashable) -> float:
        """See :meth:`RateLimiter.when`."""
        return self.bucket.reserve()

    def forget(self, item: Hashable) -> None:
        """See :meth:`RateLimiter.forget`."""

    def num_requeues(self, item: Hashable) -> int:
        """See :meth:`RateLimiter.num_requeues`."""
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters (client-go ``MaxOfRateLimiter``).

    Args:
        limiters: the limiters consulted on every call.

    Raises:
        ValueError: if no limiter is given.
    """

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("at least one rate limiter is required")
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        """See :meth:`RateLimiter.when`."""
        return max(limiter.when(item) for limiter in self.limiters)

    def forget(self, item: Hashable) -> None:
        """See :meth:`RateLimiter.forget`."""
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        """See :meth:`RateLimiter.num_requeues`."""
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(*, clock: Clock = time.monotonic) -> MaxOfRateLimiter:
    """controller-runtime's default: 5 ms..1000 s per item, and 10 qps / burst 100 overall."""
    return MaxOfRateLimiter(
        ItemExponentialBackoff(0.005, 1000.0),
        BucketRateLimiter(TokenBucket(10.0, 100, clock=clock)),
    )
