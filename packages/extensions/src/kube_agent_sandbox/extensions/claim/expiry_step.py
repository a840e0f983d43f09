"""An expired claim: mark it, then apply its shutdown policy (upstream's reconcileExpired).

``Retain`` keeps the claim and deletes its Sandbox (:func:`reconcile_expired`); ``Delete`` and
``DeleteForeground`` delete the claim itself (:func:`delete_claim`). The policy is applied
one pass after the Ready condition is marked expired (:func:`mark_expired`).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Obj,
    is_controlled_by,
    meta,
    set_status_condition,
)
from kube_agent_sandbox.extensions.claim import lifecycle
from kube_agent_sandbox.extensions.claim.context import ClaimContext, ClaimPass, key_of
from kube_agent_sandbox.extensions.claim.errors import ReconcilerError, SandboxNotOwnedError
from kube_agent_sandbox.extensions.claim.status import claim_expired_condition
from kube_agent_sandbox.extensions.claim.status_step import write_status

log = logging.getLogger(__name__)


async def mark_expired(
    ctx: ClaimContext, work: ClaimPass, old_status: Obj, now: dt.datetime
) -> None:
    """Set Ready=False/ClaimExpired and record the ``ClaimExpired`` event."""
    status = copy.deepcopy(old_status)
    conditions = status.setdefault("conditions", [])
    set_status_condition(conditions, claim_expired_condition(work.claim), now=now)
    await write_status(ctx, work, old_status, status)
    ctx.event(work.claim, c.REASON_CLAIM_EXPIRED, "Claim Expired", "Claim expired")


async def delete_claim(ctx: ClaimContext, claim: Obj) -> None:
    """Delete the expired claim (``Delete``/``DeleteForeground``), UID-preconditioned.

    Raises:
        ReconcilerError: the delete failed (other than NotFound).
    """
    policy = lifecycle.shutdown_policy(claim)
    ctx.event(
        claim, c.REASON_CLAIM_EXPIRED, "Deleting", f"Deleting Claim (ShutdownPolicy={policy})"
    )
    namespace, name = key_of(claim)
    try:
        await ctx.client.delete(
            SANDBOX_CLAIMS,
            namespace,
            name,
            propagation_policy="Foreground"
            if policy == lifecycle.POLICY_DELETE_FOREGROUND
            else None,
            preconditions={"uid": str(meta(claim).get("uid"))} if meta(claim).get("uid") else None,
        )
    except ApiError as exc:
        if not exc.not_found:
            raise ReconcilerError(f"failed to delete expired claim: {exc}") from exc
    log.info("deleted expired claim %s/%s (shutdownPolicy %s)", namespace, name, policy)


async def reconcile_expired(ctx: ClaimContext, work: ClaimPass) -> Obj | None:
    """Delete the Sandbox of a retained expired claim; the Sandbox while it still exists.

    Raises:
        SandboxNotOwnedError: the Sandbox is not the claim's.
        ReconcilerError: the delete failed (other than NotFound).
    """
    claim = work.claim
    namespace, claim_name = key_of(claim)
    target = str(((claim.get("status") or {}).get("sandbox") or {}).get("name") or claim_name)
    sandbox = ctx.sandboxes.get(namespace, target)
    if sandbox is None:
        return None
    if not is_controlled_by(sandbox, claim):
        raise SandboxNotOwnedError(target, claim_name)
    if not meta(sandbox).get("deletionTimestamp"):
        try:
            await ctx.client.delete(
                SANDBOXES, namespace, target, preconditions={"uid": str(meta(sandbox)["uid"])}
            )
            log.info("deleted sandbox %s/%s of expired claim", namespace, target)
        except ApiError as exc:
            if exc.not_found:
                ctx.sandboxes.forget(namespace, target)
                return None
            raise ReconcilerError(f"failed to delete sandbox: {exc}") from exc
    return sandbox
