"""PNG plots of a scenario run: latency CDF, Ready throughput over time, controller RSS over
time; one line per controller, so a comparison shows both on one chart.

matplotlib runs with the Agg backend (files only, no display). Figures are small (640x360) so
they can be copied into the docs as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from benchlib.stats import cdf_points, rate_series

SIZE = (6.4, 3.6)
DPI = 100

Series = Mapping[str, Any]
"""A result's ``details["series"]``: ``latency_s``, ``ready_times_s``, ``rss`` (t, rss_mib)."""


def latency_cdf(runs: Sequence[tuple[str, Series]], target: Path, *, title: str) -> Path | None:
    """Empirical CDF of ``latency_s`` (ms, log scale) per run; None when no run has any."""
    lines = [(label, s.get("latency_s") or []) for label, s in runs]
    lines = [(label, v) for label, v in lines if v]
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    for label, values in lines:
        xs, ys = cdf_points(v * 1000 for v in values)
        ax.step(xs, ys, where="post", label=f"{label} (n={len(xs)})")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction <= x")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, ax, target, title)


def throughput(runs: Sequence[tuple[str, Series]], target: Path, *, title: str) -> Path | None:
    """Objects turning Ready per second over time, per run; None when no run has any."""
    lines = [(label, s.get("ready_times_s") or []) for label, s in runs]
    lines = [(label, v) for label, v in lines if v]
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    for label, times in lines:
        span = max(times)
        width = max(1.0, span / 60)
        points = rate_series(times, bin_seconds=width)
        ax.plot([t for t, _ in points], [r for _, r in points], label=label, drawstyle="steps-post")
    ax.set_xlabel("seconds since the first create")
    ax.set_ylabel("Ready per second")
    ax.grid(True, alpha=0.3)
    return _save(fig, ax, target, title)


def rss(runs: Sequence[tuple[str, Series]], target: Path, *, title: str) -> Path | None:
    """Controller RSS (MiB) over the run, per run; None when no run has samples."""
    lines = [(label, s.get("rss") or []) for label, s in runs]
    lines = [(label, v) for label, v in lines if v]
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    for label, samples in lines:
        ax.plot([p["t"] for p in samples], [p["rss_mib"] for p in samples], label=label)
    ax.set_xlabel("seconds since the controller started")
    ax.set_ylabel("controller RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    return _save(fig, ax, target, title)


WATERFALL_COLOURS = ("tab:blue", "tab:gray", "tab:olive", "tab:orange")
"""One colour per segment of :data:`benchlib.timeline.SEGMENTS`."""


def waterfall(runs: Sequence[tuple[str, Series]], target: Path, *, title: str) -> Path | None:
    """Per sampled object, its create->Ready segments as stacked bars, one panel per run.

    Status writes seen by the watch are drawn as black ticks, so extra writes show.
    """
    from benchlib.timeline import SEGMENTS

    panels = [(label, s.get("waterfall") or []) for label, s in runs]
    panels = [(label, rows) for label, rows in panels if rows]
    if not panels:
        return None
    height = max(SIZE[1], 0.9 + 0.17 * max(len(rows) for _, rows in panels))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(SIZE[0] * (1 + 0.4 * (len(panels) - 1)), height), dpi=DPI,
        sharex=True, squeeze=False,
    )  # fmt: skip
    for ax, (label, rows) in zip(axes[0], panels, strict=True):
        for y, row in enumerate(rows):
            marks = row["marks_ms"]
            for (segment, start, end), colour in zip(SEGMENTS, WATERFALL_COLOURS, strict=True):
                if start in marks and end in marks:
                    left = marks[start]
                    ax.barh(y, max(0.0, marks[end] - left), left=left, color=colour,
                            label=segment if y == 0 else None)  # fmt: skip
            writes = row.get("status_writes_ms") or []
            ax.plot(writes, [y] * len(writes), "|", color="black", markersize=7,
                    label="status write" if y == 0 else None)  # fmt: skip
        ax.set_yticks(range(len(rows)), [row["name"] for row in rows], fontsize="x-small")
        ax.invert_yaxis()
        ax.set_xlabel("ms after the create was sent")
        ax.set_title(label, fontsize="small")
        ax.grid(True, axis="x", alpha=0.3)
    axes[0][0].legend(loc="lower right", fontsize="x-small")
    fig.suptitle(title)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target)
    plt.close(fig)
    return target


def write_all(runs: Sequence[tuple[str, Series]], base: Path, *, scenario: str) -> list[Path]:
    """Every plot the runs have data for, as ``<base>-<kind>.png``; returns the files written."""
    made = [
        latency_cdf(runs, base.with_name(base.name + "-latency-cdf.png"),
                    title=f"{scenario}: latency CDF"),
        throughput(runs, base.with_name(base.name + "-throughput.png"),
                   title=f"{scenario}: Ready per second"),
        rss(runs, base.with_name(base.name + "-rss.png"), title=f"{scenario}: controller RSS"),
        waterfall(runs, base.with_name(base.name + "-waterfall.png"),
                  title=f"{scenario}: where create->Ready goes (sampled objects)"),
    ]  # fmt: skip
    return [p for p in made if p is not None]


def _save(fig: Any, ax: Any, target: Path, title: str) -> Path:
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target)
    plt.close(fig)
    return target
