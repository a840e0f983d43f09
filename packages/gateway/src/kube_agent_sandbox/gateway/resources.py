"""REST resource descriptors of every kind the gateway reads or writes.

The gateway may not import the controllers' internals (import-linter), so it names the
resources itself, in one place shared by its caches, its writes and its RBAC rules.
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Resource

SANDBOXES: Final = Resource(c.GROUP, c.V1BETA1, "sandboxes", c.KIND_SANDBOX)
SANDBOX_CLAIMS: Final = Resource(
    c.EXTENSIONS_GROUP, c.V1BETA1, "sandboxclaims", c.KIND_SANDBOX_CLAIM
)
SANDBOX_WARM_POOLS: Final = Resource(
    c.EXTENSIONS_GROUP, c.V1BETA1, "sandboxwarmpools", c.KIND_SANDBOX_WARM_POOL
)
SANDBOX_TEMPLATES: Final = Resource(
    c.EXTENSIONS_GROUP, c.V1BETA1, "sandboxtemplates", c.KIND_SANDBOX_TEMPLATE
)
PODS: Final = Resource("", "v1", "pods", "Pod")
SECRETS: Final = Resource("", "v1", "secrets", "Secret")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease")
