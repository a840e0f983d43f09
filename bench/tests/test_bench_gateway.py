"""Unit tests of the gateway scenario's pure parts: reading Server-Timing, the phase rows, and
how bench/run.py selects and sizes the scenario."""

from __future__ import annotations

import pytest
import run
from benchlib.gateway import PHASES, GatewaySizes, Samples, parse_server_timing, phase_rows


def test_server_timing_durations_are_read_in_seconds() -> None:
    header = 'resolve;dur=0.5, claim;dur=12.25, ready;desc="x";dur=40, total;dur=60'
    assert parse_server_timing(header) == pytest.approx(
        {"resolve": 0.0005, "claim": 0.01225, "ready": 0.04, "total": 0.06}
    )


@pytest.mark.parametrize(
    "header",
    ["", "cache", "claim;dur=", "claim;dur=abc", "claim;dur=-1", "bad name;dur=1", ",,"],
)
def test_server_timing_entries_without_a_usable_duration_are_left_out(header: str) -> None:
    assert parse_server_timing(header) == {}


def test_a_phase_named_twice_adds_up() -> None:
    assert parse_server_timing("a;dur=1, a;dur=2") == pytest.approx({"a": 0.003})


def test_samples_keep_the_total_apart_from_the_phases() -> None:
    samples = Samples()
    samples.add_timing("claim;dur=10, total;dur=30")
    samples.add_timing(None)
    samples.add_timing("claim;dur=20, init;dur=5, total;dur=40")
    assert list(samples.phases) == ["claim", "init"]
    assert samples.phases["claim"] == pytest.approx([0.01, 0.02])
    assert samples.phases["init"] == pytest.approx([0.005])
    assert samples.gateway_total == pytest.approx([0.03, 0.04])


def test_phase_rows_follow_the_create_order_then_other_names() -> None:
    rows = phase_rows({"zeta": [0.001], "init": [0.002, 0.004], "resolve": [0.001]})
    assert [r[0] for r in rows] == ["resolve", "init", "zeta"]
    assert rows[1][1] == pytest.approx(3.0)  # p50 in ms
    assert PHASES.index("resolve") < PHASES.index("ready") < PHASES.index("init")


def test_the_pool_covers_every_create_of_a_part_and_the_warm_up() -> None:
    assert GatewaySizes(serial=5, burst=9, concurrency=3).pool == 11
    assert GatewaySizes(serial=20, burst=2, concurrency=2).pool == 22


def test_the_gateway_runs_by_default_and_in_quick() -> None:
    parser = run._parser()
    args = parser.parse_args(["--quick"])
    selected = run._validate(parser, args)
    assert selected[: len(run.COMPARABLE) + 1] == [*run.COMPARABLE, "gateway"]
    assert (args.gateway_serial, args.gateway_burst) == (8, 8)
    assert args.gateway_concurrency == run.QUICK["gateway_concurrency"]


def test_another_controller_runs_the_comparison_scenarios_only() -> None:
    parser = run._parser()
    args = parser.parse_args(["--controller-cmd", "/bin/other"])
    assert run._validate(parser, args) == list(run.COMPARABLE)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gateway", "--gateway-serial", "0"], "--gateway-serial must be at least 1"),
        (["gateway", "--gateway-concurrency", "0"], "--gateway-concurrency must be at least 1"),
        (["gateway", "--controller-cmd", "x"], "run only against this project's controller"),
    ],
)
def test_bad_gateway_options_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        run.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
