"""The claim's status write and first-ready bookkeeping (upstream's updateStatus).

The status itself is computed by status.py; this module writes it (merge patch locked on the
claim's resourceVersion) and, once per claim, records the first-ready latency metrics and the
``first-ready-at`` annotation.
"""

from __future__ import annotations

import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS
from kube_agent_sandbox.controller.runtime import ApiError, Obj, meta
from kube_agent_sandbox.extensions.claim.context import (
    ClaimContext,
    ClaimPass,
    annotations_of,
    key_of,
    patch_claim,
)
from kube_agent_sandbox.extensions.claim.errors import ReconcilerError
from kube_agent_sandbox.extensions.claim.observed import rfc3339nano
from kube_agent_sandbox.extensions.claim.status import is_ready as status_is_ready
from kube_agent_sandbox.extensions.claim.status import status_write

log = logging.getLogger(__name__)


async def write_status(
    ctx: ClaimContext, work: ClaimPass, old_status: Obj, new_status: Obj
) -> bool:
    """Write the status if it changed; False when a 409 or 404 made the pass moot.

    Raises:
        ReconcilerError: the write failed otherwise.
    """
    patch = status_write(
        old_status, new_status, resource_version=meta(work.claim).get("resourceVersion")
    )
    if patch is None:
        return True
    namespace, name = key_of(work.claim)
    try:
        updated = await ctx.client.patch(
            SANDBOX_CLAIMS, namespace, name, patch, subresource="status"
        )
    except ApiError as exc:
        if exc.conflict or exc.not_found:
            log.debug("claim %s/%s: status write dropped: %s", namespace, name, exc)
            return False
        raise ReconcilerError(f"failed to update claim status: {exc}") from exc
    ctx.claims.remember(updated)
    work.claim = updated
    return True


async def record_first_ready(
    ctx: ClaimContext, work: ClaimPass, old_status: Obj, new_status: Obj, sandbox: Obj | None
) -> None:
    """Latency metrics once per claim, at its first Ready=True (upstream internal/metrics).

    Raises:
        ReconcilerError: the first-ready annotation could not be written.
    """
    if not status_is_ready(new_status):
        return
    claim = work.claim
    uid = str(meta(claim).get("uid") or "")
    annotations = annotations_of(claim)
    if ctx.first_ready_owed.get(key_of(claim)) == uid:
        del ctx.first_ready_owed[key_of(claim)]
        _observe(ctx, claim, sandbox)
        return
    if annotations.get(c.ANNOTATION_CLAIM_FIRST_READY_AT):
        return
    if status_is_ready(old_status):
        value = "unknown"
    else:
        _observe(ctx, claim, sandbox)
        value = rfc3339nano(ctx.clock_ns())
    patch = {"metadata": {"annotations": {c.ANNOTATION_CLAIM_FIRST_READY_AT: value}}}
    try:
        await patch_claim(ctx, work, patch)
    except ApiError as exc:
        if not exc.not_found:
            raise ReconcilerError(f"failed to stamp first-ready annotation: {exc}") from exc


def _observe(ctx: ClaimContext, claim: Obj, sandbox: Obj | None) -> None:
    if ctx.metrics is None:
        return
    annotations = annotations_of(claim)
    if not annotations.get(c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT):
        # not persisted (--disable-claim-observability-annotations): the time in memory
        annotations[c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT] = rfc3339nano(
            ctx.observed.record(claim)
        )
        claim = {**claim, "metadata": {**meta(claim), "annotations": annotations}}
    ctx.metrics.observe_first_ready(claim, sandbox=sandbox, now=ctx.clock())
