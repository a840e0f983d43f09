"""The daemon's ASGI application: envd's REST routes plus the Connect services on one port.

Routes: ``GET /health`` (204, never authenticated), ``GET /envs``, ``POST /init``, ``GET|POST
/files``, ``POST /files/compose``, ``GET /metrics``, and ``POST /process.Process/*`` and ``POST
/filesystem.Filesystem/*``. Once ``/init`` has set an access token, every other request must
carry it in ``X-Access-Token`` (checked in constant time) or gets 401; ``/files`` also accepts
the SDK's signed URLs (``signature`` and ``signature_expiration`` query parameters), not
``/files/compose`` (envd's rule: its paths are in the body, which a signature does not cover).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kube_agent_sandbox.sandboxd import files_compose, files_rest
from kube_agent_sandbox.sandboxd.connect_codec import Code, ConnectError, Method, dispatch
from kube_agent_sandbox.sandboxd.filesystem_rpc import FilesystemService
from kube_agent_sandbox.sandboxd.heartbeat import DEFAULT_INTERVAL_SECONDS, Heartbeat
from kube_agent_sandbox.sandboxd.init_state import ENVD_VERSION, DaemonState
from kube_agent_sandbox.sandboxd.port_forward import PortForwarder
from kube_agent_sandbox.sandboxd.process_manager import ProcessManager
from kube_agent_sandbox.sandboxd.process_rpc import ProcessService

logger = logging.getLogger(__name__)

TOKEN_HEADER = b"x-access-token"
UNAUTHENTICATED_PATHS = frozenset({"/health"})
MAX_INIT_BYTES = 1024 * 1024
ALL_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@dataclass
class Daemon:
    """Everything one daemon instance holds (exposed as ``app.state.daemon``)."""

    state: DaemonState
    processes: ProcessManager
    heartbeat: Heartbeat
    methods: dict[str, Method]


def _is_rpc_path(path: str) -> bool:
    first = path.lstrip("/").split("/", 1)[0]
    return "." in first and path.count("/") == 2


class AccessTokenMiddleware:
    """Refuse requests without the access token once one is configured."""

    def __init__(self, app: ASGIApp, state: DaemonState) -> None:
        """Wrap an app.

        Args:
            app: The application to protect.
            state: Where the configured token lives.
        """
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the token of HTTP requests, then pass them on."""
        if scope["type"] != "http" or self.state.access_token is None:
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path in UNAUTHENTICATED_PATHS:
            await self.app(scope, receive, send)
            return
        presented: str | None = None
        for name, value in scope.get("headers", []):
            if name == TOKEN_HEADER:
                presented = value.decode("latin-1")
                break
        if self.state.token_ok(presented) or (
            presented is None and path == "/files" and self._signed(scope)
        ):
            await self.app(scope, receive, send)
            return
        message = "missing access token" if presented is None else "invalid access token"
        if _is_rpc_path(path):
            body: dict[str, Any] = ConnectError(Code.UNAUTHENTICATED, message).to_json()
        else:
            body = {"code": 401, "message": message}
        response = JSONResponse(body, status_code=401)
        await response(scope, receive, send)

    def _signed(self, scope: Scope) -> bool:
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        signatures = query.get("signature")
        if not signatures:
            return False
        expiration = query.get("signature_expiration")
        return self.state.signature_ok(
            path=query.get("path", [""])[0],
            operation="write" if scope.get("method") == "POST" else "read",
            username=query.get("username", [""])[0],
            signature=signatures[0],
            expiration=expiration[0] if expiration else None,
        )


async def _health(request: Request) -> Response:
    del request
    return Response(status_code=204)


def _apply_init(state: DaemonState, body: dict[str, Any]) -> None:
    """Apply an ``/init`` body.

    Raises:
        ValueError: a field has the wrong type.
    """
    token = body.get("accessToken")
    if token is not None:
        if not isinstance(token, str):
            raise ValueError("accessToken must be a string")
        state.access_token = token or None
    env_vars = body.get("envVars")
    if env_vars is not None:
        if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
        ):
            raise ValueError("envVars must map strings to strings")
        state.env_vars.update(env_vars)
    for field, attribute in (
        ("defaultUser", "default_user"),
        ("defaultWorkdir", "default_workdir"),
        ("heartbeatUrl", "heartbeat_url"),
        ("sandboxId", "sandbox_id"),
    ):
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"{field} must be a string")
        if value:
            setattr(state, attribute, value)
    url = state.heartbeat_url
    if url is not None and not url.startswith(("http://", "https://")):
        state.heartbeat_url = None
        raise ValueError("heartbeatUrl must be an http(s) URL")


