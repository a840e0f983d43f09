"""Unit tests of the soak's log classification and checks (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import soak
from benchlib.clusterenv import error_classes


def _line(error_class: str | None) -> str:
    record = {"level": "error", "msg": "Reconciler error: TimeoutError"}
    if error_class is not None:
        record["errorClass"] = error_class
    return json.dumps(record)


def test_error_lines_are_counted_by_their_error_class() -> None:
    lines = [
        _line("transient"),
        _line("transient"),
        _line("programming"),
        _line(None),
        "2026-12-02 01:00:00 ERROR plain text",
    ]
    assert error_classes(lines) == {"transient": 2, "programming": 1, "unclassified": 2}


def _run(errors: dict[str, int]) -> soak.SoakRun:
    run = soak.SoakRun(options={})
    run.drained = True
    run.log_errors = sum(errors.values())
    run.log_error_classes = errors
    return run


def _log_check(run: soak.SoakRun) -> bool:
    options = soak.SoakOptions(sandboxes=0, out=Path("."))
    return soak.checks(run, options)["no error in the controller log but transient ones"]


def test_only_transient_errors_pass_the_log_check() -> None:
    assert _log_check(_run({})) is True
    assert _log_check(_run({"transient": 82})) is True
    assert _log_check(_run({"transient": 3, "programming": 1})) is False
    assert _log_check(_run({"unclassified": 1})) is False
