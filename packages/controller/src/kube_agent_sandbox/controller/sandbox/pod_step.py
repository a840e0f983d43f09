"""Step 2 of reconcileChildResources: find, adopt, delete (suspended) or create the Pod.

Upstream v0.5.6 controllers/sandbox_controller.go, reconcilePod (with the strict Sandbox-to-Pod
mapping and the write-behind metadata patches of docs/guides/upstream-differences.md). The step
records the Pod it settles on in :class:`PodSeen` as soon as it knows it, then raises if a later
write fails: upstream returns the Pod *and* the error, and the status (pod IPs, node name,
conditions) is computed from both.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import (
    Obj,
    Ownership,
    ReconcileError,
    check_ownership,
    create_merge_patch,
    create_or_fetch,
    delete_child,
    is_owned_by,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    set_controller_reference,
    wrap,
)
from kube_agent_sandbox.controller.sandbox.errors import MultiplePodsError
from kube_agent_sandbox.controller.sandbox.fromsnapshot import waiting_condition
from kube_agent_sandbox.controller.sandbox.keepstate import kept_condition, opt_in
from kube_agent_sandbox.controller.sandbox.ownership import (
    cannot_adopt_message,
    may_adopt,
    owned_by_other_message,
    sandbox_controller_ref,
)
from kube_agent_sandbox.controller.sandbox.pod import (
    POD_NAME_HASH_INDEX,
    desired_pod,
    resolve_pod_name,
    update_pod_metadata,
)
from kube_agent_sandbox.controller.sandbox.step import StepContext
from kube_agent_sandbox.controller.sandbox.writebehind import WriteDeferral

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PodSeen:
    """The Pod the step settled on (None: no Pod, or none this Sandbox may use)."""

    pod: Obj | None = None
    kept: Obj | None = None
    """The Suspended condition when a suspended Sandbox's Pod is kept to save its state."""
    waiting: Obj | None = None
    """The Ready condition when no Pod is made yet: it waits for its snapshot's image."""


def _pod_event_attributes(pod: Obj) -> dict[str, str]:
    phase = (pod.get("status") or {}).get("phase") or ""
    return {"pod.Name": name_of(pod), "pod.Phase": str(phase)}


async def reconcile_pod(
    ctx: StepContext,
    sandbox: Obj,
    name_hash: str,
    seen: PodSeen,
    *,
    deferral: WriteDeferral | None = None,
) -> None:
    """Converge the Sandbox's one Pod; ``seen.pod`` tells which Pod the status describes.

    Raises:
        MultiplePodsError: several Pods are controlled by this Sandbox.
        ReconcileError: a Pod could not be used, adopted, created, deleted or annotated.
    """
    namespace = namespace_of(sandbox)
    owned = [p for p in _pod_candidates(ctx, namespace, name_hash) if is_owned_by(p, sandbox)]
    pod = ctx.pods.get(namespace, resolve_pod_name(sandbox))
    if pod is None and not _names_its_own_pod(sandbox):
        await _clear_pod_name_annotation(ctx, sandbox)
    if (
        pod is not None
        and is_owned_by(pod, sandbox)
        and all(name_of(p) != name_of(pod) for p in owned)
    ):
        owned.append(pod)
    if len(owned) > 1:
        raise MultiplePodsError(len(owned))
    if len(owned) == 1 and (pod is None or name_of(pod) != name_of(owned[0])):
        # The controller reference is authoritative over the name annotation.
        await _clear_pod_name_annotation(ctx, sandbox)
        pod = owned[0]

    if sandbox.get("spec", {}).get("operatingMode") == c.OPERATING_MODE_SUSPENDED:
        await _suspend_pod(ctx, sandbox, pod, seen)
    elif pod is not None:
        await _reconcile_existing_pod(ctx, sandbox, pod, name_hash, seen, deferral=deferral)
    else:
        seen.waiting = waiting_condition(sandbox, resolver=ctx.keep_state)
        if seen.waiting is None:
            await _create_pod(ctx, sandbox, name_hash, seen, deferral=deferral)


def _names_its_own_pod(sandbox: Obj) -> bool:
    """Whether a running Sandbox's pod-name annotation names the Pod it is about to create.

    Upstream clears the annotation whenever the named Pod is missing and sets it again right
    after creating the Pod. When the annotation already names the Sandbox itself (the warm pool
    and the claim controller write it so at creation), that is two writes that change nothing:
    the name resolves to the same Pod either way. A suspended Sandbox still loses it.
    """
    annotations = meta(sandbox).get("annotations") or {}
    return (
        annotations.get(c.ANNOTATION_POD_NAME) == name_of(sandbox)
        and sandbox.get("spec", {}).get("operatingMode") != c.OPERATING_MODE_SUSPENDED
    )


def _pod_candidates(ctx: StepContext, namespace: str, name_hash: str) -> list[Obj]:
    try:
        return ctx.pods.by_index(POD_NAME_HASH_INDEX, f"{namespace}/{name_hash}")
    except KeyError:  # a cache without the index: fall back to a label scan
        return ctx.pods.list(namespace, labels={c.LABEL_SANDBOX_NAME_HASH: name_hash})


