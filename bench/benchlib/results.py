"""Where a scenario's results go: ``bench/results/<scenario>-<timestamp>.{json,md}`` and its
PNG plots, one set per scenario, with the comparison table when two controllers ran.

The JSON file carries everything needed to judge the numbers later: the machine (cores,
memory, load), Python, Kubernetes and controller versions, the command-line flags, every
row, and the raw series the plots were drawn from. The Markdown summary has one table (or a
side-by-side table with ``ours / other`` ratios) and a PASS/MISS line per target.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchlib import plots
from benchlib.report import BenchResult, environment, format_value, markdown_table
from benchlib.stats import ratio


def comparison_rows(ours: BenchResult, other: BenchResult) -> list[list[str]]:
    """Side-by-side rows: metric, unit, ours, other, ``ours / other``.

    Rows pair by position when both runs produced the same metric names in the same order
    (the same scenario code), else by name; a metric only one run has shows ``n/a`` for the
    other.

    Args:
        ours: This project's controller's result.
        other: The other controller's result.

    Returns:
        The table rows as strings.
    """
    theirs: dict[str, list[float | None]] = {}
    for m in other.metrics:
        theirs.setdefault(m.name, []).append(m.value)
    seen: dict[str, int] = {}
    rows: list[list[str]] = []
    for m in ours.metrics:
        index = seen.get(m.name, 0)
        seen[m.name] = index + 1
        values = theirs.get(m.name, [])
        value = values[index] if index < len(values) else None
        r = ratio(value, m.value)  # ours / other
        rows.append(
            [
                m.name,
                m.unit,
                format_value(m.value),
                format_value(value),
                "n/a" if r is None else f"{r:.2f}",
            ]
        )
    names = {m.name for m in ours.metrics}
    for m in other.metrics:
        if m.name not in names:
            rows.append([m.name, m.unit, "n/a", format_value(m.value), "n/a"])
    return rows


BREAKDOWNS = (
    ("apiserver_requests_per_claim", "warm claim"),
    ("apiserver_requests_per_sandbox", "cold Sandbox"),
)
"""Per-unit request breakdowns a scenario may store in ``details``, and what the unit is."""
BREAKDOWN_ROWS = 12


def breakdown_table(runs: Sequence[BenchResult], key: str, unit: str) -> str | None:
    """kube-apiserver requests per unit by ``VERB resource``, one column per controller.

    Args:
        runs: One result, or ours then the other's.
        key: The breakdown's key in ``details``.
        unit: What one unit is (for the heading).

    Returns:
        A Markdown table of the largest rows (of the first run), or None when no run has it.
    """
    tables = [run.details.get(key) or {} for run in runs]
    if not any(tables):
        return None
    order = list(tables[0]) + [k for t in tables[1:] for k in t if k not in tables[0]]
    labels = [str(run.params.get("controller", "")) for run in runs]
    lines = [
        f"| requests per {unit} | " + " | ".join(labels) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    for name in order[:BREAKDOWN_ROWS]:
        cells = [format_value(t.get(name)) for t in tables]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    if len(order) > BREAKDOWN_ROWS:
        lines.append(f"| ({len(order) - BREAKDOWN_ROWS} more in the JSON) |" + " |" * len(runs))
    return "\n".join(lines)


def _unit(unit: str) -> str:
    return f" {unit}" if unit else ""


def comparison_table(ours: BenchResult, other: BenchResult) -> str:
    """The side-by-side rows as a Markdown table."""
    lines = [
        "| metric | unit | ours | other | ours / other |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [
        "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
        for row in comparison_rows(ours, other)
    ]
    return "\n".join(lines)


def target_lines(result: BenchResult) -> list[str]:
    """``PASS``/``MISS`` lines for every row with a target, and the correctness failures."""
    label = result.params.get("controller", "")
    prefix = f"[{label}] " if label else ""
    lines = [
        f"- {m.status} {prefix}{m.name}: {format_value(m.value)}{_unit(m.unit)} (target {m.target})"
        for m in result.metrics
        if m.status is not None
    ]
    lines += [f"- MISS {prefix}{m.name}: not measured (target {m.target})"
              for m in result.metrics if m.target and m.value is None]  # fmt: skip
    lines += [f"- FAILED {prefix}{f}" for f in result.failures]
    return lines


def render_summary(
    scenario: str,
    runs: Sequence[BenchResult],
    *,
    started: dt.datetime,
    environment_facts: dict[str, Any],
    plot_files: Sequence[Path] = (),
) -> str:
    """The Markdown summary of one scenario (one or two controllers).

    Args:
        scenario: Scenario name.
        runs: One result, or ours then the other's.
        started: When the invocation started.
        environment_facts: :func:`benchlib.report.environment` output.
        plot_files: PNG files to link.

    Returns:
        The Markdown text.
    """
    env = environment_facts
    out = [
        f"# {scenario} — {started.strftime('%Y-%m-%d %H:%M UTC')}",
        "",
        f"Machine: {env['cpus']} CPUs, {env['memory_bytes'] / 2**30:.1f} GiB, "
        f"load average at the end {env['loadavg_at_end']}; Python {env['python']}; "
        f"commit {env['git']}.",
    ]
    for run in runs:
        facts = run.details.get("controller") or {}
        kube = (run.details.get("versions") or {}).get("kubernetes", "unknown")
        out.append(
            f"Controller `{run.params.get('controller', '?')}`: `{facts.get('command', '?')}` "
            f"on Kubernetes {kube}; {run.seconds:.0f} s."
        )
    params = {k: v for k, v in runs[0].params.items() if k != "controller"}
    out += ["", "Parameters: " + ", ".join(f"`{k}={v}`" for k, v in params.items()), ""]
    if len(runs) == 2:
        out += [comparison_table(runs[0], runs[1]), ""]
    else:
        out += [markdown_table(runs[0]), ""]
    for key, unit in BREAKDOWNS:
        table = breakdown_table(runs, key, unit)
        if table is not None:
            out += [table, ""]
    targets = [line for run in runs for line in target_lines(run)]
    if targets:
        out += ["Targets (never a test failure; FAILED lines are correctness failures):", ""]
        out += [*targets, ""]
    notes = [f"- [{r.params.get('controller', '')}] {n}" for r in runs for n in r.notes]
    if notes:
        out += ["Notes:", "", *notes, ""]
    errors = [f"- **{r.params.get('controller', '')} could not complete:** {r.error}"
              for r in runs if r.error]  # fmt: skip
    out += errors
    if plot_files:
        out += ["", *[f"![{p.stem}]({p.name})" for p in plot_files]]
    return "\n".join(out).rstrip() + "\n"


def write_scenario(
    scenario: str,
    runs: Sequence[BenchResult],
    *,
    results_dir: Path,
    started: dt.datetime,
    flags: dict[str, Any],
) -> Path:
    """Write the JSON, Markdown and plots of one scenario; returns the Markdown file.

    Args:
        scenario: Scenario name.
        runs: One result, or ours then the other's.
        results_dir: ``bench/results`` (git-ignored).
        started: When the invocation started (names the files).
        flags: The command-line options, recorded in the JSON.

    Returns:
        The path of ``<scenario>-<timestamp>.md``.
    """
    results_dir.mkdir(parents=True, exist_ok=True)
    base = results_dir / f"{scenario}-{started.strftime('%Y%m%dT%H%M%SZ')}"
    facts = environment()
    series = [
        (str(r.params.get("controller", r.name)), r.details.get("series") or {}) for r in runs
    ]
    made = plots.write_all(series, base, scenario=scenario)
    payload: dict[str, Any] = {
        "scenario": scenario,
        "started": started.isoformat(),
        "environment": facts,
        "flags": flags,
        "controllers": {
            str(r.params.get("controller", "")): {
                **(r.details.get("controller") or {}),
                "kubernetes": (r.details.get("versions") or {}).get("kubernetes"),
            }
            for r in runs
        },
        "results": [asdict(r) for r in runs],
        "plots": [p.name for p in made],
    }
    if len(runs) == 2:
        payload["comparison"] = [
            dict(zip(("metric", "unit", "ours", "other", "ours_over_other"), row, strict=True))
            for row in comparison_rows(runs[0], runs[1])
        ]
    base.with_suffix(".json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    summary = render_summary(
        scenario, runs, started=started, environment_facts=facts, plot_files=made
    )
    target = base.with_suffix(".md")
    target.write_text(summary)
    return target
