"""REST coordinates of Kubernetes resources: the descriptor type, its URL paths, and the core kinds.

Generic (no Agent Sandbox kind here, so the controller runtime may import it): a
:class:`Resource` names what a client needs to build URLs and the objects' ``kind``, and
:func:`resource_path` builds those URLs. The Kubernetes kinds every part of the project reads or
writes are named once below; the Agent Sandbox kinds are in
:mod:`kube_agent_sandbox.api.resources`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    """Identifies a REST resource: what a client needs to build URLs, and its Kind.

    Attributes:
        group: API group, ``""`` for the core group.
        version: API version within the group, e.g. ``v1``.
        plural: Resource name in URLs, e.g. ``configmaps``.
        kind: The objects' ``kind``, e.g. ``ConfigMap``.
        namespaced: False for cluster-scoped resources.

    Example:
        ```python
        CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
        ```
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The objects' ``apiVersion``: ``group/version``, or ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_kind(self) -> tuple[str, str]:
        """``(group, kind)``, the identity that does not change between versions."""
        return (self.group, self.kind)


def resource_path(
    resource: Resource,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a collection (``name`` None) or of one object.

    A namespaced collection without namespace is the list across all namespaces.

    Raises:
        ValueError: if a namespaced object is addressed without namespace, or a subresource
            without name.
    """
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    if resource.namespaced and namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    elif resource.namespaced and name is not None:
        raise ValueError(f"{resource.plural} is namespaced: a namespace is required")
    path = f"{base}/{resource.plural}"
    if name is not None:
        if not name:
            raise ValueError("name must not be empty")
        path += f"/{quote(name, safe='')}"
    if subresource:
        if name is None:
            raise ValueError("a subresource needs an object name")
        path += f"/{subresource}"
    return path


PODS: Final = Resource("", "v1", "pods", "Pod")
NODES: Final = Resource("", "v1", "nodes", "Node", namespaced=False)
SERVICES: Final = Resource("", "v1", "services", "Service")
PVCS: Final = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
SECRETS: Final = Resource("", "v1", "secrets", "Secret")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease")
"""Leader election Leases and the heartbeat Leases of idle-managed Sandboxes."""
EVENTS: Final = Resource("events.k8s.io", "v1", "events", "Event")
NETWORK_POLICIES: Final = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
POD_METRICS: Final = Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics")
CUSTOM_RESOURCE_DEFINITIONS: Final = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
