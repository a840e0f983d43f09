"""sandboxd's activity heartbeat: sent while its processes run, with the token and sandbox id."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from sandboxd_helpers import start_request, stream

from kube_agent_sandbox.sandboxd.app import build_app
from kube_agent_sandbox.sandboxd.heartbeat import Heartbeat
from kube_agent_sandbox.sandboxd.init_state import DaemonState


class _Receiver:
    """A tiny HTTP server recording heartbeat requests."""

    def __init__(self, status: int = 204) -> None:
        self.status = status
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.requests.append(
                    (self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                del format, args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/_gateway/heartbeat"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    server = _Receiver()
    yield server
    server.close()


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/_gateway/heartbeat"


async def test_beat_once_needs_a_url_and_a_running_process(receiver: _Receiver) -> None:
    running = [0]
    state = DaemonState(access_token="tok", sandbox_id="sbx1")
    heartbeat = Heartbeat(state, lambda: running[0], interval=1)
    assert await heartbeat.beat_once() is False  # no URL
    state.heartbeat_url = receiver.url
    assert await heartbeat.beat_once() is False  # nothing runs
    running[0] = 2
    assert await heartbeat.beat_once() is True
    assert len(receiver.requests) == 1
    path, headers, body = receiver.requests[0]
    assert path == "/_gateway/heartbeat"
    assert headers["x-access-token"] == "tok"
    assert headers["e2b-sandbox-id"] == "sbx1"
    assert body == b'{"runningProcesses": 2}'


async def test_failures_are_counted_not_raised() -> None:
    failing = _Receiver(status=500)
    try:
        state = DaemonState(heartbeat_url=failing.url)
        heartbeat = Heartbeat(state, lambda: 1, interval=1)
        assert await heartbeat.beat_once() is False
        state.heartbeat_url = _closed_port_url()
        assert await heartbeat.beat_once() is False
        assert heartbeat.failed == 2
        assert heartbeat.sent == 0
    finally:
        failing.close()


async def test_loop_beats_every_interval_while_processes_run(receiver: _Receiver) -> None:
    running = [1]
    state = DaemonState(heartbeat_url=receiver.url)
    heartbeat = Heartbeat(state, lambda: running[0], interval=0.1)
    heartbeat.start()
    try:
        heartbeat.poke()
        await asyncio.sleep(0.55)
        running[0] = 0
        sent = len(receiver.requests)
        await asyncio.sleep(0.3)
        assert 3 <= sent <= 7
        assert len(receiver.requests) <= sent + 1  # stops once nothing runs
    finally:
        await heartbeat.stop()


async def test_daemon_reports_while_its_process_runs(receiver: _Receiver) -> None:
    app = build_app(heartbeat_interval=0.2)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://sandboxd") as client,
    ):
        init = await client.post(
            "/init",
            json={"accessToken": "t0k", "heartbeatUrl": receiver.url, "sandboxId": "sb-9"},
        )
        assert init.status_code == 204
        assert receiver.requests == []  # nothing runs yet: no heartbeat
        _response, frames = await stream(
            client,
            "process.Process/Start",
            start_request("sleep 0.7"),
            headers={"X-Access-Token": "t0k"},
        )
        assert frames[-1] == (2, {})
        count = len(receiver.requests)
        await asyncio.sleep(0.5)
    assert count >= 2
    assert len(receiver.requests) == count  # the process ended: heartbeats stopped
    assert all(r[1]["x-access-token"] == "t0k" for r in receiver.requests)
    assert all(r[1]["e2b-sandbox-id"] == "sb-9" for r in receiver.requests)
