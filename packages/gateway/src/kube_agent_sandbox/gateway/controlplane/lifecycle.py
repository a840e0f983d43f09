"""Connect (and resume), set-timeout, pause and kill of one sandbox.

Timeouts: a ``kill`` sandbox's E2B timeout is its claim's ``lifecycle.shutdownTime``; a
``pause`` sandbox's is the ``pause-at`` annotation on claim and Sandbox (the idle reconciler
suspends it then). Set-timeout overwrites the deadline from now; connect only ever extends
it. A paused sandbox does not expire (as on E2B): pause drops the deadline and connect
restores it from now. Every handler answers 404 for an unknown sandbox and for one of
another tenant alike.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiError, Obj
from kube_agent_sandbox.gateway import pausekeeps
from kube_agent_sandbox.gateway.controlplane.auth import tenant_record
from kube_agent_sandbox.gateway.controlplane.body import BodyTooLarge, read_json_object
from kube_agent_sandbox.gateway.controlplane.create import copy_policy_to_sandbox
from kube_agent_sandbox.gateway.controlplane.models import (
    ON_TIMEOUT_PAUSE,
    BadRequest,
    deadline,
    end_at,
    on_timeout,
    parse_timeout,
    sandbox_body,
)
from kube_agent_sandbox.gateway.envvars import EnvNotRestored
from kube_agent_sandbox.gateway.errors import bad_request, e2b_error, sandbox_not_found
from kube_agent_sandbox.gateway.index import SandboxRecord
from kube_agent_sandbox.gateway.state import GatewayState

logger = logging.getLogger(__name__)

# How long a deadline change waits for the gateway's own cache to show it (read-your-writes).
CACHE_CATCH_UP_SECONDS = 2.0


def sign_of_life(state: GatewayState, record: SandboxRecord) -> None:
    """Tell idle shutdown that a client just used the sandbox (set-timeout, connect)."""
    state.activity.keepalive(record)


async def set_deadline(
    state: GatewayState, record: SandboxRecord, seconds: int, *, extend_only: bool
) -> None:
    """Move the sandbox's E2B deadline to now + ``seconds`` (never earlier if ``extend_only``)."""
    now = datetime.now(UTC)
    target = now + timedelta(seconds=seconds)
    if extend_only and end_at(record) >= target and not record.suspended:
        return
    when = deadline(now, seconds)
    if on_timeout(record) == ON_TIMEOUT_PAUSE:
        patch = {"metadata": {"annotations": {c.ANNOTATION_PAUSE_AT: when}}}
        written = await state.api.patch(SANDBOX_CLAIMS, record.namespace, record.sandbox_id, patch)
        if record.sandbox is not None:
            await state.api.patch(
                SANDBOXES, record.namespace, record.sandbox["metadata"]["name"], patch
            )
    else:
        patch = {"spec": {"lifecycle": {"shutdownTime": when, "shutdownPolicy": "Delete"}}}
        written = await state.api.patch(SANDBOX_CLAIMS, record.namespace, record.sandbox_id, patch)
    await _cache_caught_up(state, record, written=written)


async def _cache_caught_up(
    state: GatewayState, record: SandboxRecord, *, written: Obj | None = None
) -> None:
    """Wait (briefly) until the index has seen the claim change this request just wrote.

    Reads come from informer caches; without this a ``get_info`` right after ``set_timeout``
    could still show the old end time. Bounded, because the write itself has succeeded.
    ``written`` is the claim the write returned: when its resourceVersion is the one the
    cache already has, the write changed nothing (a deadline set twice in one second) and
    there is nothing to wait for.
    """
    seen = record.claim.get("metadata", {}).get("resourceVersion")
    if written is not None and (written.get("metadata") or {}).get("resourceVersion") == seen:
        return

    def changed(fresh: SandboxRecord | None) -> bool:
        return fresh is None or fresh.claim.get("metadata", {}).get("resourceVersion") != seen

    with contextlib.suppress(TimeoutError):
        await state.index.wait_for(
            record.sandbox_id, changed, namespace=record.namespace, within=CACHE_CATCH_UP_SECONDS
        )