def _metrics() -> dict[str, Any]:
    result: dict[str, Any] = {"ts": int(time.time()), "cpu_count": os.cpu_count() or 1}
    with contextlib.suppress(OSError, ValueError):
        load1 = os.getloadavg()[0]
        result["cpu_used_pct"] = round(min(100.0, 100.0 * load1 / (os.cpu_count() or 1)), 2)
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as handle:
        values = {}
        for line in handle:
            key, _, rest = line.partition(":")
            values[key] = int(rest.split()[0]) * 1024
        result["mem_total"] = values.get("MemTotal", 0)
        result["mem_used"] = values.get("MemTotal", 0) - values.get("MemAvailable", 0)
        result["mem_cache"] = values.get("Cached", 0)
    with contextlib.suppress(OSError):
        fs = os.statvfs("/")
        result["disk_total"] = fs.f_blocks * fs.f_frsize
        result["disk_used"] = (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    return result


def build_app(
    state: DaemonState | None = None,
    *,
    heartbeat_interval: float = DEFAULT_INTERVAL_SECONDS,
    forwarder: PortForwarder | None = None,
) -> Starlette:
    """Build the daemon's ASGI app.

    Args:
        state: Initial configuration (default: nothing set until ``/init``).
        heartbeat_interval: Seconds between activity heartbeats while processes run.
        forwarder: Exposes loopback-only services on the pod address while the app runs.

    Returns:
        The application; ``app.state.daemon`` is its :class:`Daemon`.
    """
    state = state if state is not None else DaemonState()
    processes = ProcessManager()
    heartbeat = Heartbeat(state, lambda: processes.running, interval=heartbeat_interval)
    processes.listeners.append(heartbeat.poke)
    filesystem = FilesystemService(state)
    methods = {
        **ProcessService(state, processes).methods(),
        **filesystem.methods(),
    }
    daemon = Daemon(state=state, processes=processes, heartbeat=heartbeat, methods=methods)

    async def envs(request: Request) -> Response:
        del request
        return JSONResponse(dict(state.env_vars))

    async def init(request: Request) -> Response:
        raw = await request.body()
        if len(raw) > MAX_INIT_BYTES:
            return files_rest.api_error(413, "init body too large")
        try:
            body = json.loads(raw) if raw.strip() else {}
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            _apply_init(state, body)
        except (ValueError, UnicodeDecodeError) as exc:
            return files_rest.api_error(400, f"invalid init request: {exc}")
        logger.info(
            "initialised: default user %s, %d env vars, heartbeat %s",
            state.default_user,
            len(state.env_vars),
            "on" if state.heartbeat_url else "off",
        )
        return Response(status_code=204)

    async def files_get(request: Request) -> Response:
        return await files_rest.download(request, state)

    async def files_post(request: Request) -> Response:
        return await files_rest.upload(request, state)

    async def files_compose_post(request: Request) -> Response:
        return await files_compose.compose(request, state)

    async def metrics(request: Request) -> Response:
        del request
        return JSONResponse(_metrics())

    async def rpc(request: Request) -> Response:
        return await dispatch(request, methods.get(request.url.path))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        del app
        heartbeat.start()
        if forwarder is not None:
            forwarder.start()
        try:
            yield
        finally:
            if forwarder is not None:
                await forwarder.stop()
            await heartbeat.stop()
            filesystem.close()
            await processes.shutdown()

    app = Starlette(
        routes=[
            Route("/health", _health, methods=["GET", "HEAD"]),
            Route("/envs", envs, methods=["GET"]),
            Route("/init", init, methods=["POST"]),
            Route("/files", files_get, methods=["GET", "HEAD"]),
            Route("/files", files_post, methods=["POST"]),
            # Every method, so that a GET gets a REST error rather than the RPC route's.
            Route("/files/compose", files_compose_post, methods=list(ALL_METHODS)),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/{service}/{method}", rpc, methods=["GET", "POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.daemon = daemon
    app.add_middleware(AccessTokenMiddleware, state=state)
    logger.debug("sandboxd app built (envd %s semantics)", ENVD_VERSION)
    return app
