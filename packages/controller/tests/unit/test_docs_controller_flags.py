"""docs/reference/controller-flags.md documents every flag, with its default.

The page is hand-written (it explains how each flag maps onto this implementation), so this
test keeps it from drifting from the flag set (generated from ``ControllerOptions``, plus the
zap logging flags).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from kube_agent_sandbox.controller.config import ControllerOptions, build_flagset

_PAGE = Path(__file__).resolve().parents[4] / "docs" / "reference" / "controller-flags.md"
_FLAGS = sorted(build_flagset("agent-sandbox-controller").flags)


def _table_rows() -> dict[str, str]:
    """Flag name -> its row in the Flags table (rows naming two flags count for both)."""
    rows: dict[str, str] = {}
    for line in _PAGE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `-"):
            continue
        first_cell = line.split("|")[1]
        for name in re.findall(r"`--?([a-z0-9-]+)`", first_cell):
            rows[name] = line
    return rows


@pytest.mark.parametrize("flag", _FLAGS)
def test_every_flag_has_a_row(flag: str) -> None:
    assert flag in _table_rows(), f"--{flag} is missing from {_PAGE.name}"


@pytest.mark.parametrize(
    "flag",
    [
        "sandbox-write-behind-window",
        "sandbox-warm-pool-replenish-delay",
        "sandbox-warm-pool-max-refill-rate",
        "sandbox-warm-pool-readiness-grace-period",
        "sandbox-warm-pool-unschedulable-recheck-interval",
    ],
)
def test_v056_flags_show_their_default(flag: str) -> None:
    option = next(
        f for f in dataclasses.fields(ControllerOptions) if f.metadata.get("flag") == flag
    )
    default = {0.0: "`0`", 300.0: "`5m`", 60.0: "`1m`"}[option.default]
    assert _table_rows()[flag].split("|")[2].strip() == default


def test_no_row_names_an_unknown_flag() -> None:
    unknown = set(_table_rows()) - set(_FLAGS) - {"h", "help"}
    assert unknown == set()
