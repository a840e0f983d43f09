"""The claim's template, a bound Sandbox's pod metadata, and the cold start (upstream's
reconcileActive).

:func:`template_for` resolves warm pool -> template (raising the not-found errors the status
reports); :func:`sync_pod_metadata` is the fast path's metadata propagation to a Sandbox the
claim already has; :func:`create_cold` creates the claim's own Sandbox from the template.
"""

from __future__ import annotations

import copy
import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Obj,
    create_merge_patch,
    meta,
    quote,
    semantic_equal,
)
from kube_agent_sandbox.extensions.claim.context import (
    ClaimContext,
    ClaimPass,
    annotations_of,
    key_of,
    labels_of,
    pool_name,
    writable,
)
from kube_agent_sandbox.extensions.claim.errors import (
    ReconcilerError,
    SandboxCreatePendingError,
    TemplateNotFoundError,
    WarmPoolNotFoundError,
)
from kube_agent_sandbox.extensions.claim.fromsnapshot import (
    apply_snapshot,
    snapshot_image,
    snapshot_of,
)
from kube_agent_sandbox.extensions.claim.metrics import template_name_of as sandbox_template
from kube_agent_sandbox.extensions.claim.sandboxbuild import (
    build_cold_sandbox,
    claim_created_by,
    desired_pod_metadata,
    has_additional_pod_metadata,
    template_name_of,
)
from kube_agent_sandbox.extensions.common.blueprint import template_ref_hash

log = logging.getLogger(__name__)


def template_for(ctx: ClaimContext, claim: Obj, *, prefix: str = "") -> Obj:
    """The template of the claim's warm pool.

    Raises:
        WarmPoolNotFoundError: the pool is not in the cache.
        TemplateNotFoundError: the pool's template is not in the cache.
    """
    namespace = key_of(claim)[0]
    name = pool_name(claim)
    pool = ctx.pools.get(namespace, name)
    if pool is None:
        raise WarmPoolNotFoundError(name, prefix=prefix)
    template_name = template_name_of(pool)
    template = ctx.templates.get(namespace, template_name)
    if template is None:
        raise TemplateNotFoundError(template_name, prefix=prefix)
    return template


def template_or_none(ctx: ClaimContext, claim: Obj) -> Obj | None:
    """The template of the claim's warm pool, None when the pool or template is missing."""
    try:
        return template_for(ctx, claim)
    except (WarmPoolNotFoundError, TemplateNotFoundError):
        return None


async def sync_pod_metadata(ctx: ClaimContext, work: ClaimPass, sandbox: Obj) -> Obj:
    """Fast path step 3: template and claim pod metadata flow to a bound Sandbox.

    Raises:
        WarmPoolNotFoundError: no template while the claim has ``additionalPodMetadata``.
        TemplateNotFoundError: as above.
        ReconcilerError: the Sandbox patch failed.
    """
    claim = work.claim
    try:
        template = template_for(
            ctx, claim, prefix="failed to get template for metadata propagation: "
        )
    except (WarmPoolNotFoundError, TemplateNotFoundError):
        if has_additional_pod_metadata(claim):
            raise
        return sandbox
    desired = desired_pod_metadata(claim, template)
    current = (sandbox.get("spec") or {}).get("podTemplate") or {}
    labels = labels_of(sandbox)
    want_hash = template_ref_hash(str(meta(template).get("name") or ""))
    created_by = claim_created_by(claim)
    target = copy.deepcopy(writable(sandbox))
    changed = False
    if not semantic_equal(current.get("metadata") or {}, desired):
        target.setdefault("spec", {}).setdefault("podTemplate", {})["metadata"] = desired
        changed = True
    target_labels = target.setdefault("metadata", {}).setdefault("labels", {})
    if labels.get(c.LABEL_SANDBOX_TEMPLATE_REF_HASH) != want_hash:
        target_labels[c.LABEL_SANDBOX_TEMPLATE_REF_HASH] = want_hash
        changed = True
    if (labels.get(c.LABEL_CREATED_BY) or "") != created_by:
        if created_by:
            target_labels[c.LABEL_CREATED_BY] = created_by
        else:
            target_labels.pop(c.LABEL_CREATED_BY, None)
        changed = True
    if not changed:
        return sandbox
    patch = create_merge_patch(writable(sandbox), target)
    namespace, name = key_of(sandbox)
    try:
        updated = await ctx.client.patch(SANDBOXES, namespace, name, patch)
    except ApiError as exc:
        raise ReconcilerError(f"failed to update sandbox pod metadata: {exc}") from exc
    ctx.sandboxes.remember(updated)
    return updated


async def create_cold(ctx: ClaimContext, work: ClaimPass, template: Obj) -> Obj:
    """Create the claim's own Sandbox from ``template``.

    Raises:
        SandboxCreatePendingError: a Sandbox of that name exists (the cache lags).
        ReconcilerError: the create failed otherwise.
    """
    claim = work.claim
    # annotations not yet written (this pass's trace context) already count for the Sandbox
    view = {
        **claim,
        "metadata": {**meta(claim), "annotations": {**annotations_of(claim), **work.pending}},
    }
    body = build_cold_sandbox(view, template)
    namespace, name = key_of(claim)
    snapshot = snapshot_of(claim)
    if snapshot:
        apply_snapshot(body, claim, await snapshot_image(ctx.client, namespace, snapshot))
    try:
        created = await ctx.client.create(SANDBOXES, namespace, body)
    except ApiError as exc:
        if exc.already_exists:
            raise SandboxCreatePendingError() from exc
        raise ReconcilerError(f"sandbox create error: {exc}") from exc
    ctx.sandboxes.remember(created)
    ctx.event(claim, "SandboxProvisioned", "Provisioning", f"Created Sandbox {quote(name)}")
    if ctx.metrics is not None:
        ctx.metrics.record_creation(
            namespace=namespace,
            sandbox_template=sandbox_template(created),
            launch_type=c.LAUNCH_TYPE_COLD,
            warmpool_name=pool_name(claim),
            pod_condition="not_ready",
            created_by=c.normalize_created_by(claim_created_by(claim)),
        )
    log.info("claim %s/%s: created sandbox %s", namespace, name, name)
    return created
