"""An active claim gets its one Sandbox: found, adopted warm, or created cold (upstream's
reconcileActive).

:func:`reconcile_active` is ``reconcileActive``; :func:`find_or_adopt` is steps a-e of
``getOrCreateSandbox`` (the Sandbox in the status, the assigned one, the one named like the
claim, the cold-start guards, a warm candidate from the queue), without the create, which is
provision.py's.
"""

from __future__ import annotations

import datetime as dt
import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiError, Obj, is_controlled_by, quote
from kube_agent_sandbox.extensions.claim import podmetadata
from kube_agent_sandbox.extensions.claim.adopt_step import adopt, complete_adoption
from kube_agent_sandbox.extensions.claim.adoption import (
    PENDING_IP_GRACE,
    claim_age,
    pick_candidate,
)
from kube_agent_sandbox.extensions.claim.annotations import (
    clear_assignment,
    migrate_legacy_label,
)
from kube_agent_sandbox.extensions.claim.context import (
    ClaimContext,
    ClaimPass,
    annotations_of,
    key_of,
    labels_of,
    pool_name,
)
from kube_agent_sandbox.extensions.claim.errors import (
    InvalidMetadataError,
    ReconcilerError,
)
from kube_agent_sandbox.extensions.claim.fromsnapshot import snapshot_of
from kube_agent_sandbox.extensions.claim.provision import (
    create_cold,
    sync_pod_metadata,
    template_for,
)
from kube_agent_sandbox.extensions.claim.warmqueue import adoptable_pool
from kube_agent_sandbox.extensions.common.ownership import controlled_by_kind

log = logging.getLogger(__name__)


async def reconcile_active(ctx: ClaimContext, work: ClaimPass, now: dt.datetime) -> Obj | None:
    """The claim's Sandbox; None while warm candidates wait for Pod IPs.

    Raises:
        ClaimError: any step failed (the subclass names the step).
    """
    claim = work.claim
    extra = (claim.get("spec") or {}).get("additionalPodMetadata") or {}
    try:
        podmetadata.validate_additional_pod_metadata(extra, allowed_label_domains=ctx.domains)
    except podmetadata.InvalidPodMetadataError as exc:
        raise InvalidMetadataError(str(exc)) from exc
    sandbox = await find_or_adopt(ctx, work, now)
    if sandbox is not None:
        return await sync_pod_metadata(ctx, work, sandbox)
    if work.pending_network:
        age = claim_age(work.claim, now)
        if age is not None and age < PENDING_IP_GRACE:
            return None
        log.info(
            "Warm pool candidates did not report Pod IPs within the grace period; "
            "falling back to cold creation",
            extra={"claim": "/".join(key_of(claim))},
        )
        work.pending_network = False
    template = template_for(ctx, work.claim)
    return await create_cold(ctx, work, template)


async def find_or_adopt(ctx: ClaimContext, work: ClaimPass, now: dt.datetime) -> Obj | None:
    """``getOrCreateSandbox`` steps a-e, without the create.

    Raises:
        ClaimError: a write failed, or the Sandbox named like the claim is someone else's.
    """
    claim = work.claim
    namespace, claim_name = key_of(claim)
    annotations, labels = annotations_of(claim), labels_of(claim)
    assignment = str(annotations.get(c.ANNOTATION_SANDBOX_NAME) or "")
    legacy = not assignment and bool(labels.get(c.LABEL_SANDBOX_NAME_LEGACY))
    if legacy:
        assignment = str(labels[c.LABEL_SANDBOX_NAME_LEGACY])

    # a. the Sandbox recorded in the status
    bound = str(((claim.get("status") or {}).get("sandbox") or {}).get("name") or "")
    if bound:
        sandbox = ctx.sandboxes.get(namespace, bound)
        if sandbox is not None and is_controlled_by(sandbox, claim):
            warm = assignment == bound or bound != claim_name
            return await _ensure_launch_type(
                ctx, sandbox, c.LAUNCH_TYPE_WARM if warm else c.LAUNCH_TYPE_COLD
            )

    # b. the Sandbox recorded by the assignment annotation (or legacy label)
    if assignment:
        sandbox = ctx.sandboxes.get(namespace, assignment)
        if sandbox is not None and is_controlled_by(sandbox, claim):
            if legacy:
                await migrate_legacy_label(ctx, work, assignment)
            return await _ensure_launch_type(ctx, sandbox, c.LAUNCH_TYPE_WARM)
        if sandbox is None:
            await clear_assignment(ctx, work, legacy=legacy)
        elif controlled_by_kind(sandbox, kind=c.KIND_SANDBOX_WARM_POOL) is not None:
            if adoptable_pool(sandbox) == pool_name(claim):
                ctx.queue.remove(namespace, pool_name(claim), assignment)
                return await complete_adoption(ctx, work, sandbox, key=None)
            await clear_assignment(ctx, work, legacy=legacy)
        elif controlled_by_kind(sandbox, kind=c.KIND_SANDBOX_CLAIM) is not None:
            try:
                await clear_assignment(ctx, work, legacy=legacy)
            except ApiError as exc:
                raise ReconcilerError(
                    f"failed to remove sandbox reference owned by another claim: {exc}"
                ) from exc

    # c. the Sandbox named like the claim
    sandbox = ctx.sandboxes.get(namespace, claim_name)
    if sandbox is not None:
        if is_controlled_by(sandbox, claim):
            return await _ensure_launch_type(ctx, sandbox, c.LAUNCH_TYPE_COLD)
        raise ReconcilerError(
            f"sandbox {quote(claim_name)} is not controlled by claim {quote(claim_name)}. "
            "Please use a different claim name or delete the sandbox manually"
        )

    # d. env or volume claim templates force a cold start (so does a snapshot to start from)
    spec = claim.get("spec") or {}
    if spec.get("env") or spec.get("volumeClaimTemplates") or snapshot_of(claim):
        return None

    # e. a warm Sandbox from the queue
    pool = pool_name(claim)
    pick = pick_candidate(
        ctx.queue,
        namespace,
        pool,
        get_sandbox=ctx.sandboxes.get,
        get_pool=ctx.pools.get,
        get_template=ctx.templates.get,
    )
    if pick.sandbox is None:
        work.pending_network = pick.pending_network > 0
        return None
    return await adopt(ctx, work, pick.sandbox, pick.key)


async def _ensure_launch_type(ctx: ClaimContext, sandbox: Obj, value: str) -> Obj:
    if labels_of(sandbox).get(c.LABEL_LAUNCH_TYPE):
        return sandbox
    namespace, name = key_of(sandbox)
    patch = {"metadata": {"labels": {c.LABEL_LAUNCH_TYPE: value}}}
    try:
        updated = await ctx.client.patch(SANDBOXES, namespace, name, patch)
    except ApiError as exc:
        raise ReconcilerError(f"failed to set launch type: {exc}") from exc
    ctx.sandboxes.remember(updated)
    return updated
