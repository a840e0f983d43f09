"""The Sandbox controller: one Pod, an optional headless Service and PVCs per Sandbox.

``SandboxReconciler`` converges one Sandbox; ``setup`` wires it into the manager (watches,
caches, indexes) and ``RBAC_RULES`` lists the permissions it needs.
"""

from kube_agent_sandbox.controller.sandbox.reconciler import SandboxReconciler

__all__ = ["SandboxReconciler"]
