"""The control plane's path table: v2 and v1 spellings of the E2B endpoints."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kube_agent_sandbox.gateway.activity import heartbeat_route
from kube_agent_sandbox.gateway.controlplane.create import create_sandbox
from kube_agent_sandbox.gateway.controlplane.lifecycle import connect, kill, pause, set_timeout
from kube_agent_sandbox.gateway.controlplane.network import update_network
from kube_agent_sandbox.gateway.controlplane.query import get_metrics, get_sandbox, list_sandboxes
from kube_agent_sandbox.gateway.controlplane.snapshots import (
    create_snapshot,
    delete_snapshot,
    fork,
    list_snapshots,
)
from kube_agent_sandbox.gateway.state import GatewayState

Handler = Callable[[Request, GatewayState], Awaitable[Response]]


def control_plane_routes(state: GatewayState) -> list[Route]:
    """Routes of the E2B control plane over ``state``."""

    def bind(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await handler(request, state)

        endpoint.__name__ = handler.__name__
        return endpoint

    async def health(_request: Request) -> Response:
        if not state.started:
            return JSONResponse({"status": "starting"}, status_code=503)
        return JSONResponse({"status": "ok"})

    sid = "{sandbox_id}"
    return [
        heartbeat_route(state),
        Route("/health", health, methods=["GET"]),
        Route("/v2/sandboxes", bind(create_sandbox), methods=["POST"]),
        Route("/sandboxes", bind(create_sandbox), methods=["POST"]),
        Route("/v2/sandboxes", bind(list_sandboxes), methods=["GET"]),
        Route("/sandboxes", bind(list_sandboxes), methods=["GET"]),
        Route(f"/v2/sandboxes/{sid}/connect", bind(connect), methods=["POST"]),
        Route(f"/sandboxes/{sid}/connect", bind(connect), methods=["POST"]),
        Route(f"/sandboxes/{sid}", bind(get_sandbox), methods=["GET"]),
        Route(f"/sandboxes/{sid}", bind(kill), methods=["DELETE"]),
        Route(f"/sandboxes/{sid}/timeout", bind(set_timeout), methods=["POST"]),
        Route(f"/sandboxes/{sid}/pause", bind(pause), methods=["POST"]),
        Route(f"/sandboxes/{sid}/metrics", bind(get_metrics), methods=["GET"]),
        Route(f"/sandboxes/{sid}/network", bind(update_network), methods=["PUT"]),
        Route(f"/sandboxes/{sid}/snapshots", bind(create_snapshot), methods=["POST"]),
        Route(f"/sandboxes/{sid}/fork", bind(fork), methods=["POST"]),
        Route("/snapshots", bind(list_snapshots), methods=["GET"]),
        Route("/templates/{template_id}", bind(delete_snapshot), methods=["DELETE"]),
    ]
