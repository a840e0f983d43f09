"""``agent-sandbox-controller`` exit codes and output, in-process and as real commands."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_agent_sandbox.controller.cli import main


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


def test_version_exits_0_and_prints_block(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("agent-sandbox-controller, version 0.1.0 (revision: ")
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "build date",
        "python version",
        "compiler",
        "platform",
    ]
    assert err == ""


def test_version_wins_over_invalid_values(capsys: pytest.CaptureFixture[str]) -> None:
    """Upstream prints the version before validating anything."""
    assert main(["--kube-api-burst=0", "-version"]) == 0
    assert "version" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["-h", "--help", "-help"])
def test_help_exits_0_with_usage_on_stderr(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("Usage of agent-sandbox-controller:\n")
    assert "  -sandbox-concurrent-workers int\n" in err
    assert "(default 100)" in err


@pytest.mark.parametrize(
    ("argv", "first_line"),
    [
        (["--no-such-flag"], "flag provided but not defined: -no-such-flag"),
        (["--kube-api-burst=ten"], 'invalid value "ten" for flag -kube-api-burst: parse error'),
        (["--leader-elect=maybe"], 'invalid boolean value "maybe" for -leader-elect: parse error'),
        (["--webhook-port"], "flag needs an argument: -webhook-port"),
    ],
)
def test_malformed_flags_exit_2(
    argv: list[str], first_line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == first_line
    assert err.splitlines()[1] == "Usage of agent-sandbox-controller:"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kube-api-burst=0"], "kube-api-burst must be greater than 0"),
        (["--api-connections=0"], "api-connections must be greater than or equal to 1"),
        (["--sandbox-concurrent-workers=0"], "concurrent workers must be greater than 0"),
        (["--webhook-key-name="], "--webhook-key-name cannot be empty"),
    ],
)
def test_invalid_values_exit_1_with_a_json_error_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    lines = [
        json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")
    ]
    assert lines[-1]["level"] == "error"
    assert lines[-1]["msg"] == message


def test_invalid_values_in_console_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--zap-devel", "--kube-api-burst=-1"]) == 1
    err = capsys.readouterr().err
    assert "\tERROR\t" in err
    assert "kube-api-burst must be greater than 0" in err


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("AGENT_SANDBOX_VERSION", None)
    return env


def test_console_script_version() -> None:
    script = Path(sysconfig.get_path("scripts")) / "agent-sandbox-controller"
    if not script.exists():
        pytest.fail(f"console script not installed at {script}")
    done = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, check=False, env=_env()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("agent-sandbox-controller, version ")


def test_python_dash_m_matches_console_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kube_agent_sandbox.controller", "--kube-api-burst", "0"],
        capture_output=True,
        text=True,
        check=False,
        env=_env(),
    )
    assert done.returncode == 1
    assert (
        json.loads(done.stderr.splitlines()[-1])["msg"] == "kube-api-burst must be greater than 0"
    )
    bad = subprocess.run(
        [sys.executable, "-m", "kube_agent_sandbox.controller", "-bogus"],
        capture_output=True,
        text=True,
        check=False,
        env=_env(),
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("flag provided but not defined: -bogus\n")


def test_startup_settings_log_warnings_and_notes(caplog: pytest.LogCaptureFixture) -> None:
    from kube_agent_sandbox.controller.cli import log_startup_settings
    from kube_agent_sandbox.controller.config import parse_args, validate

    options = parse_args(
        [
            "--sandbox-concurrent-workers=2000",
            "--enable-webhook=false",
            "--enable-pprof",
            "--pprof-mutex-profile-fraction=5",
            "extra-argument",
        ]
    )
    caplog.set_level(logging.DEBUG)
    log_startup_settings(options, validate(options))
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    concurrency = next(r for r in caplog.records if r.getMessage() == "Concurrency settings")
    assert concurrency.__dict__["sandbox"] == 2000
    assert any(lvl == "WARNING" and "exceeds 1000" in msg for lvl, msg in messages)
    assert any(lvl == "WARNING" and "ignoring arguments" in msg for lvl, msg in messages)
    assert any("webhook subsystem disabled" in msg for _, msg in messages)
    assert any("--manage-webhook-certs has no effect" in msg for _, msg in messages)
    assert any("no effect" in msg and "mutex" in msg for _, msg in messages)
    assert any(lvl == "DEBUG" and "auto-detection" in msg for lvl, msg in messages)


def test_defaults_log_no_warnings(caplog: pytest.LogCaptureFixture) -> None:
    from kube_agent_sandbox.controller.cli import log_startup_settings
    from kube_agent_sandbox.controller.config import ControllerOptions

    caplog.set_level(logging.INFO)
    log_startup_settings(ControllerOptions(leader_election_namespace="x"), [])
    assert [r.getMessage() for r in caplog.records] == ["Concurrency settings"]
