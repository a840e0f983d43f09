"""Step 4 of reconcileChildResources: the headless Service (reconcileService).

``spec.service: true`` creates, adopts or repairs the Service; ``false`` deletes an owned
one; unset leaves an unowned one alone and keeps an owned one (without managing its ports).
``status.service`` and ``status.serviceFQDN`` follow what the step settled on.
"""

from __future__ import annotations

import copy
import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.rest import SERVICES
from kube_agent_sandbox.controller.runtime import (
    Obj,
    Ownership,
    ReconcileError,
    check_ownership,
    create_merge_patch,
    create_or_fetch,
    delete_child,
    meta,
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
from kube_agent_sandbox.controller.sandbox.service import (
    desired_service,
    service_fqdn,
    service_name_problem,
    service_ports_equal,
    service_ports_for_sandbox,
)
from kube_agent_sandbox.controller.sandbox.step import StepContext

log = logging.getLogger(__name__)


async def reconcile_service(ctx: StepContext, sandbox: Obj, name_hash: str) -> Obj | None:
    """Create, adopt, repair or delete the Sandbox's headless Service.

    Returns:
        The Service the Sandbox routes through, or None.

    Raises:
        ReconcileError: the Service could not be created, adopted, repaired or deleted.
    """
    namespace, name = namespace_of(sandbox), name_of(sandbox)
    wanted = sandbox.get("spec", {}).get("service")
    ports = service_ports_for_sandbox(sandbox)
    svc = ctx.services.get(namespace, name)
    if svc is None:
        if wanted is not True:
            _clear_service_status(sandbox)
            return None
        problem = service_name_problem(name)
        if problem is not None:
            _clear_service_status(sandbox)
            raise ReconcileError(
                f"cannot create headless service {quote(name)}: name {problem}",
                transient=False,
            )
        svc, created = await create_or_fetch(
            ctx.client,
            SERVICES,
            desired_service(sandbox, name_hash, ports),
            field_manager=c.FIELD_OWNER_SANDBOX_CONTROLLER,
            fetch_error="service get failed",
        )
        if created:
            log.info("created headless service %s/%s", namespace, name)
            _set_service_status(ctx, sandbox, svc)
            return svc

    ownership, ref = check_ownership(svc, sandbox)
    if wanted is False:
        if ownership is Ownership.OWNED and await delete_child(
            ctx.client, SERVICES, svc, error="failed to delete service"
        ):
            log.info("deleted service %s/%s: spec.service is false", namespace, name)
        _clear_service_status(sandbox)
        return None
    if ownership is Ownership.OTHER:
        assert ref is not None
        raise ReconcileError(owned_by_other_message("service", name, ref, name), transient=False)
    if ownership is Ownership.UNOWNED:
        if wanted is None:
            _clear_service_status(sandbox)
            return None
        svc = await _adopt_service(ctx, sandbox, svc, name_hash, ports)
    else:
        svc = await _repair_service(ctx, svc, name_hash, ports, manage_ports=wanted is True)
    _set_service_status(ctx, sandbox, svc)
    return svc


async def _adopt_service(
    ctx: StepContext, sandbox: Obj, svc: Obj, name_hash: str, ports: list[Obj] | None
) -> Obj:
    """Take over an adoptable headless Service: tracking label, selector, ports, owner."""
    name = name_of(svc)
    if not may_adopt(svc, name_hash):
        raise ReconcileError(cannot_adopt_message("service", name), transient=False)
    cluster_ip = (svc.get("spec") or {}).get("clusterIP") or ""
    if cluster_ip not in ("None", ""):
        raise ReconcileError(
            f"cannot adopt service {quote(name)}: ClusterIP is {quote(cluster_ip)} "
            f'(expected "None", field is immutable)',
            transient=False,
        )
    body = copy.deepcopy(svc)
    body_meta = meta(body)
    body_meta["labels"] = {
        **(body_meta.get("labels") or {}),
        c.LABEL_SANDBOX_NAME_HASH: name_hash,
    }
    spec = body.setdefault("spec", {})
    spec["selector"] = {c.LABEL_SANDBOX_NAME_HASH: name_hash}
    if ports:
        spec["ports"] = ports
    else:
        spec.pop("ports", None)
    set_controller_reference(body, sandbox_controller_ref(sandbox))
    try:
        updated = await ctx.client.update(SERVICES, namespace_of(svc), name, body)
    except Exception as exc:
        raise wrap(exc, "failed to update service with owner reference") from exc
    log.info("adopted service %s/%s", namespace_of(svc), name)
    return updated if isinstance(updated, dict) and updated else body


async def _repair_service(
    ctx: StepContext, svc: Obj, name_hash: str, ports: list[Obj] | None, *, manage_ports: bool
) -> Obj:
    """Undo drift of an owned Service: tracking label, selector, and ports when managed."""
    work: Obj = {
        "metadata": copy.deepcopy(svc.get("metadata") or {}),
        "spec": copy.deepcopy(svc.get("spec") or {}),
    }
    labels = meta(work).get("labels") or {}
    labels[c.LABEL_SANDBOX_NAME_HASH] = name_hash
    meta(work)["labels"] = labels
    work["spec"]["selector"] = {c.LABEL_SANDBOX_NAME_HASH: name_hash}
    if manage_ports and not service_ports_equal(work["spec"].get("ports"), ports):
        if ports:
            work["spec"]["ports"] = ports
        else:
            work["spec"].pop("ports", None)
    base = {"metadata": svc.get("metadata") or {}, "spec": svc.get("spec") or {}}
    patch = create_merge_patch(base, work)
    if not patch:
        return svc
    try:
        await ctx.client.patch(SERVICES, namespace_of(svc), name_of(svc), patch)
    except Exception as exc:
        raise wrap(exc, "failed to patch owned service") from exc
    log.info("repaired drift of service %s/%s", namespace_of(svc), name_of(svc))
    return {**svc, **work}


def _set_service_status(ctx: StepContext, sandbox: Obj, svc: Obj) -> None:
    status = sandbox.setdefault("status", {})
    status["service"] = name_of(svc)
    status["serviceFQDN"] = service_fqdn(svc, ctx.cluster_domain)


def _clear_service_status(sandbox: Obj) -> None:
    status = sandbox.setdefault("status", {})
    status["service"] = ""
    status["serviceFQDN"] = ""