async def _suspend_pod(ctx: StepContext, sandbox: Obj, pod: Obj | None, seen: PodSeen) -> None:
    """Suspended: delete an owned Pod, leave any other; drop the annotation once none is left."""
    seen.pod = pod
    if pod is not None:
        ownership, ref = check_ownership(pod, sandbox)
        if ownership is Ownership.OWNED:
            if is_terminating(pod):
                return
            seen.kept = kept_condition(sandbox, pod, keeper=ctx.keep_state)
            if seen.kept is not None:
                return  # the state keeper reports on the Sandbox; that event brings us back
            if opt_in(sandbox) and not ctx.keep_state:
                log.info(
                    "sandbox %s/%s asks to keep its state on suspend, but this controller runs "
                    "no snapshot extension (--extensions --snapshot-registry): deleting the Pod",
                    namespace_of(sandbox),
                    name_of(sandbox),
                )
            if await delete_child(ctx.client, PODS, pod, error="failed to delete pod"):
                log.info("deleted pod %s/%s: sandbox suspended", namespace_of(pod), name_of(pod))
                return
            seen.pod = None  # already gone
        else:
            log.info(
                "sandbox %s/%s suspended: not deleting pod %s (%s)",
                namespace_of(sandbox),
                name_of(sandbox),
                name_of(pod),
                "unowned" if ref is None else f"owned by {ref.get('kind')}/{ref.get('name')}",
            )
    await _clear_pod_name_annotation(ctx, sandbox)


async def _reconcile_existing_pod(
    ctx: StepContext,
    sandbox: Obj,
    pod: Obj,
    name_hash: str,
    seen: PodSeen,
    *,
    deferral: WriteDeferral | None = None,
) -> None:
    """Adopt the Pod if allowed, sync its metadata (updatePodMetadata), record its name on the
    Sandbox."""
    ctx.tracer.add_event("ExistingPodStatusObserved", pod, _pod_event_attributes)
    ownership, ref = check_ownership(pod, sandbox)
    pod_name = name_of(pod)
    if ownership is Ownership.OTHER:
        assert ref is not None
        await _clear_pod_name_annotation(ctx, sandbox)
        raise ReconcileError(
            owned_by_other_message("pod", pod_name, ref, name_of(sandbox)), transient=False
        )
    work: Obj = {"metadata": copy.deepcopy(pod.get("metadata") or {})}
    adopting = ownership is Ownership.UNOWNED
    if adopting:
        if not may_adopt(pod, name_hash):
            raise ReconcileError(cannot_adopt_message("pod", pod_name), transient=False)
        set_controller_reference(work, sandbox_controller_ref(sandbox))
    changed = update_pod_metadata(work, sandbox, name_hash)
    if changed and not adopting and deferral is not None and not deferral.should_write():
        # Write-behind: skip the patch this pass; status is computed from the Pod as it
        # will be, so readiness never waits for the deferred write.
        log.debug(
            "deferred metadata patch of pod %s/%s (%.3fs left)",
            namespace_of(pod),
            pod_name,
            deferral.wait,
        )
    elif changed or adopting:
        patch = create_merge_patch({"metadata": pod.get("metadata") or {}}, work)
        try:
            await ctx.client.patch(PODS, namespace_of(pod), pod_name, patch)
        except Exception as exc:
            raise wrap(exc, "failed to patch pod") from exc
        if adopting:
            log.info("adopted pod %s/%s", namespace_of(pod), pod_name)
    if changed or adopting:
        pod = {**pod, "metadata": work["metadata"]}
    seen.pod = pod
    await _ensure_pod_name_annotation(ctx, sandbox, pod_name)


async def _create_pod(
    ctx: StepContext,
    sandbox: Obj,
    name_hash: str,
    seen: PodSeen,
    *,
    deferral: WriteDeferral | None = None,
) -> None:
    """Create the Pod; when it already exists (the cache is behind) treat it as existing."""
    pod, created = await create_or_fetch(
        ctx.client,
        PODS,
        desired_pod(sandbox, name_hash),
        field_manager=c.FIELD_OWNER_SANDBOX_CONTROLLER,
        fetch_error="pod already exists but failed to fetch",
    )
    if not created:
        await _reconcile_existing_pod(ctx, sandbox, pod, name_hash, seen, deferral=deferral)
        return
    log.info("created pod %s/%s", namespace_of(sandbox), name_of(sandbox))
    seen.pod = pod
    await _ensure_pod_name_annotation(ctx, sandbox, name_of(sandbox))
    ctx.tracer.add_event("NewPodStatusObserved", pod, _pod_event_attributes)


async def _patch_pod_name_annotation(ctx: StepContext, sandbox: Obj, value: str | None) -> None:
    patch = {"metadata": {"annotations": {c.ANNOTATION_POD_NAME: value}}}
    stored = await ctx.client.patch(SANDBOXES, namespace_of(sandbox), name_of(sandbox), patch)
    ctx.pod_names.record(sandbox, stored, value)
    annotations = meta(sandbox).get("annotations")
    if value is None:
        if annotations:
            annotations.pop(c.ANNOTATION_POD_NAME, None)
    else:
        meta(sandbox)["annotations"] = {**(annotations or {}), c.ANNOTATION_POD_NAME: value}


async def _clear_pod_name_annotation(ctx: StepContext, sandbox: Obj) -> None:
    if c.ANNOTATION_POD_NAME not in (meta(sandbox).get("annotations") or {}):
        return
    try:
        await _patch_pod_name_annotation(ctx, sandbox, None)
    except Exception as exc:
        raise wrap(exc, "failed to clear pod name annotation") from exc


async def _ensure_pod_name_annotation(ctx: StepContext, sandbox: Obj, pod_name: str) -> None:
    current = (meta(sandbox).get("annotations") or {}).get(c.ANNOTATION_POD_NAME)
    if current:  # equal, or naming another pod: leave it
        return
    try:
        await _patch_pod_name_annotation(ctx, sandbox, pod_name)
    except Exception as exc:
        raise wrap(exc, "failed to set pod name annotation") from exc
