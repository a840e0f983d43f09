"""What the SandboxClaim controller watches and caches, and the RBAC rules it needs (upstream's
SetupWithManager).

Watches: claims (primary; the predicate records first observations), owned Sandboxes (only
the changes a claim mirrors), every Sandbox into the warm queue, pools (create, delete,
generation change) to their unbound claims, and template creation to the claims of pools that
use the template, and owned NetworkPolicies named ``<claim>-network-policy`` (the
legacy per-claim policy, deleted from the cache's view on every pass). The
caches of Sandboxes, pools, templates and NetworkPolicies are shared with the other controllers
of the process; the claim controller's own indexes are prefixed ``claim:``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.rbac import PolicyRule, rule
from kube_agent_sandbox.controller.runtime import (
    ControllerBuilder,
    EventHandler,
    Informer,
    Obj,
    Request,
    RequestQueue,
    controller_ref,
    find_condition,
    generation_changed,
    meta,
)
from kube_agent_sandbox.controller.tracing import tracer_for
from kube_agent_sandbox.extensions.claim.metrics import ClaimMetrics
from kube_agent_sandbox.extensions.claim.observed import FirstObserved
from kube_agent_sandbox.extensions.claim.reconciler import (
    EVENT_REPORTER,
    ClaimReconciler,
    legacy_network_policy_name,
)
from kube_agent_sandbox.extensions.claim.sandboxbuild import template_name_of
from kube_agent_sandbox.extensions.claim.warmqueue import (
    WarmQueue,
    sandbox_feeder,
    warm_pool_dropper,
)

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.config import ControllerOptions
    from kube_agent_sandbox.controller.runtime import Manager

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "sandboxclaim"
CLAIM_POOL_INDEX: Final = "claim:spec.warmPoolRef.name"
"""Claims by ``<namespace>/<spec.warmPoolRef.name>``."""
POOL_TEMPLATE_INDEX: Final = "claim:spec.sandboxTemplateRef.name"
"""Pools by ``<namespace>/<spec.sandboxTemplateRef.name>``."""

_READ: Final = ("get", "list", "watch")

RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    rule(
        c.EXTENSIONS_GROUP,
        SANDBOX_CLAIMS.plural,
        ("get", "list", "watch", "update", "patch", "delete"),
    ),
    rule(c.EXTENSIONS_GROUP, f"{SANDBOX_CLAIMS.plural}/status", ("get", "update", "patch")),
    rule(c.EXTENSIONS_GROUP, f"{SANDBOX_CLAIMS.plural}/finalizers", ("get", "update", "patch")),
    rule(
        c.GROUP, SANDBOXES.plural, ("get", "list", "watch", "create", "update", "patch", "delete")
    ),
    rule(c.EXTENSIONS_GROUP, SANDBOX_TEMPLATES.plural, _READ),
    rule(c.EXTENSIONS_GROUP, SANDBOX_WARM_POOLS.plural, _READ),
    # A claim created from a snapshot reads its image (extensions.agents.x-k8s.io/snapshot).
    rule(c.EXTENSIONS_GROUP, "sandboxsnapshots", ("get",)),
    rule(NETWORK_POLICIES.group, NETWORK_POLICIES.plural, (*_READ, "delete")),
    rule("", "events", ("create", "patch")),
    rule("events.k8s.io", "events", ("create", "patch")),
)
"""Permissions of the SandboxClaim controller."""


def legacy_policy_change_matters(old: Obj | None, new: Obj | None) -> bool:
    """Owned-NetworkPolicy predicate: a legacy per-claim policy appears or changes.

    Legacy means named ``<controller name>-network-policy``; deletes need no pass, and the
    controller handler maps only SandboxClaim controllers to requests.
    """
    if new is None:
        return False
    ref = controller_ref(new)
    return ref is not None and meta(new).get("name") == legacy_network_policy_name(
        str(ref.get("name") or "")
    )


def _ns_key(obj: Obj, value: str) -> str:
    return f"{meta(obj).get('namespace') or ''}/{value}"


def claim_pool_index(claim: Obj) -> Iterable[str]:
    """Index function of :data:`CLAIM_POOL_INDEX`."""
    pool = ((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name")
    return (_ns_key(claim, str(pool)),) if pool else ()


def pool_template_index(pool: Obj) -> Iterable[str]:
    """Index function of :data:`POOL_TEMPLATE_INDEX`."""
    template = template_name_of(pool)
    return (_ns_key(pool, template),) if template else ()


def _condition(sandbox: Obj, type_: str) -> Obj | None:
    return find_condition((sandbox.get("status") or {}).get("conditions"), type_)


def sandbox_change_matters(old: Obj | None, new: Obj | None) -> bool:
    """Owned-Sandbox predicate: creates and deletes, and updates a claim mirrors.

    An update matters when deletion started, the pod IPs changed, or the Ready or Finished
    condition changed in any field (PodScheduled and everything else are ignored).
    """
    if old is None or new is None:
        return True
    if bool(meta(old).get("deletionTimestamp")) != bool(meta(new).get("deletionTimestamp")):
        return True
    if (old.get("status") or {}).get("podIPs") != (new.get("status") or {}).get("podIPs"):
        return True
    return any(
        _condition(old, t) != _condition(new, t) for t in (c.CONDITION_READY, c.CONDITION_FINISHED)
    )


def _claims_of_pool(claims: Informer, namespace: str, pool: str) -> list[Obj]:
    return claims.by_index(CLAIM_POOL_INDEX, f"{namespace}/{pool}")


def pool_handler(queue: RequestQueue, claims: Informer) -> EventHandler:
    """Pool create/delete/generation change -> its unbound, live claims."""

    def enqueue(pool: Obj) -> None:
        m = meta(pool)
        namespace, name = str(m.get("namespace") or ""), str(m.get("name") or "")
        for claim in _claims_of_pool(claims, namespace, name):
            cm = meta(claim)
            if cm.get("deletionTimestamp"):
                continue
            if ((claim.get("status") or {}).get("sandbox") or {}).get("name"):
                continue
            queue.add(Request(namespace, str(cm.get("name") or "")))

    def on_update(old: Obj, new: Obj) -> None:
        if generation_changed(old, new):
            enqueue(new)

    return EventHandler(on_add=enqueue, on_update=on_update, on_delete=enqueue)


def template_handler(queue: RequestQueue, pools: Informer, claims: Informer) -> EventHandler:
    """Template create -> every live claim (bound or not) of the pools using it."""

    def on_add(template: Obj) -> None:
        m = meta(template)
        namespace, name = str(m.get("namespace") or ""), str(m.get("name") or "")
        seen: set[str] = set()
        for pool in pools.by_index(POOL_TEMPLATE_INDEX, f"{namespace}/{name}"):
            for claim in _claims_of_pool(claims, namespace, str(meta(pool).get("name") or "")):
                claim_name = str(meta(claim).get("name") or "")
                if meta(claim).get("deletionTimestamp") or claim_name in seen:
                    continue
                seen.add(claim_name)
                queue.add(Request(namespace, claim_name))

    return EventHandler(on_add=on_add)


def setup(
    manager: Manager, options: ControllerOptions, *, namespace: str | None = None
) -> ClaimReconciler:
    """Register the SandboxClaim controller, its caches, indexes, warm queue and metrics.

    Args:
        manager: The process manager.
        options: Parsed flags: ``sandbox_claim_concurrent_workers``, ``disable_claim_events``,
            ``disable_claim_observability_annotations``, ``enable_tracing`` and
            ``allowed_label_domains``.
        namespace: Watch only this namespace (tests); all when None.

    Returns:
        The reconciler (tests inspect it).
    """
    claims = manager.informer(SANDBOX_CLAIMS, namespace=namespace)
    sandboxes = manager.informer(SANDBOXES, namespace=namespace)
    pools = manager.informer(SANDBOX_WARM_POOLS, namespace=namespace)
    templates = manager.informer(SANDBOX_TEMPLATES, namespace=namespace)
    policies = manager.informer(NETWORK_POLICIES, namespace=namespace)
    claims.add_index(CLAIM_POOL_INDEX, claim_pool_index)
    pools.add_index(POOL_TEMPLATE_INDEX, pool_template_index)

    queue = WarmQueue()
    observed = FirstObserved()
    reconciler = ClaimReconciler(
        manager.client,
        claims=claims,
        sandboxes=sandboxes,
        pools=pools,
        templates=templates,
        queue=queue,
        observed=observed,
        metrics=ClaimMetrics(manager.registry),
        recorder=None if options.disable_claim_events else manager.event_recorder(EVENT_REPORTER),
        allowed_label_domains=options.allowed_label_domains,
        persist_observability=not options.disable_claim_observability_annotations,
        tracer=tracer_for(enabled=options.enable_tracing),
        network_policies=policies,
    )
    # read-your-writes bookkeeping first, so a reconcile never sees a cache event it missed
    claims.add_event_handler(reconciler.claims.handler())
    sandboxes.add_event_handler(reconciler.sandboxes.handler())
    sandboxes.add_event_handler(sandbox_feeder(queue))
    pools.add_event_handler(warm_pool_dropper(queue))

    (
        ControllerBuilder(manager, CONTROLLER_NAME)
        .for_resource(SANDBOX_CLAIMS, predicate=observed.predicate)
        .owns(SANDBOXES, predicate=sandbox_change_matters)
        .owns(NETWORK_POLICIES, predicate=legacy_policy_change_matters)
        .watches_handler(SANDBOX_WARM_POOLS, lambda handle: pool_handler(handle, claims))
        .watches_handler(SANDBOX_TEMPLATES, lambda handle: template_handler(handle, pools, claims))
        .with_workers(options.sandbox_claim_concurrent_workers)
        .complete(reconciler)
    )
    log.info(
        "sandboxclaim controller registered",
        extra={"workers": options.sandbox_claim_concurrent_workers},
    )
    return reconciler
