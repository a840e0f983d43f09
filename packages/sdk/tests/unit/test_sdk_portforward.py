"""PortForward's local side: listening, the per-channel port prefix, pumping both ways.

The pods/portforward websocket is a scripted stand-in; the real one is used in the e2e suite.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from wsproto.events import BytesMessage, CloseConnection

from kube_agent_sandbox.sdk import SandboxPortForwardError
from kube_agent_sandbox.sdk.portforward import PortForward

PORT = struct.pack("<H", 8888)


class FakeSocket:
    def __init__(self, messages: list[bytes]) -> None:
        self.incoming: queue.Queue[bytes | None] = queue.Queue()
        for message in messages:
            self.incoming.put(message)
        self.sent: list[bytes] = []
        self.closed = threading.Event()

    def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    def receive(self, timeout: float | None = None) -> Any:
        item = self.incoming.get(timeout=timeout)
        if item is None:
            return CloseConnection(code=1000)
        return BytesMessage(data=item)

    def close(self) -> None:
        self.closed.set()


class FakeApi:
    def __init__(self, sock: FakeSocket) -> None:
        self.sock = sock
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @contextlib.contextmanager
    def websocket(self, path: str, **kwargs: Any) -> Iterator[FakeSocket]:
        self.calls.append((path, kwargs))
        yield self.sock


class FakeClient:
    namespace = "ns"

    def __init__(self, sock: FakeSocket) -> None:
        self._api = FakeApi(sock)

    def get(self, name: str, *, namespace: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "annotations": {"agents.x-k8s.io/pod-name": "pod-1"}}}

    def api(self) -> FakeApi:
        return self._api


def test_bytes_flow_both_ways_without_the_port_prefix() -> None:
    sock = FakeSocket([b"\x00" + PORT, b"\x01" + PORT, b"\x00hello"])
    client = FakeClient(sock)
    with PortForward(client, "box", 8888) as forward:  # type: ignore[arg-type]
        assert forward.local_port > 0
        with socket.create_connection(("127.0.0.1", forward.local_port), timeout=5) as conn:
            assert conn.recv(100) == b"hello"
            conn.sendall(b"ping")
            for _ in range(200):
                if sock.sent:
                    break
                time.sleep(0.01)
            assert sock.sent == [b"\x00ping"]
            sock.incoming.put(None)
    path, kwargs = client.api().calls[0]
    assert path == "/api/v1/namespaces/ns/pods/pod-1/portforward"
    assert kwargs["params"] == {"ports": "8888"}


def test_bad_ports_and_busy_local_port() -> None:
    client = FakeClient(FakeSocket([]))
    with pytest.raises(ValueError, match="remote port"):
        PortForward(client, "box", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="local port"):
        PortForward(client, "box", 80, local_port=70000)  # type: ignore[arg-type]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        with pytest.raises(SandboxPortForwardError, match=str(busy)):
            PortForward(client, "box", 80, local_port=busy).start()  # type: ignore[arg-type]
