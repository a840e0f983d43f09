"""Warm adoption: record the assignment on the claim, then take the Sandbox (upstream's
adoptSandboxFromCandidates).

Both writes are optimistic: the claim's assignment annotation is locked on the claim's
resourceVersion and the Sandbox's adoption patch on the Sandbox's; a conflict is resolved by
one authoritative GET, never by locking. The candidate choice and the adoption target are
pure functions in adoption.py.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Obj,
    create_merge_patch,
    is_controlled_by,
    meta,
    quote,
)
from kube_agent_sandbox.extensions.claim.adoption import adoption_target, is_ready
from kube_agent_sandbox.extensions.claim.annotations import clear_assignment
from kube_agent_sandbox.extensions.claim.context import (
    ClaimContext,
    ClaimPass,
    annotations_of,
    key_of,
    pool_name,
    writable,
)
from kube_agent_sandbox.extensions.claim.errors import (
    AdoptionConflictError,
    ReconcilerError,
    conflict_detail,
)
from kube_agent_sandbox.extensions.claim.metrics import template_name_of as sandbox_template
from kube_agent_sandbox.extensions.claim.observed import rfc3339nano
from kube_agent_sandbox.extensions.claim.provision import template_or_none
from kube_agent_sandbox.extensions.claim.sandboxbuild import claim_created_by
from kube_agent_sandbox.extensions.claim.warmqueue import WarmKey, adoptable_pool

log = logging.getLogger(__name__)

ASSIGNMENT_RETRIES: Final = 5
ADOPTION_RETRIES: Final = 3


async def adopt(ctx: ClaimContext, work: ClaimPass, sandbox: Obj, key: WarmKey | None) -> Obj:
    """Record the assignment on the claim, then take the Sandbox (upstream's
    adoptSandboxFromCandidates).

    Raises:
        AdoptionConflictError: another claim or controller won the Sandbox or the claim.
        ReconcilerError: a write failed otherwise.
    """
    namespace, pool = key_of(work.claim)[0], pool_name(work.claim)
    name = key_of(sandbox)[1]
    annotations = {**work.pending, c.ANNOTATION_SANDBOX_NAME: name}
    stamp_ready = is_ready(sandbox) and not annotations_of(work.claim).get(
        c.ANNOTATION_CLAIM_FIRST_READY_AT
    )
    if stamp_ready:
        annotations[c.ANNOTATION_CLAIM_FIRST_READY_AT] = rfc3339nano(ctx.clock_ns())
    try:
        await _write_assignment(ctx, work, annotations, name)
    except BaseException:
        if key is not None:
            ctx.queue.push_back(namespace, pool, key)
        raise
    work.pending.clear()
    if stamp_ready:
        work.first_ready_stamped = True
        ctx.first_ready_owed[key_of(work.claim)] = str(meta(work.claim).get("uid") or "")
    return await complete_adoption(ctx, work, sandbox, key=key)


async def _write_assignment(
    ctx: ClaimContext, work: ClaimPass, annotations: dict[str, str], name: str
) -> None:
    """Claim annotation patch locked on the claim's resourceVersion; 409 -> live re-read."""
    namespace, claim_name = key_of(work.claim)
    uid = meta(work.claim).get("uid")
    base = work.claim
    for attempt in range(ASSIGNMENT_RETRIES):
        patch = {
            "metadata": {
                "resourceVersion": meta(base).get("resourceVersion"),
                "annotations": annotations,
            }
        }
        try:
            updated = await ctx.client.patch(SANDBOX_CLAIMS, namespace, claim_name, patch)
        except ApiError as exc:
            if not exc.conflict or attempt == ASSIGNMENT_RETRIES - 1:
                if exc.conflict:
                    raise AdoptionConflictError(
                        f"failed to record sandbox assignment on claim: {conflict_detail(str(exc))}"
                    ) from exc
                raise ReconcilerError(f"failed to record sandbox assignment: {exc}") from exc
            await asyncio.sleep(0.01 * (1 + 0.1 * attempt))
            live = await ctx.client.get(SANDBOX_CLAIMS, namespace, claim_name)
            recorded = annotations_of(live).get(c.ANNOTATION_SANDBOX_NAME)
            if meta(live).get("uid") != uid:
                raise AdoptionConflictError("claim was re-created during adoption") from exc
            if recorded and recorded != name:
                raise AdoptionConflictError(
                    f"claim already records sandbox {quote(str(recorded))}"
                ) from exc
            ctx.claims.remember(live)
            base = live
            continue
        ctx.claims.remember(updated)
        work.claim = updated
        return


async def complete_adoption(
    ctx: ClaimContext, work: ClaimPass, sandbox: Obj, *, key: WarmKey | None
) -> Obj:
    """The locked adoption patch of the Sandbox; 404/409 resolved with one live GET.

    Raises:
        AdoptionConflictError: the Sandbox was taken or removed, or conflicts persisted.
        ReconcilerError: the patch or the live read failed otherwise.
    """
    claim = work.claim
    namespace, name = key_of(sandbox)
    pool = adoptable_pool(sandbox) or ""
    # without the template, the claim's metadata is merged into the existing pod metadata
    template = template_or_none(ctx, claim)
    base = sandbox
    for attempt in range(ADOPTION_RETRIES):
        target = adoption_target(base, claim, template)
        patch = create_merge_patch(writable(base), target)
        patch.setdefault("metadata", {})["resourceVersion"] = meta(base).get("resourceVersion")
        try:
            adopted = await ctx.client.patch(SANDBOXES, namespace, name, patch)
        except ApiError as exc:
            if not (exc.conflict or exc.not_found):
                raise ReconcilerError(f"failed to adopt sandbox {quote(name)}: {exc}") from exc
            live = await _live_sandbox(ctx, namespace, name)
            if live is not None and is_controlled_by(live, claim):
                adopted = live
                break
            if live is None or adoptable_pool(live) != pool or not pool:
                await clear_assignment(ctx, work, legacy=False)
                raise AdoptionConflictError(
                    f"sandbox {quote(name)} was taken or removed during adoption"
                ) from exc
            if attempt == ADOPTION_RETRIES - 1:
                raise AdoptionConflictError(
                    f"failed to adopt sandbox {quote(name)}: {conflict_detail(str(exc))}"
                ) from exc
            base = live
            continue
        break
    ctx.sandboxes.remember(adopted)
    ctx.event(claim, "SandboxAdopted", "Adoption", f"Adopted warm pool Sandbox {quote(name)}")
    if ctx.metrics is not None:
        ctx.metrics.record_creation(
            namespace=namespace,
            sandbox_template=sandbox_template(adopted),
            launch_type=c.LAUNCH_TYPE_WARM,
            warmpool_name=pool,
            pod_condition="ready" if is_ready(adopted) else "not_ready",
            created_by=c.normalize_created_by(claim_created_by(claim)),
        )
    log.debug("claim %s/%s adopted warm sandbox %s", namespace, key_of(claim)[1], name)
    return adopted


async def _live_sandbox(ctx: ClaimContext, namespace: str, name: str) -> Obj | None:
    try:
        live = await ctx.client.get(SANDBOXES, namespace, name)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise ReconcilerError(f"failed to read sandbox {quote(name)}: {exc}") from exc
    ctx.sandboxes.remember(live)
    return live
