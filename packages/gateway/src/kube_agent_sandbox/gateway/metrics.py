"""The gateway's Prometheus metrics and the ASGI middleware that records them.

Every request is counted by plane (``control``, ``data``, ``mcp``, ``console``: the web console,
whose long polls would otherwise swamp the control plane's latencies), method and status code, and
timed to the end of its response body: a streamed command's duration is the stream's. Requests
still in flight are a gauge per plane; on the data plane these are the open streams (process
output, file transfers, WebSockets). Resumes caused by traffic or by an E2B connect are counted
by result, and so are reloads of the TLS certificate (whose expiry is a gauge). The metrics
live on a registry of the gateway's own, served at ``GET /metrics``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

METRICS_PATH: Final = "/metrics"
PLANE_CONTROL: Final = "control"
PLANE_DATA: Final = "data"
PLANE_MCP: Final = "mcp"
PLANE_CONSOLE: Final = "console"
RESUME_OK: Final = "ok"
RESUME_FAILED: Final = "failed"
RESUME_TIMEOUT: Final = "timeout"
ENV_STORE: Final = "store"
ENV_RESTORE: Final = "restore"
TLS_RELOAD_OK: Final = "ok"
TLS_RELOAD_FAILED: Final = "failed"
# From a 5 ms control-plane read to a two-minute stream of command output.
_DURATION_BUCKETS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    120.0,
)
# A WebSocket's close code is not an HTTP status; it is counted as 101 (switched protocols).
_WEBSOCKET_CODE: Final = "101"

PlaneOf = Callable[[Scope], str]
"""The plane (:data:`PLANE_CONTROL`, :data:`PLANE_DATA`, :data:`PLANE_MCP`) of a request."""


class GatewayMetrics:
    """The gateway's metrics, on a registry of their own.

    Args:
        registry: Where to register; a fresh one when omitted.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.requests_total = Counter(
            "agent_sandbox_gateway_requests",
            "Requests handled by the gateway, by plane, method and status code.",
            ["plane", "method", "code"],
            registry=reg,
        )
        self.request_duration_seconds = Histogram(
            "agent_sandbox_gateway_request_duration_seconds",
            "Time from a request's arrival to the end of its response body, by plane and method.",
            ["plane", "method"],
            buckets=_DURATION_BUCKETS,
            registry=reg,
        )
        self.inflight_requests = Gauge(
            "agent_sandbox_gateway_inflight_requests",
            "Requests (on the data plane: streams) currently open, by plane.",
            ["plane"],
            registry=reg,
        )
        self.resumes_total = Counter(
            "agent_sandbox_gateway_resumes",
            "Resumes of suspended sandboxes started by the gateway, by result.",
            ["result"],
            registry=reg,
        )
        self.env_failures_total = Counter(
            "agent_sandbox_gateway_env_failures",
            "Sandbox envVars the gateway could not keep (store: the create failed) or read back"
            " (restore: the resume failed), e.g. without its tenant role in the namespace.",
            ["operation"],
            registry=reg,
        )
        self.tls_reloads_total = Counter(
            "agent_sandbox_gateway_tls_certificate_reloads",
            "Changes of the TLS certificate files seen by the gateway, by result (ok: now"
            " served; failed: not loadable, the previous certificate stays).",
            ["result"],
            registry=reg,
        )
        self.tls_certificate_expiry = Gauge(
            "agent_sandbox_gateway_tls_certificate_expiry_timestamp_seconds",
            "Expiry (Unix time) of the TLS certificate the gateway serves new connections"
            " with; 0 without TLS.",
            registry=reg,
        )
        self.pauses_total = Counter(
            "agent_sandbox_gateway_pauses",
            "Pauses through the E2B API, by whether they asked to keep memory (`memory`, true"
            " unless false as on E2B) and what the gateway asked the cluster to keep (memory:"
            " with the files as the fallback where a node cannot checkpoint; filesystem;"
            " volumes); the Sandbox's suspend-snapshot annotation says what was kept.",
            ["memory", "kept"],
            registry=reg,
        )
        self.unknown_api_keys_total = Counter(
            "agent_sandbox_gateway_unknown_api_keys",
            "Well-formed API keys presented that no key Secret of the gateway's namespace"
            " holds (revoked, mistyped, or stored the old way: `keys migrate`).",
            registry=reg,
        )
        self.legacy_api_keys = Gauge(
            "agent_sandbox_gateway_legacy_api_keys",
            "API-key Secrets of the old layout (in tenant namespaces, not read any more) found"
            " at startup; 0 also when the gateway may not look (the intended RBAC).",
            registry=reg,
        )
        self.keyless_tenant_namespaces = Gauge(
            "agent_sandbox_gateway_keyless_tenant_namespaces",
            "Namespaces holding the gateway's sandboxes that no API key of its namespace"
            " grants, at startup (their keys may be stored the old way: `keys migrate`).",
            registry=reg,
        )
        for plane in (PLANE_CONTROL, PLANE_DATA, PLANE_MCP, PLANE_CONSOLE):
            self.inflight_requests.labels(plane)
        for result in (RESUME_OK, RESUME_FAILED, RESUME_TIMEOUT):
            self.resumes_total.labels(result)
        for operation in (ENV_STORE, ENV_RESTORE):
            self.env_failures_total.labels(operation)
        for result in (TLS_RELOAD_OK, TLS_RELOAD_FAILED):
            self.tls_reloads_total.labels(result)

    def record_resume(self, error: BaseException | None) -> None:
        """Count one finished resume attempt (``error`` None when it succeeded)."""
        if error is None:
            result = RESUME_OK
        elif isinstance(error, TimeoutError):
            result = RESUME_TIMEOUT
        else:
            result = RESUME_FAILED
        self.resumes_total.labels(result).inc()

    def route(self) -> Route:
        """``GET /metrics`` in Prometheus' text format."""

        async def metrics(_request: Request) -> Response:
            return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

        return Route(METRICS_PATH, metrics, methods=["GET"])


class MetricsMiddleware:
    """ASGI middleware that records every HTTP and WebSocket request in :class:`GatewayMetrics`.

    Args:
        app: The app to time.
        metrics: Where to record.
        plane_of: The plane a request belongs to (decided by the app's dispatch rules).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: GatewayMetrics,
        plane_of: PlaneOf,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.plane_of = plane_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Time one request; other scopes (lifespan) pass through."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        plane = self.plane_of(scope)
        method = str(scope.get("method") or "WEBSOCKET")
        code = "500"

        async def recording_send(message: Message) -> None:
            nonlocal code
            kind = message["type"]
            if kind == "http.response.start":
                code = str(message["status"])
            elif kind == "websocket.accept":
                code = _WEBSOCKET_CODE
            elif kind == "websocket.close" and code == "500":
                code = "403"  # closed before it was accepted: refused
            await send(message)

        inflight = self.metrics.inflight_requests.labels(plane)
        inflight.inc()
        started = time.monotonic()
        try:
            await self.app(scope, receive, recording_send)
        finally:
            inflight.dec()
            self.metrics.request_duration_seconds.labels(plane, method).observe(
                time.monotonic() - started
            )
            self.metrics.requests_total.labels(plane, method, code).inc()
