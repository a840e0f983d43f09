"""Unit tests of the cli scenario's pure parts: the spread, the rows and targets, the list
check, the timing loop on real (tiny) processes, and how bench/run.py selects and sizes it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import run
from benchlib import cli
from benchlib.report import MISS, PASS, BenchResult


def test_spread_is_min_median_max() -> None:
    assert cli.spread([0.5, 0.1, 0.3, 0.2]) == cli.Spread(0.1, 0.25, 0.5)
    with pytest.raises(ValueError, match="no samples"):
        cli.spread([])


def _rows(result: BenchResult) -> dict[str, tuple[float | None, str | None]]:
    return {m.name: (m.value, m.status) for m in result.metrics}


def test_rows_judge_the_medians_and_give_the_list_ratio() -> None:
    result = BenchResult("cli")
    cli.add_rows(
        result,
        {
            cli.CLI: [0.2, 0.25, 0.9],
            cli.KUBECTL: [0.05, 0.1, 0.2],
            cli.SDK_IMPORT: [0.1, 0.2, 0.3],
            cli.PYTHON: [0.02, 0.03, 0.04],
        },
    )
    rows = _rows(result)
    assert rows[f"{cli.CLI} median"] == (0.25, PASS)
    assert rows[f"{cli.CLI} max"] == (0.9, None)
    assert rows[f"{cli.SDK_IMPORT} median"] == (0.2, MISS)
    assert rows[f"{cli.KUBECTL} median"] == (0.1, None)
    assert rows[f"{cli.PYTHON} min"] == (0.02, None)
    value, _ = rows[f"{cli.CLI} / {cli.KUBECTL} (median)"]
    assert value == pytest.approx(2.5)


def test_the_ratio_is_missing_without_kubectl_figures() -> None:
    result = BenchResult("cli")
    cli.add_rows(result, {cli.CLI: [0.2], cli.KUBECTL: []})
    assert _rows(result)[f"{cli.CLI} / {cli.KUBECTL} (median)"] == (None, None)
    assert f"{cli.KUBECTL} median" not in _rows(result)


def test_missing_names_reads_the_first_column_of_both_tables() -> None:
    ours = "NAME     READY  REASON  MODE     AGE\ncli-000  True   Ready   Running  5s\n"
    kubectl = "NAME      AGE\ncli-000   5s\ncli-001   5s\n"
    names = ["cli-000", "cli-001"]
    assert cli.missing_names(ours, names) == ["cli-001"]
    assert cli.missing_names(kubectl, names) == []
    assert cli.missing_names("", names) == names


def test_commands_list_the_namespace_and_import_the_sdk() -> None:
    cmds = cli.commands(cli="/x/agent-sandbox", kubectl="/k/kubectl", python="/p", namespace="b")
    assert [c.label for c in cmds] == [cli.CLI, cli.KUBECTL, cli.SDK_IMPORT, cli.PYTHON]
    assert cmds[0].argv == ("/x/agent-sandbox", "list", "-n", "b")
    assert cmds[1].argv == ("/k/kubectl", "get", "sandboxes", "-n", "b")
    assert cmds[2].argv == ("/p", "-c", "import kube_agent_sandbox.sdk")
    assert [c.lists for c in cmds] == [True, True, False, False]


def test_time_rounds_skips_the_warm_up_and_checks_every_output() -> None:
    seen: list[str] = []
    cmds = [cli.Command("echo", (sys.executable, "-c", "print('hi')"), lists=True)]
    timings = cli.time_rounds(cmds, runs=2, env={}, check=lambda cmd, out: seen.append(out.strip()))
    assert len(timings["echo"]) == 2
    assert all(t > 0 for t in timings["echo"])
    assert seen == ["hi"] * 3


def test_time_rounds_fails_on_a_command_error() -> None:
    cmds = [cli.Command("bad", (sys.executable, "-c", "import sys; sys.exit('no')"))]
    with pytest.raises(RuntimeError, match="bad exited 1: no"):
        cli.time_rounds(cmds, runs=1, env={}, check=lambda cmd, out: None)


def test_cli_runs_by_default_and_in_quick_at_tiny_sizes() -> None:
    parser = run._parser()
    args = parser.parse_args(["--quick", "--cli-runs", "50"])
    assert "cli" in run._validate(parser, args)
    assert (args.cli_sandboxes, args.cli_runs) == (3, 5)
    with pytest.raises(SystemExit):
        run._validate(parser, parser.parse_args(["cli", "--controller-cmd", "x"]))


def test_the_commands_get_the_kubeconfig_and_a_private_bytecode_cache() -> None:
    base = {"PATH": "/bin", "PYTHONDONTWRITEBYTECODE": "1", "KUBECONFIG": "/old"}
    env = cli.command_env(base, kubeconfig=Path("/k/admin"), pycache=Path("/w/pycache"))
    assert env == {"PATH": "/bin", "KUBECONFIG": "/k/admin", "PYTHONPYCACHEPREFIX": "/w/pycache"}
    assert base["PYTHONDONTWRITEBYTECODE"] == "1"  # the caller's mapping is left alone
