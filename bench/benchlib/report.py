"""Results of one benchmark run, how they are printed, and the machine they were taken on.

A benchmark returns a :class:`BenchResult`: its parameters and a list of :class:`Metric` rows,
each with an optional target. Targets never fail a run; they are shown as PASS or MISS next to
the measured value so that a reader sees at once where the implementation stands.
:mod:`benchlib.results` writes them to files.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASS = "PASS"
MISS = "MISS"


@dataclass
class Metric:
    """One measured number.

    Attributes:
        name: What was measured.
        value: The number (None when it could not be measured).
        unit: Unit of ``value``.
        target: Human-readable target, e.g. ``<= 150 MiB`` (None: informational).
        status: ``PASS``/``MISS`` against the target, None without one.
        note: How to read the number (e.g. "extrapolated from 2,000 objects").
    """

    name: str
    value: float | None
    unit: str = ""
    target: str | None = None
    status: str | None = None
    note: str = ""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a benchmark; carries what it had measured so far."""

    def __init__(self, result: BenchResult) -> None:
        """Wrap the partial result."""
        super().__init__(result.name)
        self.result = result


def at_most(limit: float) -> Callable[[float], bool]:
    """A target check: the value must not exceed ``limit``."""
    return lambda value: value <= limit


def at_least(limit: float) -> Callable[[float], bool]:
    """A target check: the value must reach ``limit``."""
    return lambda value: value >= limit


@dataclass
class BenchResult:
    """What one benchmark produced.

    Attributes:
        name: Benchmark name (``scale``, ``latency``, ``cache-memory``).
        params: The sizes and options it ran with.
        metrics: Measured rows, in display order.
        details: Extra data for the JSON report (samples, timelines, raw metrics).
        notes: Free-text remarks printed under the table (caveats, problems met).
        error: Why the benchmark could not run or finish (None when it did).
        failures: Correctness failures (a claim lost or bound twice, a create too many): the
            run exits non-zero when any benchmark has one, whatever its speed.
        seconds: Wall time the benchmark took.
    """

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(
        self,
        name: str,
        value: float | None,
        unit: str = "",
        *,
        target: str | None = None,
        check: Callable[[float], bool] | None = None,
        note: str = "",
    ) -> Metric:
        """Append a metric; ``check`` decides PASS/MISS when a value and a target exist.

        Args:
            name: What was measured.
            value: The number, or None when unavailable.
            unit: Unit of the number.
            target: Target text shown in the report.
            check: Predicate on the value that is True when the target is met.
            note: How to read the number.

        Returns:
            The appended metric.
        """
        status = None
        if target is not None and check is not None and value is not None:
            status = PASS if check(value) else MISS
        metric = Metric(name, value, unit, target, status, note)
        self.metrics.append(metric)
        return metric


def format_value(value: float | None) -> str:
    """A number as the tables show it: thousands separators, fewer decimals as it grows."""
    if value is None:
        return "n/a"
    if float(value).is_integer():
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.4f}"


def table_rows(result: BenchResult) -> list[list[str]]:
    """The metric rows of a result as strings: metric, value, unit, target, status, note."""
    return [
        [m.name, format_value(m.value), m.unit, m.target or "", m.status or "", m.note]
        for m in result.metrics
    ]


_HEADER = ["metric", "value", "unit", "target", "status", "note"]


def text_table(result: BenchResult) -> str:
    """A fixed-width table for the terminal."""
    rows = [_HEADER, *table_rows(result)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.rjust(widths[i]) if i == 1 else cell.ljust(widths[i]) for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(result: BenchResult) -> str:
    """The same table in Markdown."""

    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = [
        "| " + " | ".join(_HEADER) + " |",
        "|" + "|".join(["---", "---:", "---", "---", "---", "---"]) + "|",
    ]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in table_rows(result)]
    return "\n".join(lines)


def render_text(result: BenchResult) -> str:
    """Terminal rendering of one result: heading, parameters, table, notes."""
    params = ", ".join(f"{k}={v}" for k, v in result.params.items())
    out = [f"== {result.name} ({result.seconds:.1f}s) {params}".rstrip()]
    if result.metrics:
        out.append(text_table(result))
    out += [f"note: {n}" for n in result.notes]
    out += [f"FAILED: {f}" for f in result.failures]
    if result.error:
        out.append(f"ERROR: {result.error}")
    return "\n".join(out)


def environment() -> dict[str, Any]:
    """Facts about the machine the numbers were taken on."""
    load = os.getloadavg()
    mem_total = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_total = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {
        "git": _git_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_bytes": mem_total,
        "loadavg_at_end": [round(x, 2) for x in load],
    }


def _git_version() -> str:
    """The checked-out commit, with ``-dirty`` when the controller's sources differ from it."""
    repo = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--", "packages/controller/src"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")
