"""Unit tests of the real node's helpers that need no root: machine lock, relay, demo steps."""

from __future__ import annotations

import io
import socket
import threading
from pathlib import Path

import pytest

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.demo import (
    KWOK,
    REAL,
    DemoContext,
    Reporter,
    Step,
    find_repo_root,
    run_steps,
)
from kube_agent_sandbox.testing.node.apiproxy import TcpRelay
from kube_agent_sandbox.testing.node.lock import MachineLock, NodeBusyError
from kube_agent_sandbox.testing.node.realnode import RealNode, RealNodeOptions


def test_a_second_real_node_cannot_take_the_machine(tmp_path: Path) -> None:
    first = MachineLock(tmp_path / "node.lock")
    second = MachineLock(tmp_path / "node.lock")
    first.acquire(timeout=0)
    assert first.held
    assert not second.held
    try:
        with pytest.raises(NodeBusyError, match="another real node"):
            second.acquire(timeout=0)
    finally:
        first.release()
    assert not first.held
    second.acquire(timeout=0)
    second.release()


def test_stopping_a_node_that_never_started_touches_nothing(tmp_path: Path) -> None:
    node = RealNode(RealNodeOptions(workdir=tmp_path / "node"))
    node.stop()
    assert not (tmp_path / "node").exists()


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        connection, _ = server.accept()
        with connection:
            while data := connection.recv(1024):
                connection.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return server, int(server.getsockname()[1])


def test_the_relay_copies_bytes_both_ways() -> None:
    server, target_port = _echo_server()
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    listen_port = int(probe.getsockname()[1])
    probe.close()
    relay = TcpRelay("127.0.0.1", listen_port, target_host="127.0.0.1", target_port=target_port)
    relay.start()
    try:
        with socket.create_connection(("127.0.0.1", listen_port), timeout=5) as client:
            client.sendall(b"hello")
            assert client.recv(1024) == b"HELLO"
    finally:
        relay.stop()
        server.close()


def test_the_relay_reports_an_address_it_cannot_bind() -> None:
    relay = TcpRelay("192.0.2.254", 1, target_host="127.0.0.1", target_port=1)
    with pytest.raises(OSError, match="assign"):
        relay.start()


def test_steps_needing_a_container_are_skipped_on_kwok(tmp_path: Path) -> None:
    ran: list[str] = []

    def record(name: str) -> Step:
        return Step(name, lambda ctx: ran.append(name) or name, frozenset({REAL}))

    out = io.StringIO()
    context = DemoContext(
        access=ClusterAccess(tmp_path / "kubeconfig", provider="local"),
        mode=KWOK,
        image="x:1",
        out=out,
    )
    report = Reporter(out)
    run_steps(context, report, [Step("everywhere", lambda ctx: "ok"), record("real only")])
    assert ran == []
    assert [title for title, _ in report.timings] == ["everywhere", "real only"]
    assert report.timings[1][1] is None
    assert "real only: skipped" in out.getvalue()


def test_the_repository_root_is_found_from_a_subfolder(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "kustomization.yaml").write_text("resources: []\n")
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert find_repo_root(tmp_path / "a" / "b") == tmp_path


def test_no_repository_root_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"manifests/kustomization\.yaml"):
        find_repo_root(tmp_path)
