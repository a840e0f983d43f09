"""The control plane's path table: v2 and v1 spellings of the E2B endpoints."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kube_agent_sandbox.gateway.state import GatewayState


def control_plane_routes(state: GatewayState) -> list[Route]:
    """Routes of the E2B control plane over ``state``."""

    async def health(_request: Request) -> Response:
        if not state.started:
            return JSONResponse({"status": "starting"}, status_code=503)
        return JSONResponse({"status": "ok"})

    return [Route("/health", health, methods=["GET"])]