def cluster_error(exc: ApiError, sandbox_id: str) -> Response:
    """The answer to a failed write of one sandbox: 404 if it is gone, else 500, no retry."""
    if exc.not_found:
        return sandbox_not_found(sandbox_id)
    return e2b_error(500, f"cluster error: {exc.message}", should_retry=False)


async def connect(request: Request, state: GatewayState) -> Response:
    """``POST /v2/sandboxes/{id}/connect`` and ``POST /sandboxes/{id}/connect``."""
    record, error = tenant_record(request, state)
    if record is None:
        return error or sandbox_not_found("")
    try:
        body = await read_json_object(request, required=False)
        timeout = parse_timeout(body.get("timeout"), default=state.options.default_timeout_seconds)
    except BodyTooLarge as exc:
        return e2b_error(413, str(exc), should_retry=False)
    except BadRequest as exc:
        return bad_request(str(exc))
    resumed = False
    try:
        await set_deadline(state, record, timeout, extend_only=True)
        if record.suspended:
            record = await state.resumer.resume(record)
            resumed = True
        elif not record.ready:
            fresh = await state.index.wait_for(
                record.sandbox_id,
                lambda r: r is None or r.ready,
                namespace=record.namespace,
                within=state.options.create_timeout_seconds,
            )
            if fresh is None:
                return sandbox_not_found(record.sandbox_id)
            record = fresh
    except LookupError:
        return sandbox_not_found(record.sandbox_id)
    except TimeoutError:
        return e2b_error(
            503, f"sandbox {record.sandbox_id} is not ready yet", should_retry=True, retry_after=1
        )
    except EnvNotRestored as exc:  # the sandbox stays paused rather than lose its envVars
        return e2b_error(500, str(exc), should_retry=False)
    except ApiError as exc:
        return cluster_error(exc, record.sandbox_id)
    if resumed:
        try:
            await copy_policy_to_sandbox(state, record)
        except ApiError as exc:
            logger.warning("sandbox %s: policy not copied: %s", record.sandbox_id, exc)
    sign_of_life(state, record)
    body_out = sandbox_body(record, tokens=state.tokens, domain=state.options.domain)
    return JSONResponse(body_out, status_code=201 if resumed else 200)


async def set_timeout(request: Request, state: GatewayState) -> Response:
    """``POST /sandboxes/{id}/timeout`` ``{timeout}``: the deadline becomes now + timeout."""
    record, error = tenant_record(request, state)
    if record is None:
        return error or sandbox_not_found("")
    try:
        body = await read_json_object(request, required=False)
        if "timeout" not in body:
            raise BadRequest("timeout is required")
        timeout = parse_timeout(body["timeout"], default=0)
    except BodyTooLarge as exc:
        return e2b_error(413, str(exc), should_retry=False)
    except BadRequest as exc:
        return bad_request(str(exc))
    try:
        await set_deadline(state, record, timeout, extend_only=False)
    except ApiError as exc:
        return cluster_error(exc, record.sandbox_id)
    sign_of_life(state, record)
    return Response(status_code=204)


