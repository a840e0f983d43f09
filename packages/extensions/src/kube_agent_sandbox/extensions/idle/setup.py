"""What the idle reconciler watches and caches, and the RBAC rules it needs.

Sandboxes are the primary resource; a heartbeat Lease (label ``kube-agent-sandbox.io/heartbeat``)
maps to the Sandbox of the same name and namespace. SandboxClaims and SandboxTemplates are
cached (shared with the claim and template controllers) only to resolve inherited policy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from kube_agent_sandbox.api.rest import LEASES, POD_METRICS
from kube_agent_sandbox.controller.rbac import PolicyRule, rule
from kube_agent_sandbox.controller.runtime import ControllerBuilder, Obj, Request, meta
from kube_agent_sandbox.extensions.idle.metrics import IdleMetrics
from kube_agent_sandbox.extensions.idle.policy import MIN_IDLE_TIMEOUT
from kube_agent_sandbox.extensions.idle.reconciler import IdleReconciler
from kube_agent_sandbox.extensions.idle.resources import HEARTBEAT_SELECTOR

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.config import ControllerOptions
    from kube_agent_sandbox.controller.runtime import Manager

__all__ = ["CONTROLLER_NAME", "EVENT_REPORTER", "RBAC_RULES", "lease_to_sandbox", "setup"]

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "sandboxidle"
EVENT_REPORTER: Final = "sandboxidle-controller"
WORKERS: Final = 4

RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    # Heartbeats are read from the cache, and once more just before acting.
    rule(LEASES.group, LEASES.plural, ("get", "list", "watch")),
    # Suspend (spec.operatingMode + suspended-by), inherited policy annotations, idle Delete.
    rule(c.GROUP, "sandboxes", ("get", "list", "watch", "patch", "delete")),
    rule(c.EXTENSIONS_GROUP, SANDBOX_CLAIMS.plural, ("get", "list", "watch", "delete")),
    rule(c.EXTENSIONS_GROUP, SANDBOX_TEMPLATES.plural, ("get", "list", "watch")),
    # The optional CPU veto (metrics-server).
    rule(POD_METRICS.group, POD_METRICS.plural, ("get",)),
    rule("", "events", ("create", "patch")),
    rule("events.k8s.io", "events", ("create", "patch")),
)
"""Permissions of the idle reconciler (docs/guides/idle-shutdown.md)."""


def lease_to_sandbox(lease: Obj) -> Iterable[Request]:
    """A heartbeat Lease names its Sandbox: same namespace and name, owner reference to it."""
    m = meta(lease)
    for ref in m.get("ownerReferences") or ():
        if ref.get("kind") == c.KIND_SANDBOX and ref.get("name") == m.get("name"):
            return [Request(str(m.get("namespace") or ""), str(m.get("name") or ""))]
    return []


def setup(
    manager: Manager, options: ControllerOptions, *, namespace: str | None = None
) -> IdleReconciler:
    """Register the idle reconciler and its caches.

    Args:
        manager: The process manager.
        options: Parsed flags (``idle_min_timeout``, a test-only field, lowers the minimum).
        namespace: Watch only this namespace (tests sharing a cluster); all when None.

    Returns:
        The reconciler (tests drive it directly).
    """
    sandboxes = manager.informer(SANDBOXES, namespace=namespace)
    leases = manager.informer(LEASES, label_selector=HEARTBEAT_SELECTOR, namespace=namespace)
    claims = manager.informer(SANDBOX_CLAIMS, namespace=namespace)
    templates = manager.informer(SANDBOX_TEMPLATES, namespace=namespace)
    minimum = float(getattr(options, "idle_min_timeout", MIN_IDLE_TIMEOUT))
    reconciler = IdleReconciler(
        manager.client,
        sandboxes=sandboxes,
        leases=leases,
        claims=claims,
        templates=templates,
        recorder=manager.event_recorder(EVENT_REPORTER),
        min_idle_timeout=minimum,
        metrics=IdleMetrics(manager.registry),
    )
    (
        ControllerBuilder(manager, CONTROLLER_NAME)
        .for_resource(SANDBOXES)
        .watches(LEASES, lease_to_sandbox)
        .with_workers(WORKERS)
        .complete(reconciler)
    )
    log.info("sandbox idle controller registered", extra={"minIdleTimeout": minimum})
    return reconciler
