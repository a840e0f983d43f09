"""``/mcp``: the MCP tools over Streamable HTTP, for agents holding a gateway API key.

The key (``Authorization: Bearer <key>`` or ``X-API-KEY``) is checked before the MCP layer sees
the request. The tools then act as an E2B client of this very gateway, in-process (an ASGI
transport, no socket), carrying the caller's key: tenant scoping, warm-pool claims, access
tokens and the data plane are the ones E2B clients get, with no second implementation.

Stateless mode: each POST is a whole exchange, so a request never runs under another
request's key and any replica can answer it.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any, Final

import httpx
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.types import ASGIApp, Receive, Scope, Send

from kube_agent_sandbox.gateway.state import GatewayState
from kube_agent_sandbox.sdk.mcp.e2b_backend import E2BBackend
from kube_agent_sandbox.sdk.mcp.tools import build_server

MCP_PATH: Final = "/mcp"
_BACKENDS_KEPT: Final = 256
_KEY_SCOPE: Final = "agent_sandbox_api_key"


def api_key_of(scope: Scope) -> str | None:
    """The key of a request: ``Authorization: Bearer`` (MCP hosts' usual form) or X-API-KEY."""
    name: bytes
    value: bytes
    for name, value in scope.get("headers") or ():
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return value[7:].decode("latin-1").strip()
        if name == b"x-api-key":
            return value.decode("latin-1").strip()
    return None


class McpEndpoint:
    """The MCP server of one gateway app; :meth:`bind` names the app its tools call."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state
        self._http: httpx.AsyncClient | None = None
        self._backends: OrderedDict[str, E2BBackend] = OrderedDict()
        self.server = build_server(self._backend, file_root=state.options.mcp_file_root)
        self.server.streamable_http_app(
            stateless_http=True, json_response=True, host="0.0.0.0", session_idle_timeout=None
        )
        self._mcp = StreamableHTTPASGIApp(self.server.session_manager)

    def bind(self, gateway: ASGIApp) -> None:
        """Send the tools' E2B calls to ``gateway`` in-process."""
        self._http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=gateway),
            base_url="http://gateway.invalid",
            timeout=httpx.Timeout(None),
        )

    def _backend(self, ctx: Context) -> E2BBackend:
        request: Any = ctx.request_context.request
        key: str = request.scope[_KEY_SCOPE]
        backend = self._backends.get(key)
        if backend is None:
            assert self._http is not None, "McpEndpoint.bind was not called"
            backend = E2BBackend(self._http, key)
            self._backends[key] = backend
            while len(self._backends) > _BACKENDS_KEPT:
                self._backends.popitem(last=False)
        self._backends.move_to_end(key)
        return backend

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the MCP session manager for the app's lifetime."""
        async with self.server.session_manager.run():
            try:
                yield
            finally:
                if self._http is not None:
                    await self._http.aclose()

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate one ``/mcp`` request and serve it."""
        key = api_key_of(scope)
        if self.state.tenants.authenticate(key) is None:
            await _unauthorized(send)
            return
        scope[_KEY_SCOPE] = key
        await self._mcp(scope, receive, send)


class McpDispatch:
    """ASGI middleware: ``/mcp`` goes to the MCP endpoint, everything else on."""

    def __init__(self, app: ASGIApp, *, endpoint: McpEndpoint) -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Dispatch one request."""
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
            await self.endpoint.serve(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _unauthorized(send: Send) -> None:
    body = json.dumps(
        {"error": "a valid gateway API key is required (Authorization: Bearer <key>)"}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
