"""An offline stand-in for wildcard DNS: a CONNECT proxy that sends ``*.<domain>:443`` to a port.

The E2B SDK without ``sandbox_url`` calls ``https://api.<domain>`` and
``https://<port>-<sandboxID>.<domain>``. A test cannot publish a wildcard DNS record, and
patching Python's ``socket.getaddrinfo`` does not help: the SDK's HTTP stack (``pyqwest``, i.e.
Rust's reqwest with its own resolver) never calls it. reqwest does honour ``HTTPS_PROXY``, so a
test points the client's environment at this proxy. It accepts ``CONNECT <name>:443`` only for
names under ``domain``, connects to ``127.0.0.1:<target port>`` (the gateway's TLS listener),
answers 200 and then copies bytes both ways without looking at them: the TLS session (SNI,
certificate check for the wildcard name, the ``Host`` header inside) stays end to end between
the client and the gateway, exactly as with a DNS record. Every CONNECT target is recorded, so
a test can show which host names the client really used.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator

logger = logging.getLogger(__name__)

_HEAD_LIMIT = 8192
_CHUNK = 65536


class WildcardTunnel:
    """A local HTTP CONNECT proxy for ``*.<domain>:443`` (and ``<domain>:443``).

    Args:
        domain: The wildcard domain (e.g. ``sandbox.test``).
        target_port: Port on ``target_host`` that every accepted tunnel reaches.
        target_host: Where tunnels go (the gateway's address).
    """

    def __init__(self, *, domain: str, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.domain = domain.lower().rstrip(".")
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._connects: list[str] = []
        self._refused: list[str] = []
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def connects(self) -> list[str]:
        """The ``host:port`` of every tunnel opened, in order."""
        with self._lock:
            return list(self._connects)

    @property
    def refused(self) -> list[str]:
        """The request lines of every refused request (not CONNECT, or outside the domain)."""
        with self._lock:
            return list(self._refused)

    @property
    def url(self) -> str:
        """The proxy's URL, for ``HTTPS_PROXY``.

        Raises:
            RuntimeError: if the tunnel is not started.
        """
        if self._listener is None:
            raise RuntimeError("the tunnel is not started")
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def start(self) -> str:
        """Listen on a free 127.0.0.1 port; returns :attr:`url`."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept, name="wildcard-tunnel", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop accepting (open tunnels end when either side closes)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> WildcardTunnel:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def allows(self, authority: str) -> bool:
        """Whether ``CONNECT authority`` is tunnelled: ``<name under domain>:443`` only."""
        host, sep, port = authority.lower().rpartition(":")
        if not sep or port != "443":
            return False
        host = host.rstrip(".")
        return host == self.domain or host.endswith("." + self.domain)

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with contextlib.ExitStack() as stack:
            stack.enter_context(client)
            received = _read_head(client)
            if received is None:
                return
            head, _, early = received.partition(b"\r\n\r\n")
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, _, rest = request_line.partition(" ")
            authority = rest.partition(" ")[0]
            if method != "CONNECT" or not self.allows(authority):
                with self._lock:
                    self._refused.append(request_line)
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError as err:
                logger.info("tunnel to %s:%d failed: %s", *self.target, err)
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            stack.enter_context(upstream)
            upstream.settimeout(None)
            with self._lock:
                self._connects.append(authority.lower())
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if early:  # bytes a client sent before the answer belong to the tunnel
                upstream.sendall(early)
            back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
            back.start()
            _pump(client, upstream)
            back.join()


def _read_head(sock: socket.socket) -> bytes | None:
    """What was read up to and including the blank line after the head, or None."""
    data = b""
    sock.settimeout(10)
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(1024)
            if not chunk or len(data) > _HEAD_LIMIT:
                return None
            data += chunk
    except OSError:
        return None
    finally:
        sock.settimeout(None)
    return data


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until EOF or an error, then half-close ``sink``."""
    for chunk in _chunks(source):
        try:
            sink.sendall(chunk)
        except OSError:
            break
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _chunks(sock: socket.socket) -> Iterator[bytes]:
    while True:
        try:
            chunk = sock.recv(_CHUNK)
        except OSError:
            return
        if not chunk:
            return
        yield chunk
