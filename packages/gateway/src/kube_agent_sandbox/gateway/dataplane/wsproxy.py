"""WebSocket proxying to a sandbox port (user services such as Jupyter or dev servers).

E2B's proxy passes WebSocket upgrades through to sandbox ports; so does the gateway. The
client's upgrade (an ASGI ``websocket`` scope, already admitted by the router) is answered only
once the pod accepted the same upgrade, with the subprotocol the pod chose; then messages are
relayed both ways until either side closes, and the close code travels on. A pod that refuses
or cannot be reached closes the client's handshake (HTTP 403 from the ASGI server).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from urllib.parse import quote

import aiohttp

from kube_agent_sandbox.gateway.dataplane.proxy import HOP_BY_HOP, Receive, Scope, Send

logger = logging.getLogger(__name__)

MAX_MESSAGE = 16 * 1024 * 1024
_WS_HEADERS = frozenset(
    {
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"sec-websocket-accept",
    }
)


def upgrade_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The client's headers to repeat on the upgrade to the pod (handshake headers dropped)."""
    out: list[tuple[str, str]] = []
    for key, value in headers:
        lower = key.lower()
        if lower in HOP_BY_HOP or lower in _WS_HEADERS or lower == b"origin":
            continue
        out.append((lower.decode("latin-1"), value.decode("latin-1")))
    return out


class WebSocketProxy:
    """Opens WebSockets to pods and relays them (one aiohttp session per gateway)."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(trust_env=False)
        return self._session

    async def aclose(self) -> None:
        """Close the session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        address: tuple[str, int],
        on_stream: Callable[[bool], None] | None = None,
    ) -> None:
        """Relay the client's WebSocket to ``address`` until one side closes."""
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        host, port = address
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        path = scope.get("raw_path") or quote(scope.get("path", "/")).encode()
        query: bytes = scope.get("query_string", b"")
        url = f"ws://{authority}{path.decode('latin-1')}" + (
            f"?{query.decode('latin-1')}" if query else ""
        )
        try:
            upstream = await self._sess().ws_connect(
                url,
                protocols=tuple(scope.get("subprotocols") or ()),
                headers=upgrade_headers(scope.get("headers", [])),
                max_msg_size=MAX_MESSAGE,
                autoping=True,
                timeout=aiohttp.ClientWSTimeout(ws_close=10),
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            logger.info("websocket to %s failed: %s", authority, err)
            await send({"type": "websocket.close", "code": 1011})
            return
        await send({"type": "websocket.accept", "subprotocol": upstream.protocol})
        if on_stream is not None:
            on_stream(True)
        try:
            await _relay(upstream, receive, send)
        finally:
            if on_stream is not None:
                on_stream(False)
            if not upstream.closed:
                await upstream.close()


async def _relay(upstream: aiohttp.ClientWebSocketResponse, receive: Receive, send: Send) -> None:
    async def client_to_pod() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close(code=int(message.get("code") or 1000))
                return
            if message.get("bytes") is not None:
                await upstream.send_bytes(message["bytes"])
            elif message.get("text") is not None:
                await upstream.send_str(message["text"])

    async def pod_to_client() -> None:
        async for message in upstream:
            if message.type == aiohttp.WSMsgType.TEXT:
                await send({"type": "websocket.send", "text": message.data})
            elif message.type == aiohttp.WSMsgType.BINARY:
                await send({"type": "websocket.send", "bytes": message.data})
        code = upstream.close_code or 1000
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": code if 1000 <= code < 5000 else 1011})

    tasks = {asyncio.ensure_future(client_to_pod()), asyncio.ensure_future(pod_to_client())}
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is not None:
                logger.info("websocket relay ended: %r", task.exception())
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
