"""The ``kube_agent_sandbox.extensions`` entry point: what ``--extensions`` turns on.

``agent-sandbox-controller --extensions`` loads :data:`plugin` through the entry point group
``kube_agent_sandbox.extensions`` (see :mod:`kube_agent_sandbox.controller.plugins`) and
installs it: :func:`setup` registers the SandboxTemplate, SandboxWarmPool and SandboxClaim
controllers in the same Manager as the Sandbox controller, as upstream runs them in one binary.
:data:`RBAC_RULES` is what ``rbacgen`` writes into the ``agent-sandbox-controller-extensions``
ClusterRole: the union of what the three controllers declare.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kube_agent_sandbox.controller.plugins import ControllerPlugin
from kube_agent_sandbox.controller.rbac import PolicyRule
from kube_agent_sandbox.extensions.claim import setup as claim_setup
from kube_agent_sandbox.extensions.idle import setup as idle_setup
from kube_agent_sandbox.extensions.snapshot import setup as snapshot_setup
from kube_agent_sandbox.extensions.template import setup as template_setup
from kube_agent_sandbox.extensions.warmpool import setup as warmpool_setup

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.config import ControllerOptions
    from kube_agent_sandbox.controller.runtime import Manager

__all__ = ["PLUGIN_NAME", "RBAC_RULES", "plugin", "setup"]

PLUGIN_NAME: Final = "extensions"
"""The plugin's name (the entry point's name too)."""

RBAC_RULES: Final[tuple[PolicyRule, ...]] = (
    *template_setup.RBAC_RULES,
    *warmpool_setup.RBAC_RULES,
    *claim_setup.RBAC_RULES,
    *idle_setup.RBAC_RULES,
    *snapshot_setup.RBAC_RULES,
)
"""Permissions of the extension controllers (normalized and merged by ``rbacgen``); the idle
reconciler's are included even though it runs only with ``--idle-shutdown``."""


def setup(manager: Manager, options: ControllerOptions) -> None:
    """Register the template, warm pool and claim controllers (and the idle one) on ``manager``.

    The warm pool controller goes before the claim controller: both index the shared pool
    cache, and the pool's own watches should be in place when claims start adopting.

    Args:
        manager: The controller process's Manager.
        options: Parsed flags (workers, warm pool and claim flags, allowed label domains,
            ``--idle-shutdown``, ``--snapshot-*``).
    """
    template_setup.setup(manager, options)
    warmpool_setup.setup(manager, options)
    claim_setup.setup(manager, options)
    if options.idle_shutdown:
        idle_setup.setup(manager, options)
    if options.snapshot_registry:
        snapshot_setup.setup(manager, options)


plugin: Final = ControllerPlugin(name=PLUGIN_NAME, setup=setup, rbac_rules=RBAC_RULES)
"""What the ``kube_agent_sandbox.extensions`` entry point names."""
