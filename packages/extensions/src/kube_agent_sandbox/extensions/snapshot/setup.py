"""What the SandboxSnapshot controller watches, and the RBAC rules it needs.

It runs with ``--extensions`` when ``--snapshot-registry`` is set: SandboxSnapshots are the
primary resource, Sandboxes are cached to find a snapshot's source. The state keeper
(``keepstate.py``) runs beside it: Sandboxes are its primary resource, and the snapshots it made
wake their Sandbox. So does the snapshot resolver (``fromsnapshot.py``) of Sandboxes created
from a snapshot, which a snapshot wakes when they name it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.controller.rbac import PolicyRule, rule
from kube_agent_sandbox.controller.runtime import ControllerBuilder
from kube_agent_sandbox.extensions.snapshot.fromsnapshot import SnapshotResolver
from kube_agent_sandbox.extensions.snapshot.keepstate import StateKeeper, snapshot_to_sandbox
from kube_agent_sandbox.extensions.snapshot.metrics import SnapshotMetrics
from kube_agent_sandbox.extensions.snapshot.reconciler import SnapshotReconciler
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings, parse_settings

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.config import ControllerOptions
    from kube_agent_sandbox.controller.runtime import Manager

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "sandboxsnapshot"
EVENT_REPORTER: Final = "sandboxsnapshot-controller"
KEEPER_NAME: Final = "sandbox-keepstate"
KEEPER_EVENT_REPORTER: Final = "sandbox-keepstate-controller"
RESOLVER_NAME: Final = "sandbox-fromsnapshot"
RESOLVER_EVENT_REPORTER: Final = "sandbox-fromsnapshot-controller"
WORKERS: Final = 4

RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    # Snapshots: cached; the finalizer is added and removed with a merge patch; the state
    # keeper creates one per suspend of an opted-in Sandbox.
    rule(
        c.EXTENSIONS_GROUP,
        SANDBOX_SNAPSHOTS.plural,
        ("get", "list", "watch", "create", "patch", "update"),
    ),
    rule(c.EXTENSIONS_GROUP, f"{SANDBOX_SNAPSHOTS.plural}/status", ("get", "update", "patch")),
    # The state keeper reports on the Sandbox with annotations (a merge patch).
    rule(c.GROUP, SANDBOXES.plural, ("get", "list", "watch", "patch")),
    # The source Pod's node and container (read once per look, not cached).
    rule("", "pods", ("get",)),
    # The commit's Node: deleted or long not Ready fails the commit (NodeLost), not the timeout.
    rule("", "nodes", ("get",)),
    # No Secret rule: the registry's credentials are a mounted file (--snapshot-registry-auth-file).
    rule("", "events", ("create", "patch")),
    rule("events.k8s.io", "events", ("create", "patch")),
)
"""Permissions of the SandboxSnapshot controller (docs/guides/snapshots.md)."""


def settings_from(options: ControllerOptions) -> RegistrySettings:
    """The registry settings from the ``--snapshot-*`` flags.

    Raises:
        SettingsError: A flag value cannot work.
    """
    return parse_settings(
        options.snapshot_registry,
        options.snapshot_registry_auth_file,
        options.snapshot_registry_ca,
        options.snapshot_repository_prefix,
    )


def setup(
    manager: Manager, options: ControllerOptions, *, namespace: str | None = None
) -> SnapshotReconciler:
    """Register the SandboxSnapshot controller and its caches.

    Args:
        manager: The process manager.
        options: Parsed flags (the ``--snapshot-*`` ones).
        namespace: Watch only this namespace (tests sharing a cluster); all when None.

    Returns:
        The reconciler (tests drive it directly).
    """
    settings = settings_from(options)
    metrics = SnapshotMetrics(manager.registry)
    snapshots = manager.informer(SANDBOX_SNAPSHOTS, namespace=namespace)
    sandboxes = manager.informer(SANDBOXES, namespace=namespace)
    reconciler = SnapshotReconciler(
        manager.client,
        snapshots=snapshots,
        sandboxes=sandboxes,
        settings=settings,
        recorder=manager.event_recorder(EVENT_REPORTER),
        metrics=metrics,
        commit_timeout=options.snapshot_commit_timeout,
        node_grace=options.snapshot_node_lost_grace,
    )
    (
        ControllerBuilder(manager, CONTROLLER_NAME)
        .for_resource(SANDBOX_SNAPSHOTS)
        .with_workers(WORKERS)
        .complete(reconciler)
    )
    keeper = StateKeeper(
        manager.client,
        sandboxes=sandboxes,
        snapshots=snapshots,
        recorder=manager.event_recorder(KEEPER_EVENT_REPORTER),
    )
    (
        ControllerBuilder(manager, KEEPER_NAME)
        .for_resource(SANDBOXES)
        .watches(SANDBOX_SNAPSHOTS, snapshot_to_sandbox)
        .with_workers(WORKERS)
        .complete(keeper)
    )
    resolver = SnapshotResolver(
        manager.client,
        sandboxes=sandboxes,
        snapshots=snapshots,
        recorder=manager.event_recorder(RESOLVER_EVENT_REPORTER),
    )
    (
        ControllerBuilder(manager, RESOLVER_NAME)
        .for_resource(SANDBOXES)
        .watches(SANDBOX_SNAPSHOTS, resolver.sandboxes_naming)
        .with_workers(WORKERS)
        .complete(resolver)
    )
    log.info("sandboxsnapshot controller registered", extra={"registry": settings.url})
    return reconciler
