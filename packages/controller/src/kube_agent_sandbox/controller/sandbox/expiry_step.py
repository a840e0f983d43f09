"""handleSandboxExpiry (upstream v0.5.6): clean up an expired Sandbox, then delete or retain it.

Runs from the second pass after expiry on (the first pass only marks Ready as expired).
Only children this Sandbox controls are deleted; PVCs are kept. With ``shutdownPolicy:
Delete`` the Sandbox itself is deleted; with ``Retain`` its status is reduced to the
conditions once the clean-up has gone through without error.
"""

from __future__ import annotations

import datetime as dt
import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, SERVICES
from kube_agent_sandbox.controller.runtime import (
    ErrorCollector,
    Obj,
    delete_child,
    is_owned_by,
    is_terminating,
    name_of,
    namespace_of,
)
from kube_agent_sandbox.controller.sandbox.conditions import set_expired
from kube_agent_sandbox.controller.sandbox.pod import resolve_pod_name
from kube_agent_sandbox.controller.sandbox.step import StepContext

log = logging.getLogger(__name__)


async def handle_expiry(
    ctx: StepContext, sandbox: Obj, now: dt.datetime, errors: ErrorCollector
) -> bool:
    """Delete the owned Pod and Service; delete or retain the Sandbox.

    Args:
        ctx: Client, caches and settings.
        sandbox: The working copy; a retained Sandbox's status is reset on it.
        now: Time of the pass, for the Ready transition time.
        errors: Collects the failed deletes (each delete is tried regardless).

    Returns:
        Whether the Sandbox was deleted (then nothing else is written this pass).
    """
    namespace, name = namespace_of(sandbox), name_of(sandbox)
    failed = False
    pod = ctx.pods.get(namespace, resolve_pod_name(sandbox))
    if pod is not None and not is_owned_by(pod, sandbox):
        log.info(
            "sandbox %s/%s expired: leaving pod %s it does not own", namespace, name, name_of(pod)
        )
    elif pod is not None and not is_terminating(pod):
        with errors.step() as step:
            await delete_child(ctx.client, PODS, pod, error="failed to delete pod")
        failed |= step.failed
    svc = ctx.services.get(namespace, name)
    if svc is not None and not is_owned_by(svc, sandbox):
        log.info("sandbox %s/%s expired: leaving service it does not own", namespace, name)
    elif svc is not None:
        with errors.step() as step:
            await delete_child(ctx.client, SERVICES, svc, error="failed to delete service")
        failed |= step.failed
    if sandbox.get("spec", {}).get("shutdownPolicy") == c.SHUTDOWN_POLICY_DELETE:
        with errors.step() as step:
            await delete_child(ctx.client, SANDBOXES, sandbox, error="failed to delete sandbox")
        if not step.failed:
            log.info("deleted expired sandbox %s/%s (shutdownPolicy Delete)", namespace, name)
            return True
        failed = True
    if not failed:
        conditions = sandbox.get("status", {}).get("conditions") or []
        sandbox["status"] = {"conditions": conditions}
        set_expired(conditions, sandbox, now=now)
    return False
