"""PVCs, Pod, status fields, Service, conditions: upstream v0.5.6's reconcileChildResources.

Every step runs even when an earlier one failed (upstream joins the errors); each step's
error is caught by the pass's
:class:`~kube_agent_sandbox.controller.sandbox.errors.SandboxErrorCollector` and ends up in the
Ready condition. Only an ambiguous Pod mapping (several owned Pods) skips the Service step, so
no routing Service is created or changed (the strict Sandbox-to-Pod mapping of
docs/guides/upstream-differences.md).
"""

from __future__ import annotations

import datetime as dt

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash as compute_name_hash
from kube_agent_sandbox.controller.runtime import Obj, is_owned_by, name_of
from kube_agent_sandbox.controller.sandbox.conditions import apply_conditions
from kube_agent_sandbox.controller.sandbox.errors import SandboxErrorCollector
from kube_agent_sandbox.controller.sandbox.pod_step import PodSeen, reconcile_pod
from kube_agent_sandbox.controller.sandbox.pvc_step import reconcile_pvcs
from kube_agent_sandbox.controller.sandbox.service_step import reconcile_service
from kube_agent_sandbox.controller.sandbox.step import StepContext
from kube_agent_sandbox.controller.sandbox.writebehind import WriteDeferral


async def reconcile_children(
    ctx: StepContext,
    sandbox: Obj,
    now: dt.datetime,
    errors: SandboxErrorCollector,
    *,
    deferral: WriteDeferral | None = None,
) -> None:
    """Converge the children and set the status fields and conditions on ``sandbox``.

    Args:
        ctx: Client, caches and settings.
        sandbox: The working copy; its status (and pod-name annotation) are updated.
        now: Time of the pass, for condition transition times.
        errors: Collects what the steps raise.
        deferral: Write-behind of Pod metadata patches (None: write at once).
    """
    name_hash = compute_name_hash(name_of(sandbox))
    with ctx.tracer.span("reconcilePVCs"), errors.step():
        await reconcile_pvcs(ctx, sandbox, name_hash)
    seen = PodSeen()
    with ctx.tracer.span("reconcilePod"), errors.step() as pod_step:
        await reconcile_pod(ctx, sandbox, name_hash, seen, deferral=deferral)
    _set_pod_status_fields(sandbox, seen.pod, name_hash)

    service: Obj | None = None
    if errors.multiple_pods is None:
        with errors.step():
            service = await reconcile_service(ctx, sandbox, name_hash)

    apply_conditions(
        sandbox,
        pod=seen.pod,
        pod_failed=pod_step.failed,
        kept=seen.kept,
        waiting=seen.waiting,
        service=service,
        error_text=errors.text,
        multiple_pods_text=errors.multiple_pods.message if errors.multiple_pods else None,
        now=now,
    )


def _set_pod_status_fields(sandbox: Obj, pod: Obj | None, name_hash: str) -> None:
    """``selector``, ``podIPs`` and ``nodeName``; a Pod this Sandbox does not own leaks none."""
    status = sandbox.setdefault("status", {})
    if pod is None:
        status["podIPs"] = None
        status["nodeName"] = ""
        return
    status["selector"] = f"{c.LABEL_SANDBOX_NAME_HASH}={name_hash}"
    if is_owned_by(pod, sandbox):
        pod_status = pod.get("status") or {}
        ips = [str(ip.get("ip", "")) for ip in pod_status.get("podIPs") or ()]
        status["podIPs"] = ips or None
        status["nodeName"] = (pod.get("spec") or {}).get("nodeName") or ""
    else:
        status["podIPs"] = None
        status["nodeName"] = ""
