"""What the Sandbox controller watches and caches, the RBAC rules it needs, and its plugin.

Upstream's ``SetupWithManager``: Sandboxes are the primary resource; owned Pods and Services
trigger reconciles of their controller Sandbox when they carry the tracking label; PVCs are
read from a cache but do not trigger reconciles. Pods are cached without their spec (only
``spec.nodeName`` is read) to keep memory small (upstream's PodCacheTransform).

:data:`plugin` registers the controller through the same
:class:`~kube_agent_sandbox.controller.plugins.ControllerPlugin` contract as the extensions;
the controller process and ``rbacgen`` import it directly (it is always present).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, PVCS, SERVICES
from kube_agent_sandbox.controller.goduration import format_go_duration
from kube_agent_sandbox.controller.plugins import ControllerPlugin
from kube_agent_sandbox.controller.rbac import PolicyRule, rule
from kube_agent_sandbox.controller.runtime import ControllerBuilder, Obj
from kube_agent_sandbox.controller.sandbox.metrics import register_collector
from kube_agent_sandbox.controller.sandbox.pod import POD_NAME_HASH_INDEX, pod_name_hash_index
from kube_agent_sandbox.controller.sandbox.reconciler import SandboxReconciler
from kube_agent_sandbox.controller.sandbox.writebehind import POD_PATCH_BOUND
from kube_agent_sandbox.controller.tracing import tracer_for

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.config import ControllerOptions
    from kube_agent_sandbox.controller.runtime import Manager

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "sandbox"
PLUGIN_NAME: Final = "Sandbox"
"""The plugin's name: upstream's ``controller`` field of ``unable to create controller``."""
EVENT_REPORTER: Final = c.EVENT_REPORTER_SANDBOX_CONTROLLER

_ALL_VERBS: Final = ("get", "list", "watch", "create", "update", "patch", "delete")

RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    rule(c.GROUP, SANDBOXES.plural, _ALL_VERBS),
    rule(c.GROUP, f"{SANDBOXES.plural}/status", ("get", "update", "patch")),
    rule(c.GROUP, f"{SANDBOXES.plural}/finalizers", ("get", "update", "patch")),
    rule("", PODS.plural, _ALL_VERBS),
    rule("", SERVICES.plural, _ALL_VERBS),
    rule("", PVCS.plural, _ALL_VERBS),
    rule("", "events", ("create", "patch")),
    rule("events.k8s.io", "events", ("create", "patch")),
)
"""Permissions of the Sandbox controller (upstream's kubebuilder markers, minus leases, which
belong to the runtime's leader election)."""

POD_INDEXES: Final = {POD_NAME_HASH_INDEX: pod_name_hash_index}
"""Indexes the reconciler expects on the Pod cache."""


def has_tracking_label(old: Obj | None, new: Obj | None) -> bool:
    """Event predicate: the (new, or deleted) object has the tracking label.

    Like controller-runtime's LabelSelectorPredicate, an update is judged by the new object.
    """
    obj = new if new is not None else old
    if obj is None:
        return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return c.LABEL_SANDBOX_NAME_HASH in labels


def pod_cache_transform(obj: Obj) -> Obj:
    """Strip what the controller never reads from a cached Pod (upstream's PodCacheTransform).

    ``managedFields`` and ``finalizers`` go, and the spec is reduced to ``nodeName``. Safe
    because every Pod write is a metadata-only merge patch computed against this same cached
    object: stripped fields are on neither side of the diff.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        meta.pop("finalizers", None)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        node = spec.get("nodeName")
        obj["spec"] = {"nodeName": node} if node else {}
    return obj


def setup(
    manager: Manager, options: ControllerOptions, *, namespace: str | None = None
) -> SandboxReconciler:
    """Register the Sandbox controller, its caches and the ``agent_sandboxes`` collector.

    Args:
        manager: The process manager (informers, controllers, metrics registry, events).
        options: Parsed flags; uses ``cluster_domain``, ``sandbox_concurrent_workers``,
            ``cache_label_selectors``, ``enable_tracing`` and ``sandbox_write_behind_window``.
        namespace: Watch only this namespace (tests sharing a cluster); all when None.

    Returns:
        The reconciler (tests drive it directly).
    """
    selector = c.LABEL_SANDBOX_NAME_HASH if options.cache_label_selectors else None
    pods = manager.informer(
        PODS, label_selector=selector, transform=pod_cache_transform, namespace=namespace
    )
    for name, func in POD_INDEXES.items():
        pods.add_index(name, func)
    services = manager.informer(SERVICES, label_selector=selector, namespace=namespace)
    sandboxes = manager.informer(SANDBOXES, namespace=namespace)
    pvcs = manager.informer(PVCS, namespace=namespace)
    reconciler = SandboxReconciler(
        manager.client,
        sandboxes=sandboxes,
        pods=pods,
        services=services,
        pvcs=pvcs,
        recorder=manager.event_recorder(EVENT_REPORTER),
        cluster_domain=options.cluster_domain,
        tracer=tracer_for(enabled=options.enable_tracing),
        write_behind_window=options.sandbox_write_behind_window,
        status_coalesce_window=options.sandbox_status_coalesce_window,
        # The state keeper and the snapshot resolver run with the SandboxSnapshot controller in
        # this same process.
        keep_state=options.extensions and bool(options.snapshot_registry),
    )
    if options.sandbox_write_behind_window > 0:
        log.info(
            "Sandbox controller write deferral enabled (--sandbox-write-behind-window)",
            extra={
                "window": format_go_duration(options.sandbox_write_behind_window),
                "podPatchBound": format_go_duration(POD_PATCH_BOUND),
            },
        )
    (
        ControllerBuilder(manager, CONTROLLER_NAME)
        .for_resource(SANDBOXES)
        .owns(PODS, predicate=has_tracking_label)
        .owns(SERVICES, predicate=has_tracking_label)
        .with_workers(options.sandbox_concurrent_workers)
        .complete(reconciler)
    )
    register_collector(manager.registry, sandboxes)
    log.info(
        "sandbox controller registered",
        extra={"workers": options.sandbox_concurrent_workers, "cacheLabelSelector": selector},
    )
    return reconciler


def register(manager: Manager, options: ControllerOptions) -> None:
    """The core plugin's setup: the Sandbox controller over every namespace.

    Args:
        manager: The process manager.
        options: Parsed flags (see :func:`setup`).
    """
    setup(manager, options)


plugin: Final = ControllerPlugin(name=PLUGIN_NAME, setup=register, rbac_rules=RBAC_RULES)
"""The core Sandbox controller as a plugin: what ``agent-sandbox-controller`` always installs
and what a program embedding the controller installs on its own manager."""
