"""E2B's snapshot routes, as the SDKs call them (``Sandbox.create_snapshot`` and friends).

* ``POST /sandboxes/{id}/snapshots`` ``{name?, memory?}``: 201 ``{snapshotID, names}`` once
  the snapshot is Ready. ``memory: true`` (E2B's "full" mode) is a Memory SandboxSnapshot;
  where the node cannot checkpoint it is deleted and answered 400 with ``error_code``
  ``snapshot_memory_unsupported`` and the controller's reason; without ``memory`` the
  snapshot is a filesystem one.
* ``GET /snapshots?sandboxID=&limit=&nextToken=``: the tenant's Ready snapshots, paged with
  the ``x-next-token`` header.
* ``DELETE /templates/{id}``: ``delete_snapshot`` (E2B keeps snapshots as templates); 204, or
  404 for an unknown id and for another tenant's alike.

``Sandbox.create(<snapshot id>)`` is a create (:mod:`.create`) whose template is a snapshot.

* ``POST /sandboxes/{id}/fork`` ``{timeout?, count?}``: one filesystem snapshot, then ``count``
  (1-20) sandboxes created from it at once; 201 with one ``{sandbox}`` or ``{error}`` per fork.
  The snapshot is kept (the forks' Pods pull its image) and listed; delete it once the forks
  are gone. Forks start with no ``envVars`` or metadata of the source.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kube_agent_sandbox.gateway import snapshots
from kube_agent_sandbox.gateway.controlplane.auth import authenticate, tenant_record
from kube_agent_sandbox.gateway.controlplane.body import BodyTooLarge, read_json_object
from kube_agent_sandbox.gateway.controlplane.create import (
    CreateFailed,
    create_failure_response,
    start_sandbox,
)
from kube_agent_sandbox.gateway.controlplane.ids import is_sandbox_id
from kube_agent_sandbox.gateway.controlplane.models import (
    BadRequest,
    parse_create,
    parse_timeout,
    sandbox_body,
)
from kube_agent_sandbox.gateway.controlplane.timing import PhaseTimer
from kube_agent_sandbox.gateway.errors import bad_request, e2b_error, sandbox_not_found
from kube_agent_sandbox.gateway.index import SandboxRecord
from kube_agent_sandbox.gateway.state import GatewayState

NEXT_TOKEN_HEADER: Final = "x-next-token"
MAX_LIMIT: Final = 100
MAX_FORKS: Final = 20


def snapshot_error(failure: snapshots.SnapshotError) -> Response:
    """The E2B answer to a failed snapshot step (never retried: each says what to change)."""
    if isinstance(failure, snapshots.SnapshotStillCommitting):
        return e2b_error(503, str(failure), should_retry=False)
    return e2b_error(
        failure.status, str(failure), should_retry=False, error_code=failure.error_code
    )


def _create_args(body: dict[str, object]) -> tuple[str | None, bool]:
    """``(name, memory)`` of a create-snapshot body.

    Raises:
        BadRequest: a field of the wrong type.
    """
    name = body.get("name")
    memory = body.get("memory", False)
    if name is not None and not isinstance(name, str):
        raise BadRequest("name must be a string")
    if not isinstance(memory, bool):
        raise BadRequest("memory must be a boolean")
    return name or None, memory


async def create_snapshot(request: Request, state: GatewayState) -> Response:
    """``POST /sandboxes/{id}/snapshots``."""
    record, error = tenant_record(request, state)
    if record is None:
        return error or sandbox_not_found("")
    try:
        name, memory = _create_args(await read_json_object(request, required=False))
    except BodyTooLarge as exc:
        return e2b_error(413, str(exc), should_retry=False)
    except BadRequest as exc:
        return bad_request(str(exc))
    try:
        info = await snapshots.take_snapshot(state, record, name=name, memory=memory)
    except snapshots.SnapshotError as exc:
        return snapshot_error(exc)
    return JSONResponse(info.e2b(), status_code=201)


async def list_snapshots(request: Request, state: GatewayState) -> Response:
    """``GET /snapshots``."""
    tenant = authenticate(request, state)
    if isinstance(tenant, Response):
        return tenant
    query = request.query_params
    sandbox_id = query.get("sandboxID") or None
    if sandbox_id is not None and not is_sandbox_id(sandbox_id):
        return JSONResponse([])  # no sandbox has that id, so no snapshot is of it
    limit_text = query.get("limit") or str(MAX_LIMIT)
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT:
        return bad_request(f"limit must be an integer in 1..{MAX_LIMIT}")
    try:
        page = await snapshots.list_snapshots(
            state,
            tenant.namespace,
            sandbox_id=sandbox_id,
            limit=int(limit_text),
            token=query.get("nextToken"),
        )
    except snapshots.SnapshotError as exc:
        return snapshot_error(exc)
    name = query.get("name")
    items = [i.e2b() for i in page.items if not name or i.snapshot_id == name]
    headers = {NEXT_TOKEN_HEADER: page.next_token} if page.next_token else None
    return JSONResponse(items, headers=headers)


async def delete_snapshot(request: Request, state: GatewayState) -> Response:
    """``DELETE /templates/{template_id}``: a snapshot's id (templates are not deleted here)."""
    tenant = authenticate(request, state)
    if isinstance(tenant, Response):
        return tenant
    try:
        await snapshots.delete_snapshot(state, tenant.namespace, request.path_params["template_id"])
    except snapshots.SnapshotError as exc:
        return snapshot_error(exc)
    return Response(status_code=204)


def _fork_args(body: dict[str, Any], default_timeout: int) -> tuple[int, int]:
    """``(count, timeout)`` of a fork body.

    Raises:
        BadRequest: a count outside 1..20 or a bad timeout.
    """
    count = body.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FORKS:
        raise BadRequest(f"count must be an integer in 1..{MAX_FORKS}")
    return count, parse_timeout(body.get("timeout"), default=default_timeout)


async def fork(request: Request, state: GatewayState) -> Response:
    """``POST /sandboxes/{id}/fork``: one snapshot, ``count`` sandboxes from it."""
    tenant = authenticate(request, state)
    if isinstance(tenant, Response):
        return tenant
    record, error = tenant_record(request, state)
    if record is None:
        return error or sandbox_not_found("")
    try:
        body = await read_json_object(request, required=False)
        count, timeout = _fork_args(body, state.options.default_timeout_seconds)
    except BodyTooLarge as exc:
        return e2b_error(413, str(exc), should_retry=False)
    except BadRequest as exc:
        return bad_request(str(exc))
    try:
        info = await snapshots.take_snapshot(state, record)
    except snapshots.SnapshotError as exc:
        return snapshot_error(exc)
    spec = parse_create(
        {"templateID": info.snapshot_id, "timeout": timeout},
        default_timeout=state.options.default_timeout_seconds,
    )
    started = await asyncio.gather(
        *(start_sandbox(state, tenant, spec, None, timer=PhaseTimer()) for _ in range(count)),
        return_exceptions=True,
    )
    results: list[dict[str, Any]] = []
    for outcome in started:
        if isinstance(outcome, SandboxRecord):
            sandbox = sandbox_body(outcome, tokens=state.tokens, domain=state.options.domain)
            results.append({"sandbox": sandbox})
        elif isinstance(outcome, CreateFailed):
            answer = create_failure_response(outcome)
            results.append({"error": json.loads(bytes(answer.body))})
        else:
            raise outcome
    return JSONResponse(results, status_code=201)
