"""Unit tests of what a run writes: side-by-side tables, PASS/MISS lines, binding checks,
summaries and plots (Agg, files only)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from benchlib.report import BenchResult, at_most, environment
from benchlib.results import (
    breakdown_table,
    comparison_rows,
    render_summary,
    target_lines,
    write_scenario,
)
from benchlib.workload import check_binding


def _result(label: str, p50: float | None, lost: float) -> BenchResult:
    result = BenchResult("warm-claims", params={"claims": 10, "controller": label})
    result.add("claim->Ready p50", p50, "ms", target="<= 50 ms", check=at_most(50))
    result.add("claims lost", lost, target="0", check=at_most(0))
    result.add("requests per claim", 4.0)
    return result


def test_comparison_pairs_rows_and_gives_ours_over_other() -> None:
    ours, other = _result("ours", 40.0, 0), _result("other", 100.0, 0)
    other.add("only theirs", 1.0)
    rows = comparison_rows(ours, other)
    assert rows[0] == ["claim->Ready p50", "ms", "40", "100", "0.40"]
    assert rows[1][-1] == "n/a"  # 0 lost on both sides: no ratio
    assert rows[2][-1] == "1.00"
    assert rows[-1] == ["only theirs", "", "n/a", "1", "n/a"]


def test_rows_with_the_same_name_pair_in_order() -> None:
    ours = BenchResult("api")
    other = BenchResult("api")
    for result, values in ((ours, (1.0, 2.0)), (other, (3.0, 8.0))):
        for value in values:
            result.add("offered rate", value)
    assert [row[-1] for row in comparison_rows(ours, other)] == ["0.33", "0.25"]


def test_target_lines_say_pass_miss_and_failed() -> None:
    result = _result("ours", 70.0, 2)
    result.add("writes per claim", None, target="<= 10", check=at_most(10))
    result.failures.append("2 claims lost")
    lines = target_lines(result)
    assert "- MISS [ours] claim->Ready p50: 70 ms (target <= 50 ms)" in lines
    assert "- MISS [ours] claims lost: 2 (target 0)" in lines
    assert "- MISS [ours] writes per claim: not measured (target <= 10)" in lines
    assert "- FAILED [ours] 2 claims lost" in lines
    assert not any(line.startswith("- PASS") for line in lines)
    assert target_lines(_result("ours", 10.0, 0))[0].startswith("- PASS")


def _claim(name: str, sandbox: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"sandbox": {"name": sandbox}} if sandbox else {}}


def _sandbox(name: str, owner: str) -> dict[str, Any]:
    ref = {"kind": "SandboxClaim", "name": owner, "controller": True}
    return {"metadata": {"name": name, "ownerReferences": [ref]}}


def test_binding_check_finds_double_and_foreign_bindings() -> None:
    claims = {
        "a": _claim("a", "pool-1"),
        "b": _claim("b", "pool-1"),  # same Sandbox as a
        "c": _claim("c", "pool-2"),  # pool-2 is controlled by claim d
        "d": _claim("d", "pool-3"),
        "e": _claim("e", None),  # not bound yet: neither
    }
    sandboxes = [_sandbox("pool-1", "a"), _sandbox("pool-2", "d"), _sandbox("pool-3", "d")]
    binding = check_binding(claims, sandboxes)
    assert binding.double == ["pool-1"]
    assert binding.foreign == ["b", "c"]
    assert "e" not in binding.bound


def test_clean_binding_has_nothing_to_report() -> None:
    claims = {"a": _claim("a", "pool-1"), "b": _claim("b", "pool-2")}
    binding = check_binding(claims, [_sandbox("pool-1", "a"), _sandbox("pool-2", "b")])
    assert binding.double == []
    assert binding.foreign == []


def test_summary_of_a_comparison_has_both_controllers_and_targets() -> None:
    ours, other = _result("ours", 40.0, 0), _result("other", 100.0, 0)
    other.details["controller"] = {"command": "/opt/upstream/manager --extensions"}
    text = render_summary(
        "warm-claims",
        [ours, other],
        started=dt.datetime(2026, 12, 1, 18, 0, tzinfo=dt.UTC),
        environment_facts=environment(),
    )
    assert "| metric | unit | ours | other | ours / other |" in text
    assert "`/opt/upstream/manager --extensions`" in text
    assert "- PASS [ours] claim->Ready p50: 40 ms (target <= 50 ms)" in text
    assert "- MISS [other] claim->Ready p50: 100 ms (target <= 50 ms)" in text


def test_write_scenario_writes_json_summary_and_plots(tmp_path: Path) -> None:
    ours, other = _result("ours", 40.0, 0), _result("other", 100.0, 0)
    ours.details["series"] = {
        "latency_s": [0.01, 0.02, 0.05],
        "ready_times_s": [0.1, 0.5, 1.2],
        "rss": [{"t": 0.0, "rss_mib": 40.0}, {"t": 1.0, "rss_mib": 42.0}],
    }
    other.details["series"] = {"latency_s": [0.1, 0.2]}
    summary = write_scenario(
        "warm-claims",
        [ours, other],
        results_dir=tmp_path,
        started=dt.datetime(2026, 12, 1, 18, 0, tzinfo=dt.UTC),
        flags={"claims": 10},
    )
    assert summary == tmp_path / "warm-claims-20261201T180000Z.md"
    payload = json.loads(summary.with_suffix(".json").read_text())
    assert payload["flags"] == {"claims": 10}
    assert payload["environment"]["cpus"] >= 1
    assert payload["comparison"][0]["ours_over_other"] == "0.40"
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == [
        "warm-claims-20261201T180000Z-latency-cdf.png",
        "warm-claims-20261201T180000Z-rss.png",
        "warm-claims-20261201T180000Z-throughput.png",
    ]
    assert all((tmp_path / p).read_bytes().startswith(b"\x89PNG") for p in pngs)
    assert sorted(payload["plots"]) == pngs


def test_breakdown_table_has_a_column_per_controller() -> None:
    ours, other = _result("ours", 40.0, 0), _result("other", 100.0, 0)
    ours.details["apiserver_requests_per_claim"] = {"POST sandboxclaims": 1.0, "GET pods": 0.5}
    other.details["apiserver_requests_per_claim"] = {"POST sandboxclaims": 1.0, "PUT leases": 2}
    table = breakdown_table([ours, other], "apiserver_requests_per_claim", "warm claim")
    assert table is not None
    lines = table.splitlines()
    assert lines[0] == "| requests per warm claim | ours | other |"
    assert "| `GET pods` | 0.5000 | n/a |" in lines
    assert "| `PUT leases` | n/a | 2 |" in lines
    assert breakdown_table([ours], "apiserver_requests_per_sandbox", "cold Sandbox") is None
