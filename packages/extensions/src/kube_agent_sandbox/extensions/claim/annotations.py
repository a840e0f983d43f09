"""The claim's own annotations: first-observed/trace stamps and the Sandbox assignment.

Upstream's initializeAnnotations (observability annotations, folded into the pass's first claim
write) and the assignment bookkeeping of ``getOrCreateSandbox`` (clearing a stale assignment,
migrating the legacy ``agents.x-k8s.io/sandbox-name`` label to the annotation).
"""

from __future__ import annotations

import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import ApiError, Obj
from kube_agent_sandbox.extensions.claim.context import (
    ClaimContext,
    ClaimPass,
    annotations_of,
    key_of,
    patch_claim,
)
from kube_agent_sandbox.extensions.claim.errors import ReconcilerError
from kube_agent_sandbox.extensions.claim.observed import rfc3339nano

log = logging.getLogger(__name__)


def initial_annotations(ctx: ClaimContext, claim: Obj) -> dict[str, str]:
    """Record the first observation; the annotations this pass still has to write."""
    observed_ns = ctx.observed.record(claim)
    if not ctx.persist:
        return {}
    annotations = annotations_of(claim)
    wanted: dict[str, str] = {}
    if not annotations.get(c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT):
        wanted[c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT] = rfc3339nano(observed_ns)
    if not annotations.get(c.ANNOTATION_TRACE_CONTEXT):
        trace = ctx.tracer.trace_context()
        if trace:
            wanted[c.ANNOTATION_TRACE_CONTEXT] = trace
    return wanted


async def flush_annotations(ctx: ClaimContext, work: ClaimPass) -> None:
    """Write the annotations no earlier write of the pass carried.

    Raises:
        ReconcilerError: the patch failed (other than NotFound).
    """
    if not work.pending:
        return
    patch = {"metadata": {"annotations": dict(work.pending)}}
    try:
        await patch_claim(ctx, work, patch)
    except ApiError as exc:
        if exc.not_found:
            work.pending.clear()
            return
        raise ReconcilerError(f"failed to initialize claim annotations: {exc}") from exc
    work.pending.clear()


async def migrate_legacy_label(ctx: ClaimContext, work: ClaimPass, name: str) -> None:
    """Move the legacy assignment label to the annotation (best effort)."""
    patch = {
        "metadata": {
            "annotations": {c.ANNOTATION_SANDBOX_NAME: name, **work.pending},
            "labels": {c.LABEL_SANDBOX_NAME_LEGACY: None},
        }
    }
    try:
        await patch_claim(ctx, work, patch)
        work.pending.clear()
    except ApiError as exc:
        log.warning("claim %s: legacy label migration failed: %s", key_of(work.claim), exc)


async def clear_assignment(ctx: ClaimContext, work: ClaimPass, *, legacy: bool) -> None:
    """Remove the claim's assignment (and a first-ready stamp this pass wrote with it)."""
    key = c.LABEL_SANDBOX_NAME_LEGACY if legacy else c.ANNOTATION_SANDBOX_NAME
    section = "labels" if legacy else "annotations"
    metadata: Obj = {section: {key: None}}
    if work.first_ready_stamped:
        metadata.setdefault("annotations", {})[c.ANNOTATION_CLAIM_FIRST_READY_AT] = None
    await patch_claim(ctx, work, {"metadata": metadata})
    if work.first_ready_stamped:
        work.first_ready_stamped = False
        ctx.first_ready_owed.pop(key_of(work.claim), None)
