"""Tests, benchmarks and e2e suites use the runtime through its public package only.

import-linter checks the sources (a protected contract in pyproject.toml); tests are not in its
import graph, so this test reads them. Only the runtime's own white-box tests (and the CLI's
profiling test, which serves the runtime's metrics app) may reach into submodules, for
internals that are not public API.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
SUBMODULE_IMPORT = re.compile(
    r"^\s*(?:from|import) kube_agent_sandbox\.controller\.runtime\.[a-z_]+", re.MULTILINE
)
WHITE_BOX = re.compile(r"^test_runtime_[a-z_]+\.py$|^test_cli_profiling\.py$")


def test_only_the_runtimes_own_tests_import_its_submodules() -> None:
    places = [*ROOT.glob("packages/*/tests/**/*.py"), *ROOT.glob("bench/**/*.py")]
    places += ROOT.glob("e2e/**/*.py")
    offenders = [
        str(path.relative_to(ROOT))
        for path in places
        if not WHITE_BOX.match(path.name) and SUBMODULE_IMPORT.search(path.read_text())
    ]
    assert offenders == []
