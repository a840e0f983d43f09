"""What the warm pool controller watches and caches, and the RBAC rules it needs (upstream's
SetupWithManager).

Pools are the primary resource. A Sandbox event first lowers its pool's expectations, then
queues the pool (old and new controller on an update, so a pool notices at once when a claim
adopts one of its members). A template event queues the pools of its namespace that use it,
found through an index.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.rbac import PolicyRule, rule
from kube_agent_sandbox.controller.runtime import (
    ControllerBuilder,
    ControllerHandle,
    EventHandler,
    Informer,
    Mapper,
    Obj,
    Request,
    Resource,
    name_of,
    namespace_of,
    request_of,
)
from kube_agent_sandbox.extensions.warmpool.indexes import (
    MEMBER_INDEX,
    TEMPLATE_REF_INDEX,
    member_index,
    template_ref_index,
    template_ref_key,
)
from kube_agent_sandbox.extensions.warmpool.metrics import WarmPoolMetrics
from kube_agent_sandbox.extensions.warmpool.reconciler import (
    WarmPoolReconciler,
    WarmPoolSettings,
)

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.config import ControllerOptions
    from kube_agent_sandbox.controller.runtime import Manager

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "sandboxwarmpool"
EVENT_REPORTER: Final = "sandboxwarmpool-controller"
MEMBER_EVENT_DELAY: Final = 0.25
"""Seconds between a member's change and the pool pass it causes. A pass reads every member
from the cache, so the changes of a claim burst (each adoption, each refill's creation and
status updates) are gathered into one pass per pool per quarter second instead of one each."""

_ALL_VERBS: Final = ("get", "list", "watch", "create", "update", "patch", "delete")

RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    rule(c.EXTENSIONS_GROUP, SANDBOX_WARM_POOLS.plural, _ALL_VERBS),
    rule(c.EXTENSIONS_GROUP, f"{SANDBOX_WARM_POOLS.plural}/status", ("get", "update", "patch")),
    rule(c.EXTENSIONS_GROUP, f"{SANDBOX_WARM_POOLS.plural}/finalizers", ("get", "update", "patch")),
    rule(c.EXTENSIONS_GROUP, SANDBOX_TEMPLATES.plural, ("get", "list", "watch")),
    rule(c.GROUP, SANDBOXES.plural, _ALL_VERBS),
    rule("", PODS.plural, ("get", "list", "watch")),
    rule("", "events", ("create", "patch", "update")),
    rule("events.k8s.io", "events", ("create", "patch", "update")),
)
"""Permissions of the warm pool controller."""


def _informer(manager: Manager, resource: Resource, namespace: str | None) -> Informer:
    """The shared informer of ``resource``, scoped to ``namespace`` when this creates it.

    An informer another controller made with its own options (e.g. the Pod cache's label
    selector and transform) is reused as it is.
    """
    try:
        return manager.informer(resource, namespace=namespace)
    except ValueError:
        return manager.informer(resource)


def templates_mapper(pools: Informer) -> Mapper:
    """Map a SandboxTemplate to the pools of its namespace that reference it."""

    def mapper(template: Obj) -> list[Request]:
        key = template_ref_key(namespace_of(template), name_of(template))
        return [request_of(pool) for pool in pools.by_index(TEMPLATE_REF_INDEX, key)]

    return mapper


def sandbox_handler(
    controller: ControllerHandle,
    reconciler: WarmPoolReconciler,
    *,
    delay: float = MEMBER_EVENT_DELAY,
) -> EventHandler:
    """Lower the pool's expectations at once, then queue the pool within ``delay``.

    A pool already waiting keeps its earlier deadline, so a stream of member changes costs
    one pass per ``delay`` and the first change is never postponed by later ones.
    """

    def queue(key: Request) -> None:
        controller.add_after(key, delay)

    def on_add(sandbox: Obj) -> None:
        key = reconciler.observe_added(sandbox)
        if key is not None:
            queue(key)

    def on_update(old: Obj, new: Obj) -> None:
        old_key = controller.owner_request(old)
        new_key = controller.owner_request(new)
        if old_key is not None:
            queue(old_key)
        if new_key is not None and new_key != old_key:
            queue(new_key)

    def on_delete(sandbox: Obj) -> None:
        key = reconciler.observe_deleted(sandbox)
        if key is not None:
            queue(key)

    return EventHandler(on_add, on_update, on_delete)


def setup(
    manager: Manager, options: ControllerOptions, *, namespace: str | None = None
) -> WarmPoolReconciler:
    """Register the warm pool controller, its caches and indexes.

    Args:
        manager: The process manager.
        options: Parsed flags (``sandbox_warm_pool_*``, ``enable_warm_pool_eviction``).
        namespace: Watch only this namespace (tests sharing a cluster); all when None.

    Returns:
        The reconciler (tests inspect it).
    """
    pools = _informer(manager, SANDBOX_WARM_POOLS, namespace)
    pools.add_index(TEMPLATE_REF_INDEX, template_ref_index)
    sandboxes = _informer(manager, SANDBOXES, namespace)
    sandboxes.add_index(MEMBER_INDEX, member_index)
    templates = _informer(manager, SANDBOX_TEMPLATES, namespace)
    pods = _informer(manager, PODS, namespace)
    reconciler = WarmPoolReconciler(
        manager.client,
        pools=pools,
        sandboxes=sandboxes,
        templates=templates,
        pods=pods,
        recorder=manager.event_recorder(EVENT_REPORTER),
        settings=WarmPoolSettings.from_options(options),
        metrics=WarmPoolMetrics(manager.registry, pools),
    )
    (
        ControllerBuilder(manager, CONTROLLER_NAME)
        .for_resource(SANDBOX_WARM_POOLS)
        .watches(SANDBOX_TEMPLATES, templates_mapper(pools))
        .watches_handler(SANDBOXES, lambda handle: sandbox_handler(handle, reconciler))
        .with_workers(options.sandbox_warm_pool_concurrent_workers)
        .complete(reconciler)
    )
    log.info(
        "warm pool controller registered",
        extra={
            "workers": options.sandbox_warm_pool_concurrent_workers,
            "maxBatchSize": options.sandbox_warm_pool_max_batch_size,
        },
    )
    return reconciler
