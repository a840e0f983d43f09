"""Plain-HTTP servers every replica runs: probes (``/healthz``, ``/readyz``) and ``/metrics``.

Kubelet probes and Prometheus scrape every replica, leader or not, so these start before leader
election. Checks are small callables; a failing check answers 500 with its name, as
controller-runtime's healthz handler does.

The server is a small HTTP/1.1 GET server on asyncio streams rather than ``aiohttp.web``: these
endpoints need routing by path, keep-alive and nothing else, and not importing the web
framework keeps 2 MiB out of every controller's memory. (The conversion webhook, when enabled,
still serves with ``aiohttp.web``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

logger = logging.getLogger(__name__)

Check = Callable[[], bool]

HEAD_LIMIT: Final = 16 * 1024
"""Bytes of request line and headers a request may use (kubelet and Prometheus send < 1 kB)."""
IDLE_TIMEOUT: Final = 60.0
"""Seconds a kept-alive connection may wait for its next request."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A parsed GET or HEAD request (no body: these endpoints take none)."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    """Each query parameter's first value."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """What a handler answers."""

    body: bytes | str = b""
    status: int = 200
    content_type: str = "text/plain; charset=utf-8"


HttpHandler = Callable[[HttpRequest], Awaitable[HttpResponse]]


@dataclass(frozen=True, slots=True)
class BindAddress:
    """A listen address; ``host`` ``None`` means every interface, IPv4 and IPv6 (Go's ``:port``)."""

    host: str | None
    port: int


_BIND = re.compile(r"(?:\[(?P<v6>[^\]\s]*)\]|(?P<host>[^:\[\]\s]*)):(?P<port>[0-9]+)")


def parse_bind_address(text: str) -> BindAddress | None:
    """Parse a Go ``host:port`` listen address (``--metrics-bind-address`` and the like).

    Args:
        text: ``:8080`` (every interface), ``127.0.0.1:8080``, ``localhost:8080``,
            ``[::1]:8080``, ``[::]:8080``; ``0`` or empty turns the server off
            (controller-runtime's convention). An IPv6 host needs its brackets.

    Returns:
        The address, or ``None`` when the server is disabled.

    Raises:
        ValueError: ``expected host:port`` for a malformed address, ``port out of range``
            above 65535.
    """
    if text in ("", "0"):
        return None
    match = _BIND.fullmatch(text)
    if match is None:
        raise ValueError("expected host:port")
    port = int(match["port"])
    if port > 65535:
        raise ValueError("port out of range")
    host = match["v6"] if match["v6"] is not None else match["host"]
    return BindAddress(host=host or None, port=port)


class HttpServer:
    """A small HTTP/1.1 server on one address, answering GET and HEAD by exact path.

    Args:
        host: interface to listen on; ``None`` listens on every interface (IPv4 and IPv6).
        port: TCP port (0 picks a free one; see :attr:`port` after start).
        routes: path to handler.
    """

    def __init__(self, host: str | None, port: int, routes: Mapping[str, HttpHandler]) -> None:
        self.host = host
        self.port = port
        self.routes = dict(routes)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen and serve."""
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, limit=HEAD_LIMIT
        )
        if self._server.sockets:
            self.port = int(self._server.sockets[0].getsockname()[1])
        where = "*" if self.host is None else self.host
        logger.info("serving %s on %s:%d", ",".join(sorted(self.routes)), where, self.port)

    async def stop(self) -> None:
        """Stop listening and end open connections (a running profile included)."""
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; whether the connection stays open for another."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT)
        except (asyncio.IncompleteReadError, TimeoutError):
            return False
        except asyncio.LimitOverrunError:
            await _write(writer, "GET", HttpResponse("request header too large\n", 431), False)
            return False
        parsed = _parse_head(head)
        if parsed is None:
            await _write(writer, "GET", HttpResponse("malformed request\n", 400), False)
            return False
        request, keep_alive, has_body = parsed
        if request.method not in ("GET", "HEAD"):  # its body, if any, is left unread: close
            await _write(writer, "GET", HttpResponse("method not allowed\n", 405), False)
            return False
        if has_body:  # GET/HEAD with a body: not worth reading; answer and close
            await _write(
                writer, request.method, HttpResponse("request body not allowed\n", 413), False
            )
            return False
        await _write(writer, request.method, await self._answer(request), keep_alive)
        return keep_alive

    async def _answer(self, request: HttpRequest) -> HttpResponse:
        handler = self.routes.get(request.path)
        if handler is None:
            return HttpResponse("404 page not found\n", 404)
        try:
            return await handler(request)
        except Exception:
            logger.exception("handler for %s failed", request.path)
            return HttpResponse("internal server error\n", 500)


def _parse_head(head: bytes) -> tuple[HttpRequest, bool, bool] | None:
    """The request, whether to keep the connection, whether a body follows; None if malformed."""
    lines = head.decode("latin-1").split("\r\n")  # latin-1 decodes every byte
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            return None
        headers[name.strip().lower()] = value.strip()
    url = urlsplit(target)
    query: dict[str, str] = {}
    for key, value in parse_qsl(url.query, keep_blank_values=True):
        query.setdefault(key, value)
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    has_body = headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers
    return HttpRequest(method=method, path=url.path or "/", query=query), keep_alive, has_body


async def _write(
    writer: asyncio.StreamWriter, method: str, response: HttpResponse, keep: bool
) -> None:
    body = response.body.encode() if isinstance(response.body, str) else response.body
    reason = HTTPStatus(response.status).phrase
    head = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
    await writer.drain()


def _check_handler(checks: dict[str, Check]) -> HttpHandler:
    async def handle(_: HttpRequest) -> HttpResponse:
        failed = []
        for name, check in checks.items():
            try:
                ok = check()
            except Exception:
                logger.exception("check %s raised", name)
                ok = False
            if not ok:
                failed.append(name)
        if failed:
            return HttpResponse(f"checks failed: {', '.join(failed)}\n", 500)
        return HttpResponse("ok")

    return handle


def health_app(healthz: dict[str, Check], readyz: dict[str, Check]) -> dict[str, HttpHandler]:
    """Routes answering ``/healthz`` and ``/readyz`` from the given (live) check dicts."""
    return {"/healthz": _check_handler(healthz), "/readyz": _check_handler(readyz)}


def metrics_app(registry: CollectorRegistry) -> dict[str, HttpHandler]:
    """Routes answering ``/metrics`` in the Prometheus text format."""

    async def handle(_: HttpRequest) -> HttpResponse:
        return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

    return {"/metrics": handle}
