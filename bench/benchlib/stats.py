"""Pure statistics over measured samples: latency summaries, CDF points, throughput series.

Kept free of I/O so that the numbers a report shows can be unit-tested without a cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
"""The percentiles every latency row reports, besides the maximum."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation; None when empty.

    Args:
        values: Samples, in any order.
        q: Quantile in [0, 1].

    Returns:
        The interpolated quantile.

    Raises:
        ValueError: If ``q`` is outside [0, 1].
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Summary:
    """p50/p90/p99/max of a sample set (None when it is empty).

    Attributes:
        count: Number of samples.
        p50: Median.
        p90: 90th percentile.
        p99: 99th percentile.
        max: Largest sample.
    """

    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    def scaled(self, factor: float) -> Summary:
        """The same summary with every value multiplied (e.g. 1000 for seconds -> ms)."""

        def mul(value: float | None) -> float | None:
            return None if value is None else value * factor

        return Summary(self.count, mul(self.p50), mul(self.p90), mul(self.p99), mul(self.max))

    def items(self) -> list[tuple[str, float | None]]:
        """``(label, value)`` pairs in report order: p50, p90, p99, max."""
        return [("p50", self.p50), ("p90", self.p90), ("p99", self.p99), ("max", self.max)]


def summarize(values: Sequence[float]) -> Summary:
    """The report's latency summary of ``values``."""
    return Summary(
        count=len(values),
        p50=percentile(values, 0.5),
        p90=percentile(values, 0.9),
        p99=percentile(values, 0.99),
        max=max(values) if values else None,
    )


def cdf_points(values: Iterable[float]) -> tuple[list[float], list[float]]:
    """Empirical CDF: sorted values and the fraction of samples at or below each.

    Args:
        values: Samples.

    Returns:
        ``(xs, ys)`` with ``ys`` rising to 1.0; both empty when there are no samples.
    """
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def rate_series(times: Iterable[float], *, bin_seconds: float = 1.0) -> list[tuple[float, float]]:
    """Events per second in consecutive bins, from event times relative to a start.

    Args:
        times: Seconds since the start at which each event happened (negative ones are
            dropped).
        bin_seconds: Width of a bin.

    Returns:
        ``(bin start, events per second)`` for every bin from 0 to the last event, empty bins
        included (a stall shows as zeros).

    Raises:
        ValueError: If ``bin_seconds`` is not positive.
    """
    if bin_seconds <= 0:
        raise ValueError("bin_seconds must be positive")
    counts: dict[int, int] = {}
    for t in times:
        if t >= 0:
            index = int(t // bin_seconds)
            counts[index] = counts.get(index, 0) + 1
    if not counts:
        return []
    return [
        (index * bin_seconds, counts.get(index, 0) / bin_seconds)
        for index in range(max(counts) + 1)
    ]


def sustained_rate(times: Sequence[float], *, trim: float = 0.1) -> float | None:
    """Events per second between the ``trim`` and ``1 - trim`` quantiles of their times.

    The ramp-up and the tail are left out, so the figure is the steady rate, not the average
    over a run that includes the first event's latency and the stragglers.

    Args:
        times: Event times (any origin).
        trim: Fraction left out at each end, in [0, 0.5).

    Returns:
        The rate, or None with fewer than two events inside the window (or a zero-width one).

    Raises:
        ValueError: If ``trim`` is outside [0, 0.5).
    """
    if not 0.0 <= trim < 0.5:
        raise ValueError("trim must be in [0, 0.5)")
    ordered = sorted(times)
    if len(ordered) < 2:
        return None
    first = math.floor(trim * (len(ordered) - 1))
    last = math.ceil((1 - trim) * (len(ordered) - 1))
    span = ordered[last] - ordered[first]
    if last <= first or span <= 0:
        return None
    return (last - first) / span


def ratio(ours: float | None, other: float | None) -> float | None:
    """``other / ours`` for the side-by-side table; None when either is missing or ours is 0."""
    if ours is None or other is None or ours == 0:
        return None
    return other / ours
