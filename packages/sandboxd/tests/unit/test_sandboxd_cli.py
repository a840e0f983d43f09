"""sandboxd's command line: defaults, environment overrides, refused values."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.sandboxd import cli


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SANDBOXD_HOST",
        "SANDBOXD_PORT",
        "SANDBOXD_DEFAULT_USER",
        "SANDBOXD_HEARTBEAT_INTERVAL",
        "SANDBOXD_NO_FORWARD",
    ):
        monkeypatch.delenv(name, raising=False)
    args = cli.parse_args([])
    assert (args.host, args.port, args.default_user) == ("0.0.0.0", 49983, "user")
    assert args.heartbeat_interval == 30
    assert args.no_forward is False


def test_environment_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXD_PORT", "50000")
    monkeypatch.setenv("SANDBOXD_NO_FORWARD", "1")
    monkeypatch.setenv("SANDBOXD_DEFAULT_USER", "agent")
    args = cli.parse_args(["--host", "127.0.0.1", "--heartbeat-interval", "5"])
    assert (args.host, args.port, args.default_user) == ("127.0.0.1", 50000, "agent")
    assert args.heartbeat_interval == 5
    assert args.no_forward is True


@pytest.mark.parametrize(
    "argv",
    [["--port", "0"], ["--port", "70000"], ["--port", "x"], ["--heartbeat-interval", "0"]],
)
def test_bad_values_exit_with_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.parse_args(argv)
    assert caught.value.code == 2
    assert "usage: sandboxd" in capsys.readouterr().err