async def pause(request: Request, state: GatewayState) -> Response:
    """``POST /sandboxes/{id}/pause`` ``{memory?}``: suspend, keeping what the gateway's options
    allow (:mod:`kube_agent_sandbox.gateway.pausekeeps`); 409 when already paused.

    As on E2B, ``memory`` absent means true: with ``--pause-keeps-memory`` the cluster keeps
    the memory where the node can checkpoint, else the files. The answer's header
    ``X-Agent-Sandbox-Kept`` names what was asked of the cluster (``memory``, ``filesystem``
    or ``volumes``); the Sandbox's ``suspend-snapshot`` annotation shows what was kept. A pause
    that asked for memory the options do not keep is logged (E2B's JavaScript SDK before 2.46
    sent ``memory: true`` on every ``pause()``, so refusing it would break the default call).
    """
    record, error = tenant_record(request, state)
    if record is None:
        return error or sandbox_not_found("")
    try:
        body = await read_json_object(request, required=False)
    except BodyTooLarge as exc:
        return e2b_error(413, str(exc), should_retry=False)
    except BadRequest as exc:
        return bad_request(str(exc))
    memory = body.get("memory")
    if memory is None:
        memory = True  # E2B's API default: a full snapshot
    if not isinstance(memory, bool):
        return bad_request("memory must be a boolean")
    if record.suspended:
        return e2b_error(409, f"sandbox {record.sandbox_id} is already paused")
    if record.sandbox is None:
        return e2b_error(409, f"sandbox {record.sandbox_id} is still starting")
    try:
        await suspend_sandbox(state, record, record.sandbox, memory=memory)
    except ApiError as exc:
        return cluster_error(exc, record.sandbox_id)
    kept = pausekeeps.kept(state.options, memory=memory)
    state.metrics.pauses_total.labels(memory=str(memory).lower(), kept=kept).inc()
    if memory and kept != pausekeeps.KEPT_MEMORY:
        logger.info(
            "sandbox %s: pause asked to keep memory; %s kept (--pause-keeps-memory is off)",
            record.sandbox_id,
            "its files are" if kept == pausekeeps.KEPT_FILES else "only its volumes are",
        )
    return Response(status_code=204, headers={pausekeeps.KEPT_HEADER: kept})


async def suspend_sandbox(
    state: GatewayState, record: SandboxRecord, sandbox: Obj, *, memory: bool
) -> None:
    """Suspend the bound ``sandbox`` and drop its E2B deadline (pause; the console's suspend).

    Args:
        state: The gateway.
        record: The sandbox's record.
        sandbox: Its Sandbox.
        memory: Keep the memory too, where the options allow (pause's ``memory``).

    Raises:
        ApiError: a write failed.
    """
    annotations: dict[str, str | None] = {c.ANNOTATION_PAUSE_AT: None}
    # in the suspend's own write: sandboxes created before the options get them too
    annotations.update(pausekeeps.opt_in(state.options, memory=memory))
    await state.api.patch(
        SANDBOXES,
        record.namespace,
        sandbox["metadata"]["name"],
        {
            "spec": {"operatingMode": c.OPERATING_MODE_SUSPENDED},
            "metadata": {"annotations": annotations},
        },
    )
    # paused sandboxes do not time out; connect sets a fresh deadline
    claim_patch: dict[str, Any] = {"metadata": {"annotations": {c.ANNOTATION_PAUSE_AT: None}}}
    if (record.claim.get("spec") or {}).get("lifecycle"):
        claim_patch["spec"] = {"lifecycle": None}
    await state.api.patch(SANDBOX_CLAIMS, record.namespace, record.sandbox_id, claim_patch)
    logger.info("sandbox %s/%s paused", record.namespace, record.sandbox_id)


async def kill(request: Request, state: GatewayState) -> Response:
    """``DELETE /sandboxes/{id}``: delete the claim (GC removes Sandbox and Pod)."""
    record, error = tenant_record(request, state)
    if record is None:
        return error or sandbox_not_found("")
    try:
        await state.api.delete(SANDBOX_CLAIMS, record.namespace, record.sandbox_id)
    except ApiError as exc:
        return cluster_error(exc, record.sandbox_id)
    # The pod outlives the claim for a moment (garbage collection): until the cache has seen
    # the delete, the data plane would still route to it and ``is_running()`` say True.
    await _cache_caught_up(state, record)
    logger.info("sandbox %s/%s killed", record.namespace, record.sandbox_id)
    return Response(status_code=204)
