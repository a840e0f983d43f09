"""The websocket upgrade (exec, port-forward) against a local HTTP server that refuses it.

A refused upgrade must surface as the SDK's typed error carrying the status and the server's
own message (read before httpx-ws closes the response), never as an httpx exception; and the
upgrade must not ask for JSON, which the kubelet answers with 406 Not Acceptable.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

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
