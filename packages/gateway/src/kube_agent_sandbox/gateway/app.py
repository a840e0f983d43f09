"""The gateway's ASGI application: one port for the control plane and the data plane.

A request addressed to a sandbox goes to the data plane: it carries an ``E2b-Sandbox-Id``
header (``E2B_SANDBOX_URL`` set, the SDK's default against a plain URL), or its Host is
``<port>-<id>.<domain>`` (the hostname form), or it is a signed ``/files`` URL that names no
sandbox (:mod:`.dataplane.signed_urls`). Everything else is the E2B control plane
(``controlplane``). The lifespan starts and stops :class:`GatewayState`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from kube_agent_sandbox.gateway.console.routes import PREFIX as CONSOLE_PREFIX
from kube_agent_sandbox.gateway.console.routes import console_routes
from kube_agent_sandbox.gateway.controlplane.routes import control_plane_routes
from kube_agent_sandbox.gateway.dataplane import responses, signed_urls
from kube_agent_sandbox.gateway.dataplane.execfallback import ExecFallback
from kube_agent_sandbox.gateway.dataplane.router import DataPlane
from kube_agent_sandbox.gateway.dataplane.target import TargetError, host_name, names_a_sandbox
from kube_agent_sandbox.gateway.errors import e2b_error
from kube_agent_sandbox.gateway.mcp_endpoint import MCP_PATH, McpDispatch, McpEndpoint
from kube_agent_sandbox.gateway.metrics import (
    PLANE_CONSOLE,
    PLANE_CONTROL,
    PLANE_DATA,
    PLANE_MCP,
    MetricsMiddleware,
    PlaneOf,
)
from kube_agent_sandbox.gateway.state import HEARTBEAT_PATH, GatewayState

logger = logging.getLogger(__name__)

SANDBOX_ID_HEADER: Final = b"e2b-sandbox-id"
_HOST_LABEL: Final = re.compile(r"^(?P<port>[0-9]{1,5})-(?P<id>[a-z0-9]{1,63})$")


@dataclass(frozen=True, slots=True)
class HostTarget:
    """A sandbox addressed by hostname: ``<port>-<id>.<domain>``."""

    port: int
    sandbox_id: str


def parse_host(host: str, domain: str | None) -> HostTarget | None:
    """The sandbox a Host header addresses, or None for the control plane.

    With a configured ``domain`` the host must be ``<port>-<id>.<domain>``; without one, any
    host whose first label is ``<port>-<id>`` (E2B's proxy splits the same way).
    """
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.lower().rstrip(".")
    first, dot, rest = name.partition(".")
    if not dot:
        return None
    if domain is not None and rest != domain.lower().rstrip("."):
        return None
    match = _HOST_LABEL.fullmatch(first)
    if match is None:
        return None
    port = int(match["port"])
    if not 0 < port < 65536:
        return None
    return HostTarget(port=port, sandbox_id=match["id"])


def _under_domain(host: str, domain: str | None) -> bool:
    """Whether ``host`` is ``<digits>-….<domain>``: a sandbox's name, even if malformed.

    Such a request goes to the data plane, which refuses a bad port or id with 400, rather
    than to the control plane (whose ``/health`` would answer for a sandbox that is none).
    """
    if domain is None:
        return False
    try:
        name = host_name(host)
    except TargetError:
        return False
    return names_a_sandbox(name, domain)


def is_data_plane(scope: Scope, domain: str | None) -> bool:
    """Whether an HTTP/WebSocket request is addressed to a sandbox.

    The daemons' heartbeat (``POST /_gateway/heartbeat`` with ``E2b-Sandbox-Id``) is the one
    header-addressed path the gateway serves itself.
    """
    host = ""
    by_header = False
    for key, value in scope.get("headers") or ():
        if key == SANDBOX_ID_HEADER:
            by_header = True
        elif key == b"host":
            host = value.decode("latin-1")
    if host and (parse_host(host, domain) is not None or _under_domain(host, domain)):
        return True
    return by_header and scope.get("path") != HEARTBEAT_PATH


class DataPlaneDispatch:
    """ASGI middleware: sandbox-addressed requests go to the data plane, others on.

    Args:
        app: the control plane.
        state: the gateway state (its options name the domain; the data plane uses it).
    """

    def __init__(self, app: ASGIApp, *, state: GatewayState) -> None:
        self.app = app
        self.state = state
        self.domain = state.options.domain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Dispatch one request."""
        if scope["type"] in ("http", "websocket") and is_data_plane(scope, self.domain):
            await data_plane_of(self.state)(scope, receive, send)
            return
        if signed_urls.is_signed_file_request(scope):
            sandbox_id = signed_urls.signing_sandbox(scope, self._envd_tokens())
            if sandbox_id is None:
                await responses.unauthorized()(scope, receive, send)
                return
            addressed = signed_urls.addressed_to(scope, sandbox_id)
            await data_plane_of(self.state)(addressed, receive, send)
            return
        await self.app(scope, receive, send)

    def _envd_tokens(self) -> Iterator[tuple[str, str]]:
        """``(sandbox id, envd access token)`` of every live sandbox the gateway serves."""
        tokens = self.state.tokens
        for claim in self.state.index.claims.list():
            meta = claim["metadata"]
            if not meta.get("deletionTimestamp"):
                yield str(meta["name"]), tokens.envd_access_token(str(meta.get("uid") or ""))


def plane_classifier(domain: str | None) -> PlaneOf:
    """The plane of a request by the same rules the dispatch middlewares follow."""

    def plane_of(scope: Scope) -> str:
        if is_data_plane(scope, domain):
            return PLANE_DATA
        path = str(scope.get("path", ""))
        if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            return PLANE_MCP
        if path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/"):
            return PLANE_CONSOLE
        return PLANE_CONTROL

    return plane_of


def data_plane_of(state: GatewayState) -> ASGIApp:
    """The data-plane app of ``state``, built on first use (after the state started)."""
    app = state.data_plane
    if app is None:
        app = DataPlane(state, exec_fallback_factory=lambda: exec_fallback_of(state))
        state.data_plane = app
    return app


def exec_fallback_of(state: GatewayState) -> ExecFallback | None:
    """envd over ``pods/exec`` with the gateway's own credentials; None without a cluster."""
    config = state.cluster_config
    return None if config is None else ExecFallback(config)


def build_app(state: GatewayState) -> Starlette:
    """The gateway ASGI app over ``state`` (started and stopped by the app's lifespan)."""
    mcp = McpEndpoint(state)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await state.start()
        try:
            async with mcp.running():
                yield
        finally:
            data_plane = state.data_plane
            state.data_plane = None
            if isinstance(data_plane, DataPlane):
                try:
                    await data_plane.aclose()
                except Exception:
                    logger.exception("closing the data plane failed")
            await state.stop()

    async def internal_error(_request: Request, exc: Exception) -> Response:
        logger.error("control-plane request failed: %r", exc)
        return e2b_error(500, "internal gateway error", should_retry=False)

    app = Starlette(
        routes=[*control_plane_routes(state), *console_routes(state), state.metrics.route()],
        exception_handlers={Exception: internal_error},
        middleware=[
            Middleware(
                MetricsMiddleware,
                metrics=state.metrics,
                plane_of=plane_classifier(state.options.domain),
            ),
            Middleware(DataPlaneDispatch, state=state),
            Middleware(McpDispatch, endpoint=mcp),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = state
    mcp.bind(app)
    return app
