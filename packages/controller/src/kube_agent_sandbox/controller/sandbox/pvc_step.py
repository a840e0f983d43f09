"""Step 1 of reconcileChildResources: one PVC per volumeClaimTemplate (reconcilePVCs).

A missing PVC is created, an unowned one adopted when it carries the adoptable or the
tracking label; one owned by someone else stops the step. PVCs are never updated or deleted.
"""

from __future__ import annotations

import copy
import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.rest import PVCS
from kube_agent_sandbox.controller.runtime import (
    Obj,
    Ownership,
    ReconcileError,
    check_ownership,
    create_merge_patch,
    create_or_fetch,
    name_of,
    namespace_of,
    quote,
    set_controller_reference,
    wrap,
)
from kube_agent_sandbox.controller.sandbox.ownership import (
    cannot_adopt_message,
    may_adopt,
    owned_by_other_message,
    sandbox_controller_ref,
)
from kube_agent_sandbox.controller.sandbox.pvc import desired_pvc, pvc_name_problem
from kube_agent_sandbox.controller.sandbox.step import StepContext

log = logging.getLogger(__name__)


async def reconcile_pvcs(ctx: StepContext, sandbox: Obj, name_hash: str) -> None:
    """Create or adopt the PVC of every volumeClaimTemplate, in order.

    Raises:
        ReconcileError: at the first PVC that cannot be created or adopted (the rest wait).
    """
    for template in sandbox.get("spec", {}).get("volumeClaimTemplates") or ():
        body = desired_pvc(sandbox, template, name_hash)
        pvc_name = name_of(body)
        problem = pvc_name_problem(pvc_name)
        if problem is not None:
            template_name = (template.get("metadata") or {}).get("name", "")
            raise ReconcileError(
                f"cannot create PVC for volumeClaimTemplate {quote(template_name)}: "
                f"name {quote(pvc_name)} {problem}",
                transient=False,
            )
        pvc = ctx.pvcs.get(namespace_of(sandbox), pvc_name)
        if pvc is None:
            pvc, created = await create_or_fetch(
                ctx.client,
                PVCS,
                body,
                field_manager=c.FIELD_OWNER_SANDBOX_CONTROLLER,
                fetch_error="failed to get PVC",
            )
            if created:
                log.info("created PVC %s/%s", namespace_of(sandbox), pvc_name)
                continue
        await _adopt_pvc(ctx, sandbox, pvc, name_hash)


async def _adopt_pvc(ctx: StepContext, sandbox: Obj, pvc: Obj, name_hash: str) -> None:
    """Leave an owned PVC alone, adopt an adoptable one, refuse any other."""
    pvc_name = name_of(pvc)
    ownership, ref = check_ownership(pvc, sandbox)
    if ownership is Ownership.OTHER:
        assert ref is not None
        raise ReconcileError(
            owned_by_other_message("PVC", pvc_name, ref, name_of(sandbox)), transient=False
        )
    if ownership is Ownership.OWNED:
        return
    if not may_adopt(pvc, name_hash):
        raise ReconcileError(cannot_adopt_message("PVC", pvc_name), transient=False)
    work = {"metadata": copy.deepcopy(pvc.get("metadata") or {})}
    set_controller_reference(work, sandbox_controller_ref(sandbox))
    patch = create_merge_patch({"metadata": pvc.get("metadata") or {}}, work)
    try:
        await ctx.client.patch(PVCS, namespace_of(sandbox), pvc_name, patch)
    except Exception as exc:
        raise wrap(exc, "failed to patch PVC with owner reference") from exc
    log.info("adopted PVC %s/%s", namespace_of(sandbox), pvc_name)
