"""API key -> tenant for every control-plane request (``X-API-KEY``, any case)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from kube_agent_sandbox.gateway.errors import unauthorized
from kube_agent_sandbox.gateway.state import GatewayState
from kube_agent_sandbox.gateway.tenants import Tenant


def authenticate(request: Request, state: GatewayState) -> Tenant | Response:
    """The request's tenant, or the 401 response to send.

    Starlette's headers are case-insensitive, so ``X-API-KEY``, ``X-API-Key`` and
    ``x-api-key`` are the same header.
    """
    tenant = state.tenants.authenticate(request.headers.get("x-api-key"))
    if tenant is None:
        return unauthorized()
    return tenant
