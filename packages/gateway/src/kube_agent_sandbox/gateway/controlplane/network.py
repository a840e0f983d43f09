"""``PUT /sandboxes/{id}/network``: E2B's ``update_network`` on a running sandbox.

The body replaces the outbound rules (a field left out is cleared, as on E2B): the claim's
``e2b-egress`` annotation is rewritten, then the sandbox's NetworkPolicy follows it in place:
patched when rules remain, created when there was none, deleted when nothing is blocked any
more. ``egressProxy``, ``dnsServers`` and ``rules`` are ignored here as at create.
"""

from __future__ import annotations

import contextlib
import logging

from starlette.requests import Request
from starlette.responses import Response

from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.runtime import ApiError, Obj
from kube_agent_sandbox.gateway.annotations import ANNOTATION_EGRESS
from kube_agent_sandbox.gateway.controlplane.auth import tenant_record
from kube_agent_sandbox.gateway.controlplane.body import BodyTooLarge, read_json_object
from kube_agent_sandbox.gateway.egress import (
    EgressRules,
    InvalidEgressRules,
    network_policy,
    own_namespace,
    parse_egress,
    policy_name,
)
from kube_agent_sandbox.gateway.errors import bad_request, e2b_error, sandbox_not_found
from kube_agent_sandbox.gateway.index import SandboxRecord
from kube_agent_sandbox.gateway.owned import create_owned
from kube_agent_sandbox.gateway.state import GatewayState

logger = logging.getLogger(__name__)

CACHE_CATCH_UP_SECONDS = 2.0
"""How long the update waits for its own cache to show the new rules (the host name
refresher reads rules from the cache and must not see the old ones)."""


async def update_network(request: Request, state: GatewayState) -> Response:
    """Replace the sandbox's outbound rules; 204, 400 for bad rules, 409 while starting."""
    record, error = tenant_record(request, state)
    if record is None:
        return error or sandbox_not_found("")
    try:
        body = await read_json_object(request, required=True)
        # the Python SDK (2.63) sends this one field in snake case; the spec says camel case
        allow = body.get("allowInternetAccess", body.get("allow_internet_access"))
        rules = parse_egress(body, allow_internet_access=allow)
    except BodyTooLarge as exc:
        return e2b_error(413, str(exc), should_retry=False)
    except InvalidEgressRules as exc:
        return bad_request(str(exc))
    if record.sandbox is None:
        return e2b_error(409, f"sandbox {record.sandbox_id} is still starting")
    value = rules.to_json() if rules is not None else None
    try:
        await state.api.patch(
            SANDBOX_CLAIMS,
            record.namespace,
            record.sandbox_id,
            {"metadata": {"annotations": {ANNOTATION_EGRESS: value}}},
        )
        await _cache_shows(state, record, value)
        await apply_egress(state, record, record.sandbox, rules)
    except ApiError as exc:
        if exc.not_found:
            return sandbox_not_found(record.sandbox_id)
        return e2b_error(500, f"cannot update the network rules: {exc.message}", should_retry=True)
    logger.info("sandbox %s/%s: network rules updated", record.namespace, record.sandbox_id)
    return Response(status_code=204)


async def apply_egress(
    state: GatewayState, record: SandboxRecord, sandbox: Obj, rules: EgressRules | None
) -> None:
    """Make the NetworkPolicy of ``record``'s bound ``sandbox`` enforce ``rules`` (none: no
    policy).

    Raises:
        ApiError: the API server refused a write.
    """
    name = policy_name(record.sandbox_id)
    if rules is None or not rules.restricted:
        try:
            await state.api.delete(NETWORK_POLICIES, record.namespace, name)
        except ApiError as exc:
            if not exc.not_found:
                raise
        return
    resolved = await state.resolve_domains(rules.domains) if rules.domains else {}
    policy = network_policy(
        sandbox,
        record.sandbox_id,
        rules,
        gateway_namespace=own_namespace(state.options.gateway_namespace),
        resolved=resolved,
    )
    try:
        await state.api.patch(NETWORK_POLICIES, record.namespace, name, {"spec": policy["spec"]})
    except ApiError as exc:
        if not exc.not_found:
            raise
        await create_owned(state.api, NETWORK_POLICIES, record.namespace, policy)
    state.egress_refresher.remember(record.namespace, record.sandbox_id, rules, resolved)


async def _cache_shows(state: GatewayState, record: SandboxRecord, value: str | None) -> None:
    def updated(fresh: SandboxRecord | None) -> bool:
        return fresh is None or fresh.annotations.get(ANNOTATION_EGRESS) == value

    with contextlib.suppress(TimeoutError):
        await state.index.wait_for(
            record.sandbox_id, updated, namespace=record.namespace, within=CACHE_CATCH_UP_SECONDS
        )
