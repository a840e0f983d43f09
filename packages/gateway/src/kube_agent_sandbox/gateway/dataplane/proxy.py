"""Stream one HTTP exchange between a client and a sandbox pod, without buffering.

One pooled ``httpx.AsyncClient`` per gateway speaks HTTP/1.1 to pods. The request body is read
from ASGI ``receive`` as it arrives and handed to httpx as an async iterator; the response body
is relayed chunk by chunk as the pod writes it (``aiter_raw``: no decompression, so encodings
pass through). Hop-by-hop headers are dropped both ways; ``Authorization`` (envd picks the user
from it), ``Connect-*`` and the access-token headers are kept.

Timeouts: connecting is bounded (a refused or unroutable port is reported to the caller before
anything was sent, so the router can answer 502 "port is not open" or fall back to exec); the
idle read timeout exceeds the SDK's 50 s keepalive interval, and streams (Connect streaming
RPCs, server-sent events, NDJSON, user ports) have none. A client that disconnects cancels the
upstream request, so the pod sees the stream end. When the pod goes away mid-response, a Connect
stream gets a proper end-of-stream error frame if it stopped between frames; any other
response is aborted (the client sees a truncated transfer, never a silently short one).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import httpx

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"expect",  # the gateway's server already answered any 100-continue
    }
)
CONNECT_STREAM_TYPE = b"application/connect+"
READ_TIMEOUT = 120.0
"""Idle read timeout of non-streaming requests (above the SDK's 50 s keepalive pings)."""


class Outcome(enum.Enum):
    """How a forward attempt ended."""

    DONE = "done"
    """The response was (at least partly) sent to the client."""
    REFUSED = "refused"
    """The pod refused the connection; nothing was read from or sent to the client."""
    UNREACHABLE = "unreachable"
    """The pod could not be reached (timeout, no route); nothing was sent to the client."""


class UpstreamLost(Exception):
    """The pod went away after the response started; the response had to be aborted."""


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    named: set[bytes] = set()
    for key, value in headers:
        if key.lower() == b"connection":
            named.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return named


def forward_headers(
    headers: Iterable[tuple[bytes, bytes]], *, client: str | None, scheme: str
) -> list[tuple[bytes, bytes]]:
    """The request headers to send upstream: hop-by-hop removed, ``X-Forwarded-*`` added."""
    items = list(headers)
    drop = HOP_BY_HOP | _connection_tokens(items)
    out: list[tuple[bytes, bytes]] = []
    forwarded_for = b""
    host = b""
    for key, value in items:
        lower = key.lower()
        if lower == b"host":
            host = value
        if lower in drop:
            continue
        if lower == b"x-forwarded-for":
            forwarded_for = value
            continue
        if lower in (b"x-forwarded-host", b"x-forwarded-proto"):
            continue
        out.append((lower, value))
    if client:
        address = client.encode()
        forwarded_for = forwarded_for + b", " + address if forwarded_for else address
    if forwarded_for:
        out.append((b"x-forwarded-for", forwarded_for))
    if host:
        out.append((b"x-forwarded-host", host))
    out.append((b"x-forwarded-proto", scheme.encode()))
    return out


def response_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The response headers to relay to the client: hop-by-hop removed."""
    items = list(headers)
    drop = (HOP_BY_HOP - {b"host"}) | _connection_tokens(items)
    return [(key.lower(), value) for key, value in items if key.lower() not in drop]


def is_streaming_request(scope: Scope, *, port: int, envd_port: int) -> bool:
    """Whether the exchange may stay silent for long: no idle read timeout then."""
    if port != envd_port:
        return True  # user services and the code interpreter (/execute) stream at will
    for key, value in scope.get("headers", []):
        lower = key.lower()
        if lower == b"content-type" and value.lower().startswith(CONNECT_STREAM_TYPE):
            return True
        if lower == b"keepalive-ping-interval":
            return True
    return False


def request_target(scope: Scope) -> bytes:
    """The raw path and query of the request, as the client sent them."""
    raw_path: bytes | None = scope.get("raw_path")
    if not raw_path:
        from urllib.parse import quote

        raw_path = quote(scope.get("path", "/"), safe="/:@!$&'()*+,;=-._~%").encode()
    query: bytes = scope.get("query_string", b"")
    return raw_path + (b"?" + query if query else b"")


class ConnectFrames:
    """Tracks Connect envelope boundaries in a relayed byte stream.

    Attributes:
        at_boundary: the bytes seen so far end exactly after a complete frame.
        ended: an end-of-stream frame (flag ``0x02``) was seen.
    """

    def __init__(self) -> None:
        self._header = b""
        self._remaining = 0
        self._flags = 0
        self.ended = False

    @property
    def at_boundary(self) -> bool:
        """True between frames."""
        return not self._header and self._remaining == 0

    def feed(self, chunk: bytes) -> None:
        """Account for ``chunk``."""
        view = memoryview(chunk)
        while view:
            if self._remaining:
                step = min(self._remaining, len(view))
                self._remaining -= step
                view = view[step:]
                if not self._remaining and self._flags & 0x02:
                    self.ended = True
                continue
            need = 5 - len(self._header)
            self._header += bytes(view[:need])
            view = view[need:]
            if len(self._header) == 5:
                self._flags = self._header[0]
                self._remaining = int.from_bytes(self._header[1:], "big")
                self._header = b""
                if not self._remaining and self._flags & 0x02:
                    self.ended = True


def end_stream_error(code: str, message: str) -> bytes:
    """A Connect end-of-stream frame carrying an error."""
    payload = json.dumps({"error": {"code": code, "message": message}}).encode()
    return b"\x02" + len(payload).to_bytes(4, "big") + payload


class _Body:
    """The client's request body as an async iterator, read from ASGI ``receive`` lazily."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.started = False
        self.done = asyncio.Event()
        self.disconnected = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.started = True
        try:
            while True:
                message = await self._receive()
                if message["type"] == "http.disconnect":
                    self.disconnected = True
                    raise UpstreamLost("client disconnected while sending the body")
                chunk = message.get("body", b"")
                if chunk:
                    yield chunk
                if not message.get("more_body", False):
                    return
        finally:
            self.done.set()


class Proxy:
    """The pooled HTTP/1.1 client to sandbox pods.

    Args:
        connect_timeout: seconds to open a connection to a pod.
        read_timeout: idle read timeout of non-streaming requests (seconds).
        max_connections: pool size across all pods.
    """

    def __init__(
        self,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = READ_TIMEOUT,
        max_connections: int = 1000,
    ) -> None:
        self.read_timeout = read_timeout
        self._timeout = httpx.Timeout(connect_timeout, read=read_timeout, write=60.0, pool=30.0)
        self._stream_timeout = httpx.Timeout(connect_timeout, read=None, write=60.0, pool=30.0)
        self._client = httpx.AsyncClient(
            http1=True,
            http2=False,
            timeout=self._timeout,
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=min(max_connections, 200),
                keepalive_expiry=30.0,
            ),
            follow_redirects=False,
            trust_env=False,
        )

    async def aclose(self) -> None:
        """Close pooled connections."""
        await self._client.aclose()

    async def forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        address: tuple[str, int],
        streaming: bool,
        on_stream: Callable[[bool], None] | None = None,
    ) -> Outcome:
        """Send the request to ``address`` and relay the response.

        Args:
            scope: the ASGI HTTP scope.
            receive: the ASGI receive callable (the body is read only once connected).
            send: the ASGI send callable.
            address: the pod's ``(host, port)``.
            streaming: no idle read timeout (Connect streams, user ports).
            on_stream: called with True when a streamed (length-less) response starts and with
                False when it ends, for activity accounting.

        Returns:
            :attr:`Outcome.DONE` once a response was relayed; REFUSED or UNREACHABLE when the
            pod could not be reached, in which case nothing was sent and the body is unread.

        Raises:
            UpstreamLost: the pod went away mid-response and the response had to be aborted.
        """
        host, port = address
        client = scope.get("client")
        headers = forward_headers(
            scope.get("headers", []),
            client=client[0] if client else None,
            scheme=scope.get("scheme", "http"),
        )
        body = _Body(receive)
        method: str = scope["method"]
        has_body = method not in ("GET", "HEAD", "OPTIONS", "DELETE") or any(
            k.lower() in (b"content-length", b"transfer-encoding")
            for k, _ in scope.get("headers", [])
        )
        url = httpx.URL(scheme="http", host=host, port=port, raw_path=request_target(scope))
        timeout = self._stream_timeout if streaming else self._timeout
        request = self._client.build_request(
            method,
            url,
            headers=headers,
            content=body if has_body else None,
            timeout=timeout,
        )
        if not has_body:
            body.done.set()
        try:
            response = await self._client.send(request, stream=True)
        except httpx.ConnectError as err:
            if body.started:
                raise UpstreamLost(f"connection to {host}:{port} failed: {err}") from err
            return Outcome.REFUSED if _refused(err) else Outcome.UNREACHABLE
        except httpx.TimeoutException as err:
            if body.started:
                raise UpstreamLost(f"{host}:{port} timed out: {err}") from err
            return Outcome.UNREACHABLE
        except httpx.TransportError as err:
            if body.disconnected:
                return Outcome.DONE  # nobody left to answer
            raise UpstreamLost(f"request to {host}:{port} failed: {err}") from err
        try:
            await self._relay(response, receive, send, body=body, on_stream=on_stream)
        finally:
            await response.aclose()
        return Outcome.DONE

    async def _relay(
        self,
        response: httpx.Response,
        receive: Receive,
        send: Send,
        *,
        body: _Body,
        on_stream: Callable[[bool], None] | None,
    ) -> None:
        raw = response.headers.raw
        streamed = not any(k.lower() == b"content-length" for k, _ in raw)
        content_type = response.headers.get("content-type", "").lower().encode()
        frames = ConnectFrames() if content_type.startswith(CONNECT_STREAM_TYPE) else None
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": response_headers(raw),
            }
        )
        if streamed and on_stream is not None:
            on_stream(True)
        relay = asyncio.ensure_future(self._pump(response, send, frames))
        watch = asyncio.ensure_future(_wait_disconnect(receive, body))
        try:
            await asyncio.wait({relay, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not relay.done():
                logger.debug("client went away; closing the upstream response")
                relay.cancel()
                await asyncio.gather(relay, return_exceptions=True)
                return
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            relay.result()
        finally:
            for task in (relay, watch):
                if not task.done():
                    task.cancel()
            if streamed and on_stream is not None:
                on_stream(False)

    async def _pump(
        self, response: httpx.Response, send: Send, frames: ConnectFrames | None
    ) -> None:
        try:
            async for chunk in response.aiter_raw():
                if frames is not None:
                    frames.feed(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.TransportError as err:
            if frames is not None and frames.at_boundary and not frames.ended:
                logger.info("sandbox stream lost (%s); ending the Connect stream", err)
                tail = end_stream_error(
                    "unavailable", f"the connection to the sandbox was lost: {err}"
                )
                await send({"type": "http.response.body", "body": tail, "more_body": False})
                return
            raise UpstreamLost(f"the sandbox connection was lost mid-response: {err}") from err
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _wait_disconnect(receive: Receive, body: _Body) -> None:
    await body.done.wait()
    if body.disconnected:
        return
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def _refused(err: httpx.ConnectError) -> bool:
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return True
        cause = cause.__cause__ or cause.__context__
    text = str(err).lower()
    return "refused" in text or "errno 111" in text
