"""Token bucket, per-item backoff and the controller default limiter."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.controller.runtime import (
    ItemExponentialBackoff,
    default_controller_rate_limiter,
)
from kube_agent_sandbox.controller.runtime.ratelimit import (
    BucketRateLimiter,
    MaxOfRateLimiter,
    TokenBucket,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_burst_then_spaces_by_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10.0, 3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.now += 10  # refills, capped at burst
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() > 0


@pytest.mark.parametrize("qps", [0.0, -1.0])
def test_bucket_with_non_positive_qps_is_unlimited(qps: float) -> None:
    bucket = TokenBucket(qps, 1)
    assert bucket.unlimited
    assert all(bucket.reserve() == 0.0 for _ in range(1000))


@pytest.mark.parametrize("burst", [0, -5])
def test_bucket_rejects_non_positive_burst(burst: int) -> None:
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(5.0, burst)


async def test_bucket_wait_sleeps_the_reserved_delay() -> None:
    bucket = TokenBucket(1000.0, 1)
    assert await bucket.wait() == 0.0
    assert await bucket.wait() > 0.0


def test_item_backoff_doubles_to_cap_per_item() -> None:
    backoff = ItemExponentialBackoff(0.005, 1000.0)
    delays = [backoff.when("a") for _ in range(20)]
    assert delays[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert delays[-1] == 1000.0
    assert max(delays) == 1000.0
    assert backoff.when("b") == pytest.approx(0.005)
    assert backoff.num_requeues("a") == 20
    for _ in range(100):
        backoff.when("a")
    assert backoff.when("a") == 1000.0


@pytest.mark.parametrize(("base", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_item_backoff_rejects_bad_bounds(base: float, cap: float) -> None:
    with pytest.raises(ValueError, match="base"):
        ItemExponentialBackoff(base, cap)


def test_max_of_requires_a_limiter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter()


def test_default_limiter_is_max_of_backoff_and_overall_bucket() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock=clock)
    # 100 distinct items: all within the burst, so each gets its own 5 ms
    assert [limiter.when(f"k{i}") for i in range(100)] == pytest.approx([0.005] * 100)
    # the 101st retry overall waits for the 10 qps bucket (0.1 s) rather than 5 ms
    assert limiter.when("k-extra") == pytest.approx(0.1)
    limiter.forget("k0")
    assert limiter.num_requeues("k0") == 0
    assert limiter.num_requeues("k1") == 1


def test_bucket_limiter_counts_no_requeues() -> None:
    limiter = BucketRateLimiter(TokenBucket(1.0, 1))
    limiter.when("a")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
