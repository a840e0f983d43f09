"""API key -> tenant for every control-plane request (``X-API-KEY``, any case)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from kube_agent_sandbox.gateway.errors import sandbox_not_found, unauthorized
from kube_agent_sandbox.gateway.index import SandboxRecord
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


def tenant_record(
    request: Request, state: GatewayState
) -> tuple[SandboxRecord | None, Response | None]:
    """The sandbox of the path's ``sandbox_id`` if it is the request's tenant's.

    Returns:
        ``(record, None)``, or ``(None, response)``: 401 without a valid key, 404 for an
        unknown sandbox and for one of another tenant alike.
    """
    tenant = authenticate(request, state)
    if isinstance(tenant, Response):
        return None, tenant
    sandbox_id = request.path_params["sandbox_id"]
    record = state.index.lookup(sandbox_id, namespace=tenant.namespace)
    if record is None:
        return None, sandbox_not_found(sandbox_id)
    return record, None
