"""Unit tests of bench/run.py's option checks: bad input is a usage error (exit 2), before any
cluster starts."""

from __future__ import annotations

import pytest
import run


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compare"], "--compare needs --controller-cmd"),
        (["--controller-cmd", "  "], "--controller-cmd is empty"),
        (["scale", "--controller-cmd", "x"], "run only against this project's controller"),
        (["--memory-steps", "10,5"], "ascending"),
        (["--memory-steps", "0"], "positive totals"),
        (["--memory-steps", "a,b"], "invalid literal"),
        (["--claims", "0"], "--claims must be at least 1"),
        (["--cold-rate", "0"], "--cold-rate must be positive"),
        (["snapshots", "--snapshot-sizes", "0"], "--snapshot-sizes"),
        (["pause-resume", "--pause-sizes", "10,x"], "--pause-sizes"),
        (["pause-resume", "--pause-repeats", "0"], "--pause-repeats must be at least 1"),
        (["pause-resume", "--pause-memory-mib", "-1"], "--pause-memory-mib must be at least 0"),
        (["pause-resume", "--controller-cmd", "x"], "run only against this project's controller"),
        (["nonsense"], "unknown scenario"),
    ],
)
def test_bad_options_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        run.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_quick_replaces_the_sizes_and_aliases_resolve() -> None:
    parser = run._parser()
    args = parser.parse_args(["claims", "--quick", "--claims", "5000"])
    selected = run._validate(parser, args)
    assert selected == ["warm-claims"]
    assert args.claims == run.QUICK["claims"]
    assert args.memory_steps == (50, 200)


def test_compare_runs_ours_then_the_other() -> None:
    parser = run._parser()
    args = parser.parse_args(["cold", "--compare", "--controller-cmd", "/bin/other --x"])
    run._validate(parser, args)
    specs = run._specs(args)
    assert [(s.label, s.command) for s in specs] == [("ours", None), ("other", "/bin/other --x")]
    args = parser.parse_args(["cold", "--controller-cmd", "/bin/other"])
    run._validate(parser, args)
    assert [s.label for s in run._specs(args)] == ["other"]
