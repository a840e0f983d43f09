"""The websocket upgrade (exec, port-forward) against a local HTTP server that refuses it.

A refused upgrade must surface as the SDK's typed error carrying the status and the server's
own message (read before httpx-ws closes the response), never as an httpx exception; and the
upgrade must not ask for JSON, which the kubelet answers with 406 Not Acceptable. A sync
session left early must not leave a read running on its socket.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request

from kube_agent_sandbox.sdk import ApiRequestError, ClusterConfig, PermissionDeniedError
from kube_agent_sandbox.sdk._async.api import AsyncKubeApi
from kube_agent_sandbox.sdk._sync.api import KubeApi

EXEC = "/api/v1/namespaces/ns/pods/p/exec"
PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
KUBELET_406 = b"406: Not Acceptable\n\nAvailable representations: "


@dataclass
class Refusal:
    """What the server answers to every request, and the headers it was sent."""

    status: int = 406
    content_type: str = "text/plain; charset=utf-8"
    body: bytes = KUBELET_406
    seen: list[dict[str, str]] = field(default_factory=list)


@pytest.fixture
def refusal() -> Iterator[tuple[Refusal, str]]:
    """A local server refusing every upgrade as told by the yielded :class:`Refusal`."""
    plan = Refusal()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            plan.seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(plan.status)
            self.send_header("Content-Type", plan.content_type)
            self.send_header("Content-Length", str(len(plan.body)))
            self.end_headers()
            self.wfile.write(plan.body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield plan, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _config(host: str) -> ClusterConfig:
    return ClusterConfig.explicit(host, token="t")


def _open_exec(api: KubeApi) -> None:
    with api.websocket(EXEC, resource="pods/exec", params={}, subprotocols=PROTOCOLS):
        pytest.fail("the upgrade was refused; no session may open")


async def _open_exec_async(api: AsyncKubeApi) -> None:
    async with api.websocket(EXEC, resource="pods/exec", params={}, subprotocols=PROTOCOLS):
        pytest.fail("the upgrade was refused; no session may open")


def test_a_refused_upgrade_raises_the_typed_error_with_the_kubelets_message(
    refusal: tuple[Refusal, str],
) -> None:
    _, host = refusal
    with KubeApi(_config(host)) as api, pytest.raises(ApiRequestError) as caught:
        _open_exec(api)
    assert type(caught.value) is ApiRequestError
    assert caught.value.status_code == 406
    assert "406: Not Acceptable" in str(caught.value)
    assert "pods/exec" in str(caught.value)


async def test_async_refused_upgrade_carries_the_status_objects_message(
    refusal: tuple[Refusal, str],
) -> None:
    plan, host = refusal
    plan.status = 403
    plan.content_type = "application/json"
    status = {
        "kind": "Status",
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        "message": 'pods "p" is forbidden: User "u" cannot create resource "pods/exec"',
    }
    plan.body = json.dumps(status).encode()
    async with AsyncKubeApi(_config(host)) as api:
        with pytest.raises(PermissionDeniedError) as caught:
            await _open_exec_async(api)
    assert caught.value.status_code == 403
    assert 'cannot create resource "pods/exec"' in str(caught.value)


async def test_async_refused_upgrade_with_an_empty_body_names_the_status(
    refusal: tuple[Refusal, str],
) -> None:
    plan, host = refusal
    plan.status = 500
    plan.body = b""
    async with AsyncKubeApi(_config(host)) as api:
        with pytest.raises(ApiRequestError) as caught:
            await _open_exec_async(api)
    assert caught.value.status_code == 500
    assert "HTTP 500" in str(caught.value)


def test_the_upgrade_accepts_any_representation_and_json_calls_still_ask_for_json(
    refusal: tuple[Refusal, str],
) -> None:
    plan, host = refusal
    with KubeApi(_config(host)) as api:
        with pytest.raises(ApiRequestError):
            _open_exec(api)
        with pytest.raises(ApiRequestError):
            api.request("GET", "/api/v1/namespaces/ns/pods/p", verb="get", resource="pods")
    upgrade, plain = plan.seen
    assert upgrade["upgrade"] == "websocket"
    assert upgrade["accept"] == "*/*"
    assert upgrade["sec-websocket-protocol"] == "v5.channel.k8s.io, v4.channel.k8s.io"
    assert upgrade["authorization"] == "Bearer t"
    assert plain["accept"] == "application/json"


@pytest.fixture
def silent_websocket() -> Iterator[str]:
    """A websocket server that accepts the upgrade, then never sends a byte nor closes.

    Like an exec whose command still runs: the server's side stays open after the client's
    close frame and end-of-file, so nothing from the server would end a read left pending.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    done = threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            accepted.append(conn)
            server = WSConnection(ConnectionType.SERVER)
            while True:
                data = conn.recv(65536)
                if not data:
                    done.wait()
                    return
                server.receive_data(data)
                for event in server.events():
                    if isinstance(event, Request):
                        accept = AcceptConnection(subprotocol=event.subprotocols[0])
                        conn.sendall(server.send(accept))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        listener.close()
        for conn in accepted:
            conn.close()
        thread.join(timeout=5)


def test_leaving_a_sync_session_early_leaves_no_read_behind(silent_websocket: str) -> None:
    """The worker thread httpx-ws reads in must end before the socket is closed.

    Otherwise it stays blocked on a closed descriptor whose number the next connection reuses,
    and the first bytes of that connection (its TLS handshake) go to the stray read.
    """
    before = set(threading.enumerate())
    with (
        KubeApi(_config(silent_websocket)) as api,
        api.websocket(EXEC, resource="pods/exec", params={}, subprotocols=PROTOCOLS) as ws,
    ):
        assert ws.subprotocol == PROTOCOLS[0]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [t for t in set(threading.enumerate()) - before if t.is_alive()]
        if not left:
            break
        time.sleep(0.05)
    assert left == []
