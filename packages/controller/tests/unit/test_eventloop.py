"""The controller's event loop choice: uvloop by default, asyncio on request, a typo refused."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from kube_agent_sandbox.controller import eventloop
from kube_agent_sandbox.controller.cli import main


def test_uvloop_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(eventloop.ENV_VAR, raising=False)
    name, factory = eventloop.loop_factory()
    loop = factory()
    try:
        assert name == "uvloop"
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_the_environment_selects_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(eventloop.ENV_VAR, "asyncio")
    name, factory = eventloop.loop_factory()
    loop = factory()
    try:
        assert name == "asyncio"
        assert not isinstance(loop, uvloop.Loop)
        assert isinstance(loop, asyncio.AbstractEventLoop)
    finally:
        loop.close()


def test_an_unknown_loop_is_refused() -> None:
    with pytest.raises(ValueError, match="AGENT_SANDBOX_EVENT_LOOP must be one of uvloop, asyncio"):
        eventloop.loop_factory("trio")


def test_the_controller_exits_1_on_an_unknown_loop(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(eventloop.ENV_VAR, "tokio")
    assert main(["--leader-elect=false"]) == 1
    line = capsys.readouterr().err.splitlines()[-1]
    assert '"level":"error"' in line
    assert "AGENT_SANDBOX_EVENT_LOOP must be one of uvloop, asyncio, not 'tokio'" in line
