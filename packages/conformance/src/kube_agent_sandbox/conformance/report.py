"""The run's summary: outcomes per spec section, as JSON and as a markdown table.

Like sonobuoy's results, a conformance run must say which parts of the contract hold, not just
"n tests failed": every test names its spec sections, and this module folds the outcomes into a
per-section table next to the JUnit XML pytest writes.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

OUTCOMES = ("passed", "failed", "skipped", "xfailed")


@dataclass
class _Test:
    nodeid: str
    sections: list[str]
    profile: str
    outcome: str = "passed"
    duration: float = 0.0
    message: str = ""


@dataclass
class Collector:
    """Folds pytest's per-phase reports into one outcome per test."""

    cluster_version: str = ""
    tests: dict[str, _Test] = field(default_factory=dict)

    def add(self, result: pytest.TestReport, *, sections: list[str], profile: str) -> None:
        """Take one phase report (setup, call or teardown) of a test.

        Args:
            result: The phase's report.
            sections: The test's spec sections.
            profile: The test's profile.
        """
        test = self.tests.setdefault(result.nodeid, _Test(result.nodeid, sections, profile))
        test.duration += result.duration
        if hasattr(result, "wasxfail") and result.skipped:
            test.outcome = "xfailed"
            test.message = str(result.wasxfail)
        elif result.failed:
            test.outcome = "failed"
            if not test.message:
                test.message = _first_line(result)
        elif result.skipped and test.outcome == "passed":
            test.outcome = "skipped"
            test.message = _first_line(result)

    def summary(self, *, implementation: str, cluster_version: str) -> dict[str, Any]:
        """The JSON summary.

        Args:
            implementation: What was under test (controller command or "installed").
            cluster_version: The API server's version.

        Returns:
            ``{"implementation", "cluster_version", "timestamp", "totals", "sections",
            "tests"}``; ``sections`` maps each spec section to outcome counts.
        """
        totals = dict.fromkeys(OUTCOMES, 0)
        sections: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
        for test in self.tests.values():
            totals[test.outcome] += 1
            for section in test.sections:
                sections[section][test.outcome] += 1
        return {
            "implementation": implementation,
            "cluster_version": cluster_version,
            "timestamp": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "totals": totals,
            "sections": {k: sections[k] for k in sorted(sections, key=_section_key)},
            "tests": [
                {
                    "nodeid": t.nodeid,
                    "profile": t.profile,
                    "sections": t.sections,
                    "outcome": t.outcome,
                    "duration": round(t.duration, 3),
                    **({"message": t.message} if t.message else {}),
                }
                for t in self.tests.values()
            ],
        }


def _first_line(result: pytest.TestReport) -> str:
    text = result.longreprtext or ""
    if result.skipped and isinstance(result.longrepr, tuple):
        text = str(result.longrepr[2])
    lines = [line for line in text.splitlines() if line.strip().startswith("E ")] or [text]
    return lines[0].strip().removeprefix("E").strip()[:300]


def _section_key(section: str) -> tuple[int, list[int]]:
    delta = section.startswith("delta-")
    numbers = [int(n) for n in re.findall(r"\d+", section)]
    return (1 if delta else 0, numbers)


def write_json(summary: dict[str, Any], path: Path) -> None:
    """Write the summary as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n")


DOCS_MARKER = "<!-- conformance-report -->"


def markdown(summary: dict[str, Any], *, title: str = "# Agent Sandbox conformance results") -> str:
    """The summary as a markdown document (header facts, per-section table, failures).

    Args:
        summary: What :meth:`Collector.summary` returned.
        title: First line (empty for none).

    Returns:
        The markdown text.
    """
    totals = summary["totals"]
    lines = [
        *([title, ""] if title else []),
        f"- Implementation: `{summary['implementation']}`",
        f"- Cluster version: `{summary['cluster_version']}`",
        f"- Run: {summary['timestamp']}",
        "- Totals: " + ", ".join(f"{totals[o]} {o}" for o in OUTCOMES),
        "",
        "| Spec section | Passed | Failed | Skipped | XFailed |",
        "|---|---:|---:|---:|---:|",
    ]
    for section, counts in summary["sections"].items():
        name = (
            f"delta §{section.removeprefix('delta-')}"
            if section.startswith("delta-")
            else f"§{section}"
        )
        lines.append(f"| {name} | " + " | ".join(str(counts[o]) for o in OUTCOMES) + " |")
    not_passed = [t for t in summary["tests"] if t["outcome"] in ("failed", "xfailed")]
    if not_passed:
        lines += ["", "Not passed:", "", "| Test | Outcome | Message |", "|---|---|---|"]
        for test in not_passed:
            message = test.get("message", "").replace("|", "\\|")
            lines.append(f"| `{test['nodeid']}` | {test['outcome']} | {message} |")
    return "\n".join(lines) + "\n"


def write_markdown(summary: dict[str, Any], path: Path) -> None:
    """Write :func:`markdown` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(summary))


def embed_in_page(summary: dict[str, Any], page: Path) -> None:
    """Replace what follows the :data:`DOCS_MARKER` line in a docs page with the summary.

    The marker must stand alone on its line (the last such line counts), so the page may
    mention it in running text.

    Raises:
        ValueError: If the page has no marker line.
    """
    lines = page.read_text().splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if line.strip() == DOCS_MARKER]
    if not marks:
        raise ValueError(f"{page} has no {DOCS_MARKER} line")
    head = "".join(lines[: marks[-1]])
    page.write_text(f"{head}{DOCS_MARKER}\n\n{markdown(summary, title='')}")
