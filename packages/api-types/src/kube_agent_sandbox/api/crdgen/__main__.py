"""``python -m kube_agent_sandbox.api.crdgen [--check] [--output-dir DIR] [--chart-dir DIR]``.

Writes one CRD file per kind into ``manifests/crds`` of the repository (found by walking up
from the working directory) and the same files into the Helm chart's ``crds/`` folder
(``charts/agent-sandbox/crds``, where Helm installs CRDs from), or with ``--check`` compares
instead and exits 1, printing a diff summary, when a file is missing or differs.
``--output-dir`` and ``--chart-dir`` each select their target; with neither, both defaults
are handled.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from pathlib import Path

from kube_agent_sandbox.api.crdgen.render import render_all

logger = logging.getLogger(__name__)

_DIFF_LINES_SHOWN = 40


def default_output_dir(start: Path | None = None) -> Path:
    """``manifests/crds`` of the nearest enclosing directory that has ``manifests/``."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / "manifests").is_dir():
            return directory / "manifests" / "crds"
    return here / "manifests" / "crds"


def default_chart_crds_dir(start: Path | None = None) -> Path:
    """The Helm chart's ``crds/`` beside the ``manifests/`` of :func:`default_output_dir`."""
    return default_output_dir(start).parents[1] / "charts" / "agent-sandbox" / "crds"


def _diff_summary(name: str, old: str, new: str) -> str:
    diff = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"{name} (on disk)", f"{name} (generated)", n=1
        )
    )
    added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
    shown = "\n".join(diff[:_DIFF_LINES_SHOWN])
    more = f"\n... {len(diff) - _DIFF_LINES_SHOWN} more diff lines" if len(diff) > 40 else ""
    return f"{name}: stale (+{added} -{removed} lines)\n{shown}{more}"


def check(output_dir: Path, rendered: dict[str, str]) -> list[str]:
    """Describe every file in ``output_dir`` that differs from ``rendered`` (empty = fresh)."""
    problems = []
    for name, text in sorted(rendered.items()):
        path = output_dir / name
        if not path.exists():
            problems.append(f"{name}: missing in {output_dir}")
            continue
        current = path.read_text(encoding="utf-8")
        if current != text:
            problems.append(_diff_summary(name, current, text))
    return problems


def write(output_dir: Path, rendered: dict[str, str]) -> list[str]:
    """Write files that changed; return their names."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in sorted(rendered.items()):
        path = output_dir / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(name)
    return written


def main(argv: list[str] | None = None) -> int:
    """Generate or check the CRD files; return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m kube_agent_sandbox.api.crdgen",
        description="Generate the Agent Sandbox CRDs from the pydantic models.",
    )
    parser.add_argument("--check", action="store_true", help="fail if files on disk are stale")
    parser.add_argument("--output-dir", type=Path, default=None, help="default: manifests/crds")
    parser.add_argument(
        "--chart-dir",
        type=Path,
        default=None,
        help="CRD folder of the Helm chart (default: charts/agent-sandbox/crds)",
    )
    args = parser.parse_args(argv)
    targets: list[Path] = []
    if args.output_dir is not None or args.chart_dir is None:
        targets.append(args.output_dir or default_output_dir())
    if args.chart_dir is not None or args.output_dir is None:
        targets.append(args.chart_dir or default_chart_crds_dir())
    rendered = render_all()
    if args.check:
        problems = [problem for target in targets for problem in check(target, rendered)]
        for problem in problems:
            sys.stderr.write(problem + "\n")
        if problems:
            sys.stderr.write(
                f"{len(problems)} CRD file(s) stale; run python -m kube_agent_sandbox.api.crdgen\n"
            )
            return 1
        for target in targets:
            sys.stdout.write(f"{len(rendered)} CRD files in {target} are up to date\n")
        return 0
    for target in targets:
        written = write(target, rendered)
        sys.stdout.write(f"wrote {len(written)} of {len(rendered)} CRD files to {target}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
