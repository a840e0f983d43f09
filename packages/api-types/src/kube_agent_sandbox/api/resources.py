"""Names of the Agent Sandbox resources, shared by every version of each kind.

A kind's group, plural and short names do not change between versions; the version classes
refer to one :class:`ResourceNames` each, and the registry and CRD generator read them back.
The REST descriptors of their served storage version (``SANDBOXES``, ...) are defined here once
for the controllers, the gateway and the SDK; Kubernetes' own kinds are in
:mod:`kube_agent_sandbox.api.rest`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.rest import Resource


@dataclass(frozen=True)
class ResourceNames:
    """Identity of a custom resource kind.

    Attributes:
        group: API group, e.g. ``agents.x-k8s.io``.
        kind: e.g. ``Sandbox``.
        plural: resource name in URLs, e.g. ``sandboxes``.
        short_names: ``kubectl`` aliases.
    """

    group: str
    kind: str
    plural: str
    short_names: tuple[str, ...]

    @property
    def singular(self) -> str:
        """Lower-case kind."""
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        """Kind of the list type, e.g. ``SandboxList``."""
        return f"{self.kind}List"

    @property
    def crd_name(self) -> str:
        """``<plural>.<group>``, the CRD's metadata.name."""
        return f"{self.plural}.{self.group}"

    def api_version(self, version: str) -> str:
        """``<group>/<version>``."""
        return f"{self.group}/{version}"


SANDBOX: Final = ResourceNames(
    group=constants.GROUP,
    kind=constants.KIND_SANDBOX,
    plural="sandboxes",
    short_names=("sandbox",),
)
SANDBOX_TEMPLATE: Final = ResourceNames(
    group=constants.EXTENSIONS_GROUP,
    kind=constants.KIND_SANDBOX_TEMPLATE,
    plural="sandboxtemplates",
    short_names=("sandboxtemplate",),
)
SANDBOX_WARM_POOL: Final = ResourceNames(
    group=constants.EXTENSIONS_GROUP,
    kind=constants.KIND_SANDBOX_WARM_POOL,
    plural="sandboxwarmpools",
    short_names=("swp",),
)
SANDBOX_CLAIM: Final = ResourceNames(
    group=constants.EXTENSIONS_GROUP,
    kind=constants.KIND_SANDBOX_CLAIM,
    plural="sandboxclaims",
    short_names=("sandboxclaim",),
)
SANDBOX_SNAPSHOT: Final = ResourceNames(
    group=constants.EXTENSIONS_GROUP,
    kind=constants.KIND_SANDBOX_SNAPSHOT,
    plural="sandboxsnapshots",
    short_names=("sbsnap",),
)


def rest_resource(names: ResourceNames, version: str = constants.V1BETA1) -> Resource:
    """The REST descriptor of one served version of an Agent Sandbox kind."""
    return Resource(names.group, version, names.plural, names.kind)


SANDBOXES: Final = rest_resource(SANDBOX)
SANDBOX_TEMPLATES: Final = rest_resource(SANDBOX_TEMPLATE)
SANDBOX_WARM_POOLS: Final = rest_resource(SANDBOX_WARM_POOL)
SANDBOX_CLAIMS: Final = rest_resource(SANDBOX_CLAIM)
SANDBOX_SNAPSHOTS: Final = rest_resource(SANDBOX_SNAPSHOT)
