"""Unit tests of the benchmark statistics: the numbers every report row is computed with."""

from __future__ import annotations

import pytest
from benchlib.stats import (
    cdf_points,
    percentile,
    rate_series,
    ratio,
    summarize,
    sustained_rate,
)


def test_percentile_interpolates_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 4.0
    assert percentile(values, 0.5) == pytest.approx(2.5)
    assert percentile(values, 0.9) == pytest.approx(3.7)


def test_percentile_of_nothing_is_none_and_bad_quantiles_are_refused() -> None:
    assert percentile([], 0.5) is None
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 1.5)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], -0.1)


def test_summary_reports_p50_p90_p99_max_and_scales_to_ms() -> None:
    values = [i / 1000 for i in range(1, 101)]  # 1..100 ms in seconds
    summary = summarize(values).scaled(1000)
    labels = [label for label, _ in summary.items()]
    assert labels == ["p50", "p90", "p99", "max"]
    assert summary.count == 100
    assert summary.p50 == pytest.approx(50.5)
    assert summary.p90 == pytest.approx(90.1)
    assert summary.p99 == pytest.approx(99.01)
    assert summary.max == pytest.approx(100.0)


def test_summary_of_no_samples_has_no_values() -> None:
    summary = summarize([])
    assert summary.count == 0
    assert all(value is None for _, value in summary.scaled(1000).items())


def test_cdf_rises_to_one_over_sorted_values() -> None:
    xs, ys = cdf_points([3.0, 1.0, 2.0, 2.0])
    assert xs == [1.0, 2.0, 2.0, 3.0]
    assert ys == [0.25, 0.5, 0.75, 1.0]
    assert cdf_points([]) == ([], [])


def test_rate_series_keeps_empty_bins_so_a_stall_shows() -> None:
    series = rate_series([0.1, 0.2, 0.9, 3.5, -1.0], bin_seconds=1.0)
    assert series == [(0.0, 3.0), (1.0, 0.0), (2.0, 0.0), (3.0, 1.0)]
    assert rate_series([0.0, 1.0, 1.5], bin_seconds=2.0) == [(0.0, 1.5)]
    assert rate_series([]) == []
    with pytest.raises(ValueError, match="positive"):
        rate_series([1.0], bin_seconds=0)


def test_sustained_rate_leaves_out_ramp_and_tail() -> None:
    # 11 events one second apart, then a straggler 100 s later: the trimmed window
    # (10th..90th percentile) sees the steady one per second, not the average.
    times = [float(i) for i in range(11)] + [110.0]
    assert sustained_rate(times) == pytest.approx(1.0)
    assert sustained_rate(times, trim=0.0) == pytest.approx(11 / 110)
    assert sustained_rate([1.0]) is None
    assert sustained_rate([2.0, 2.0, 2.0]) is None
    with pytest.raises(ValueError, match="trim"):
        sustained_rate(times, trim=0.5)


def test_ratio_is_other_over_ours_and_none_without_both() -> None:
    assert ratio(2.0, 5.0) == pytest.approx(2.5)
    assert ratio(0.0, 5.0) is None
    assert ratio(None, 5.0) is None
    assert ratio(2.0, None) is None
