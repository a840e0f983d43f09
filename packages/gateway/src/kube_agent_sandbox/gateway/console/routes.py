"""The console's HTTP surface: the static page and its JSON API, scoped by API key.

* ``GET /console/`` and ``/console/static/<file>``: the page (no key needed: it holds no data).
* ``GET /console/api/state``: the tenant's sandboxes and pools (:mod:`.view`). A long poll:
  with ``X-Console-Known: <tag>`` (the ``tag`` of the last answer) it waits until the view
  changes, then answers it; after :data:`POLL_SECONDS` without a change it answers 204.
* ``GET /console/api/sandboxes/{id}``: one row with its recent Events and last log lines.
* ``POST /console/api/sandboxes/{id}/suspend`` and ``/resume``, ``DELETE
  /console/api/sandboxes/{id}``.
* ``POST /console/api/sandboxes/{id}/snapshot``: a filesystem snapshot of a running gateway
  sandbox, answered once Ready (201 with its id and image) or with the reason it failed, as
  E2B's ``create_snapshot`` (:mod:`kube_agent_sandbox.gateway.snapshots`).

Every API call carries the key as ``X-API-KEY`` (never in a URL): 401 without a valid key,
404 for a sandbox the tenant does not have, another tenant's included.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from importlib import resources
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiError, Obj
from kube_agent_sandbox.gateway.console import details, view
from kube_agent_sandbox.gateway.controlplane.auth import authenticate
from kube_agent_sandbox.gateway.controlplane.lifecycle import set_deadline, suspend_sandbox
from kube_agent_sandbox.gateway.controlplane.snapshots import snapshot_error
from kube_agent_sandbox.gateway.errors import e2b_error, sandbox_not_found
from kube_agent_sandbox.gateway.snapshots import SnapshotError, take_snapshot
from kube_agent_sandbox.gateway.state import GatewayState
from kube_agent_sandbox.gateway.tenants import Tenant

logger = logging.getLogger(__name__)

PREFIX: Final = "/console"
POLL_SECONDS: Final = 25.0
"""How long a long poll waits for a change (under common proxies' idle timeouts)."""
COALESCE_SECONDS: Final = 0.25
"""After a change, how long to gather more before answering: a burst of changes (a pool
filling, a thousand creates) becomes a few answers rather than one per object."""
KNOWN_HEADER: Final = "x-console-known"
STATIC_FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
SECURITY_HEADERS: Final = {
    # the page loads nothing but its own files and talks only to this gateway
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _json(body: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":")),
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _static(name: str) -> Response:
    media_type = STATIC_FILES.get(name)
    if media_type is None:
        return Response("not found", status_code=404, media_type="text/plain")
    text = resources.files(__package__).joinpath("static", name).read_bytes()
    return Response(text, media_type=media_type, headers=SECURITY_HEADERS)


class Console:
    """The console's endpoints over one gateway state."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state

    def routes(self) -> list[BaseRoute]:
        """The console's routes (all under :data:`PREFIX`)."""
        sid = "{sandbox_id}"
        api = f"{PREFIX}/api"
        return [
            Route(PREFIX, self.redirect, methods=["GET"]),
            Route(f"{PREFIX}/", self.page, methods=["GET"]),
            Route(f"{PREFIX}/static/{{name}}", self.static, methods=["GET"]),
            Route(f"{api}/state", self.view, methods=["GET"]),
            Route(f"{api}/sandboxes/{sid}", self.details, methods=["GET"]),
            Route(f"{api}/sandboxes/{sid}", self.delete, methods=["DELETE"]),
            Route(f"{api}/sandboxes/{sid}/suspend", self.suspend, methods=["POST"]),
            Route(f"{api}/sandboxes/{sid}/resume", self.resume, methods=["POST"]),
            Route(f"{api}/sandboxes/{sid}/snapshot", self.snapshot, methods=["POST"]),
        ]

    # -- the page ----------------------------------------------------------------------------
    async def redirect(self, _request: Request) -> Response:
        """``/console`` -> ``/console/`` (the page's relative URLs need the slash)."""
        return RedirectResponse(f"{PREFIX}/", status_code=308)

    async def page(self, _request: Request) -> Response:
        """The page itself."""
        return _static("index.html")

    async def static(self, request: Request) -> Response:
        """The page's script and style sheet (only the files it ships)."""
        return _static(str(request.path_params["name"]))

    # -- reads -------------------------------------------------------------------------------
    def _snapshot(self, tenant: Tenant) -> tuple[bytes, str]:
        body = view.snapshot(self.state.index, tenant.namespace, self.state.activity.last_seen)
        encoded = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        tag = hashlib.sha256(encoded).hexdigest()[:24]
        return encoded, tag

    async def view(self, request: Request) -> Response:
        """``GET /console/api/state``: the view, at once or (long poll) when it changes."""
        tenant = authenticate(request, self.state)
        if isinstance(tenant, Response):
            return tenant
        known = request.headers.get(KNOWN_HEADER)
        index = self.state.index
        deadline = time.monotonic() + POLL_SECONDS
        while True:
            generation = index.generation
            encoded, tag = self._snapshot(tenant)
            if tag != known:
                # the tag is inside the body, so the page keeps one object
                return Response(
                    b'{"tag":"' + tag.encode() + b'",' + encoded[1:],
                    media_type="application/json",
                    headers={"Cache-Control": "no-store"},
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Response(status_code=204, headers={"Cache-Control": "no-store"})
            if await index.wait_changed(generation, within=remaining) != generation:
                await asyncio.sleep(min(COALESCE_SECONDS, max(0.0, deadline - time.monotonic())))

    def _row(self, tenant: Tenant, sandbox_id: str) -> dict[str, Any] | None:
        rows = view.sandbox_rows(self.state.index, tenant.namespace, self.state.activity.last_seen)
        return next((r for r in rows if r["id"] == sandbox_id), None)

    async def details(self, request: Request) -> Response:
        """``GET /console/api/sandboxes/{id}``: the row, its recent Events, its log's tail."""
        target = self._target(request)
        if isinstance(target, Response):
            return target
        tenant, row = target
        objects = [("SandboxClaim", row["claim"]), ("Sandbox", row["sandbox"]), ("Pod", row["pod"])]
        wanted = [(kind, str(name)) for kind, name in objects if name]

        async def events() -> tuple[list[dict[str, Any]], str]:
            try:
                return await details.recent_events(self.state, tenant.namespace, wanted), ""
            except ApiError as exc:
                return [], f"Events unavailable ({exc.status}): {exc.message}"

        # both at once: a node slow to serve logs does not delay the Events
        (found, events_error), log = await asyncio.gather(
            events(), details.log_tail(self.state, tenant.namespace, row["pod"])
        )
        return _json({"sandbox": row, "events": found, "eventsError": events_error, "log": log})

    # -- actions -----------------------------------------------------------------------------
    def _target(self, request: Request) -> tuple[Tenant, dict[str, Any]] | Response:
        tenant = authenticate(request, self.state)
        if isinstance(tenant, Response):
            return tenant
        sandbox_id = str(request.path_params["sandbox_id"])
        row = self._row(tenant, sandbox_id)
        if row is None:
            return sandbox_not_found(sandbox_id)
        return tenant, row

    def _sandbox(self, tenant: Tenant, row: dict[str, Any]) -> Obj | None:
        name = row["sandbox"]
        return self.state.index.sandboxes.get(tenant.namespace, name) if name else None

    async def _act(self, request: Request, action: str) -> Response:
        target = self._target(request)
        if isinstance(target, Response):
            return target
        tenant, row = target
        refused = row["actions"].get(action)
        if refused:
            return e2b_error(409, f"cannot {action} {row['id']}: {refused}")
        try:
            if row["kind"] == view.KIND_GATEWAY:
                await self._act_gateway(tenant, row["id"], action)
            else:
                await self._act_bare(tenant, row, action)
        except LookupError:
            return sandbox_not_found(row["id"])
        except TimeoutError:
            return e2b_error(503, f"{row['id']} did not become ready in time", should_retry=True)
        except ApiError as exc:
            if exc.not_found:
                return sandbox_not_found(row["id"])
            return e2b_error(500, f"cluster error: {exc.message}", should_retry=False)
        logger.info(
            "console: %s %s/%s (key %s)", action, tenant.namespace, row["id"], tenant.key_id
        )
        return Response(status_code=204)

    async def _act_gateway(self, tenant: Tenant, sandbox_id: str, action: str) -> None:
        """An action on a gateway sandbox: what the E2B API's pause, connect and kill do."""
        state = self.state
        record = state.index.lookup(sandbox_id, namespace=tenant.namespace)
        if record is None:
            raise LookupError(sandbox_id)
        if action == "delete":
            await state.api.delete(SANDBOX_CLAIMS, tenant.namespace, sandbox_id)
        elif action == "suspend" and record.sandbox is not None:
            # as E2B's pause without a body: the memory too, where --pause-keeps-memory allows
            await suspend_sandbox(state, record, record.sandbox, memory=True)
        elif action == "resume":
            # as connect: a fresh deadline (pause dropped it), then the resume itself
            timeout = state.resumer.timeout_seconds(record)
            await set_deadline(state, record, timeout, extend_only=True)
            await state.resumer.resume(record)

    async def _act_bare(self, tenant: Tenant, row: dict[str, Any], action: str) -> None:
        """Suspend or resume a Sandbox made without the gateway: its ``operatingMode``."""
        sandbox = self._sandbox(tenant, row)
        if sandbox is None:
            raise LookupError(row["id"])
        mode = c.OPERATING_MODE_SUSPENDED if action == "suspend" else c.OPERATING_MODE_RUNNING
        await self.state.api.patch(
            SANDBOXES, tenant.namespace, row["sandbox"], {"spec": {"operatingMode": mode}}
        )

    async def suspend(self, request: Request) -> Response:
        """``POST /console/api/sandboxes/{id}/suspend``."""
        return await self._act(request, "suspend")

    async def resume(self, request: Request) -> Response:
        """``POST /console/api/sandboxes/{id}/resume``."""
        return await self._act(request, "resume")

    async def delete(self, request: Request) -> Response:
        """``DELETE /console/api/sandboxes/{id}``."""
        return await self._act(request, "delete")

    async def snapshot(self, request: Request) -> Response:
        """``POST /console/api/sandboxes/{id}/snapshot``: 201 ``{snapshotID, image, size}``."""
        target = self._target(request)
        if isinstance(target, Response):
            return target
        tenant, row = target
        refused = row["actions"].get("snapshot")
        if refused:
            return e2b_error(409, f"cannot snapshot {row['id']}: {refused}")
        record = self.state.index.lookup(row["id"], namespace=tenant.namespace)
        if record is None:
            return sandbox_not_found(row["id"])
        try:
            info = await take_snapshot(self.state, record)
        except SnapshotError as exc:
            return snapshot_error(exc)
        logger.info(
            "console: snapshot %s of %s/%s (key %s)",
            info.snapshot_id,
            tenant.namespace,
            row["id"],
            tenant.key_id,
        )
        body = {"snapshotID": info.snapshot_id, "image": info.image, "size": info.size}
        return _json(body, status=201)


def console_routes(state: GatewayState) -> list[BaseRoute]:
    """The console's routes over ``state``."""
    return Console(state).routes()
