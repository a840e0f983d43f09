"""Port-forward: a local TCP port that reaches a port of a Sandbox's Pod (like kubectl).

Each accepted local connection opens its own ``pods/portforward`` websocket (protocol
``v4.channel.k8s.io``: channel 0 carries data, channel 1 errors, and the first message on each
channel is the 2-byte little-endian port). Two threads pump bytes each way, so the forwarder
works the same under synchronous code and beside an event loop (it never blocks one).
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from typing import Any

from wsproto.events import BytesMessage, CloseConnection

from kube_agent_sandbox.sdk import readiness
from kube_agent_sandbox.sdk._async.client import AsyncSandboxClient
from kube_agent_sandbox.sdk._sync.client import SandboxClient
from kube_agent_sandbox.sdk.constants import PODS
from kube_agent_sandbox.sdk.errors import SandboxError, SandboxPortForwardError
from kube_agent_sandbox.sdk.paths import resource_path

logger = logging.getLogger(__name__)

PORTFORWARD_PROTOCOLS = ["v4.channel.k8s.io", "portforward.k8s.io"]
DATA_CHANNEL = 0
ERROR_CHANNEL = 1


class PortForward:
    """Forward ``127.0.0.1:<local_port>`` to ``remote_port`` of a Sandbox's Pod.

    Use as a context manager; :attr:`local_port` is the bound port (``0`` picks a free one)::

        with PortForward(client, "my-sandbox", 8888) as forward:
            httpx.get(f"http://127.0.0.1:{forward.local_port}/")

    An :class:`AsyncSandboxClient` may be given too: the forwarder then opens its own sync
    connection with the same configuration (its threads never block the event loop).

    Args:
        client: a sync or async client.
        name: the Sandbox.
        remote_port: the port inside the Pod.
        local_port: the local port (``0``: any free port).
        namespace: the Sandbox's namespace.
        address: the local address to listen on.

    Raises:
        ValueError: on a port outside 1-65535.
    """

    def __init__(
        self,
        client: SandboxClient | AsyncSandboxClient,
        name: str,
        remote_port: int,
        *,
        local_port: int = 0,
        namespace: str | None = None,
        address: str = "127.0.0.1",
    ) -> None:
        if not 1 <= remote_port <= 65535:
            raise ValueError(f"remote port must be 1-65535, got {remote_port}")
        if not 0 <= local_port <= 65535:
            raise ValueError(f"local port must be 0-65535, got {local_port}")
        self._owned: SandboxClient | None = None
        if isinstance(client, AsyncSandboxClient):
            self._owned = SandboxClient(
                client._config, namespace=client.namespace, context=client._context
            )
            client = self._owned
        self.client = client
        self.name = name
        self.remote_port = remote_port
        self.namespace = namespace
        self._address = address
        self._requested_port = local_port
        self._server: socket.socket | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.local_port = 0
        self._path = ""

    def __enter__(self) -> PortForward:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Resolve the Pod and listen locally.

        Raises:
            SandboxError: the Sandbox does not exist or the port is taken.
        """
        ns = self.namespace or self.client.namespace
        pod = readiness.pod_name(self.client.get(self.name, namespace=ns))
        self._path = resource_path(PODS, ns, pod, "portforward")
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind((self._address, self._requested_port))
        except OSError as err:
            server.close()
            raise SandboxPortForwardError(
                f"cannot listen on port {self._requested_port}: {err}"
            ) from err
        server.listen(16)
        server.settimeout(0.2)
        self._server = server
        self.local_port = int(server.getsockname()[1])
        thread = threading.Thread(target=self._accept_loop, name="port-forward", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Stop listening and close every forwarded connection."""
        self._stop.set()
        if self._server is not None:
            self._server.close()
            self._server = None
        for thread in self._threads:
            thread.join(timeout=5)
        if self._owned is not None:
            self._owned.close()

    def serve_forever(self) -> None:
        """Block until interrupted (the CLI's ``port-forward``)."""
        while not self._stop.is_set():
            self._stop.wait(0.5)

    def _accept_loop(self) -> None:
        while not self._stop.is_set() and self._server is not None:
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        api = self.client.api()
        try:
            with api.websocket(
                self._path,
                resource="pods/portforward",
                params={"ports": str(self.remote_port)},
                subprotocols=PORTFORWARD_PROTOCOLS,
            ) as ws:
                pump = threading.Thread(target=self._local_to_remote, args=(conn, ws), daemon=True)
                pump.start()
                self._remote_to_local(conn, ws)
        except SandboxError as err:
            logger.warning("port-forward to %s:%s failed: %s", self.name, self.remote_port, err)
        finally:
            conn.close()

    def _local_to_remote(self, conn: socket.socket, ws: Any) -> None:
        try:
            while not self._stop.is_set():
                data = conn.recv(65536)
                if not data:
                    break
                ws.send_bytes(bytes((DATA_CHANNEL,)) + data)
        except OSError:
            pass
        finally:
            try:
                ws.close()
            except Exception:
                logger.debug("closing port-forward websocket", exc_info=True)

    def _remote_to_local(self, conn: socket.socket, ws: Any) -> None:
        seen_prefix = {DATA_CHANNEL: False, ERROR_CHANNEL: False}
        while not self._stop.is_set():
            try:
                event = ws.receive(0.5)
            except (queue.Empty, TimeoutError):
                continue
            except Exception:
                return
            if isinstance(event, CloseConnection):
                return
            if not isinstance(event, BytesMessage):
                continue
            data = bytes(event.data)
            if not data:
                continue
            channel, payload = data[0], data[1:]
            if channel in seen_prefix and not seen_prefix[channel]:
                seen_prefix[channel] = True
                payload = payload[2:]
            if not payload:
                continue
            if channel == ERROR_CHANNEL:
                logger.warning("port-forward error: %s", payload.decode("utf-8", "replace"))
                return
            try:
                conn.sendall(payload)
            except OSError:
                return
