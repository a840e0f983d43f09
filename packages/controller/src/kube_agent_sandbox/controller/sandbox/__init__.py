"""The Sandbox controller: one Pod, an optional headless Service and PVCs per Sandbox.

``SandboxReconciler`` converges one Sandbox; ``setup`` wires it into the manager (watches,
caches, indexes) and ``RBAC_RULES`` lists the permissions it needs. :data:`plugin` bundles
both as a :class:`~kube_agent_sandbox.controller.plugins.ControllerPlugin`: install it on a
manager to run the Sandbox controller in any program.
"""

from kube_agent_sandbox.controller.sandbox.reconciler import SandboxReconciler
from kube_agent_sandbox.controller.sandbox.setup import plugin

__all__ = ["SandboxReconciler", "plugin"]
