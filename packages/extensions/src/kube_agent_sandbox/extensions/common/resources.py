"""REST resource descriptors of every kind the extension controllers read or write.

One place, so the reconcilers, their watches and their RBAC rules name the same
group/version/plural and cannot drift apart.
"""

from __future__ import annotations

from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Resource
from kube_agent_sandbox.controller.sandbox.resources import PODS, SANDBOXES

__all__ = [
    "NETWORK_POLICIES",
    "PODS",
    "SANDBOXES",
    "SANDBOX_CLAIMS",
    "SANDBOX_TEMPLATES",
    "SANDBOX_WARM_POOLS",
]

SANDBOX_TEMPLATES: Final = Resource(
    group=c.EXTENSIONS_GROUP,
    version=c.V1BETA1,
    plural="sandboxtemplates",
    kind=c.KIND_SANDBOX_TEMPLATE,
)
SANDBOX_WARM_POOLS: Final = Resource(
    group=c.EXTENSIONS_GROUP,
    version=c.V1BETA1,
    plural="sandboxwarmpools",
    kind=c.KIND_SANDBOX_WARM_POOL,
)
SANDBOX_CLAIMS: Final = Resource(
    group=c.EXTENSIONS_GROUP,
    version=c.V1BETA1,
    plural="sandboxclaims",
    kind=c.KIND_SANDBOX_CLAIM,
)
NETWORK_POLICIES: Final = Resource(
    group="networking.k8s.io", version="v1", plural="networkpolicies", kind="NetworkPolicy"
)
