"""Where each kind the suite touches lives in the Kubernetes REST API.

The suite addresses objects by ``apiVersion`` + ``kind`` (as written in manifests) and needs the
plural resource name and scope to build request paths. The kinds of the Agent Sandbox API are
spelled out here literally (the suite checks implementations, it does not import their
constants); anything else is found through API discovery once and remembered.
"""

from __future__ import annotations

from dataclasses import dataclass

SANDBOX_GROUP = "agents.x-k8s.io"
EXTENSIONS_GROUP = "extensions.agents.x-k8s.io"
V1BETA1 = "v1beta1"
V1ALPHA1 = "v1alpha1"
SANDBOX_V1BETA1 = f"{SANDBOX_GROUP}/{V1BETA1}"
SANDBOX_V1ALPHA1 = f"{SANDBOX_GROUP}/{V1ALPHA1}"
EXTENSIONS_V1BETA1 = f"{EXTENSIONS_GROUP}/{V1BETA1}"
EXTENSIONS_V1ALPHA1 = f"{EXTENSIONS_GROUP}/{V1ALPHA1}"


@dataclass(frozen=True)
class Resource:
    """One REST resource: group/version, plural name, kind and scope."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The request path of the collection, or of one object when ``name`` is given.

        Args:
            namespace: Namespace (required for namespaced resources unless listing across
                all namespaces).
            name: Object name.

        Returns:
            A path such as ``/apis/agents.x-k8s.io/v1beta1/namespaces/ns/sandboxes/s``.
        """
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            prefix += f"/namespaces/{namespace}"
        path = f"{prefix}/{self.plural}"
        return f"{path}/{name}" if name else path


_KNOWN = [
    Resource("v1", "Pod", "pods"),
    Resource("v1", "Service", "services"),
    Resource("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    Resource("v1", "ServiceAccount", "serviceaccounts"),
    Resource("v1", "ConfigMap", "configmaps"),
    Resource("v1", "Secret", "secrets"),
    Resource("v1", "Event", "events"),
    Resource("v1", "Namespace", "namespaces", namespaced=False),
    Resource("v1", "Node", "nodes", namespaced=False),
    Resource("events.k8s.io/v1", "Event", "events"),
    Resource("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
    Resource("autoscaling/v1", "Scale", "scale"),
    Resource(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
    ),
    *(
        Resource(version, kind, plural)
        for version in (SANDBOX_V1BETA1, SANDBOX_V1ALPHA1)
        for kind, plural in [("Sandbox", "sandboxes")]
    ),
    *(
        Resource(version, kind, plural)
        for version in (EXTENSIONS_V1BETA1, EXTENSIONS_V1ALPHA1)
        for kind, plural in [
            ("SandboxTemplate", "sandboxtemplates"),
            ("SandboxWarmPool", "sandboxwarmpools"),
            ("SandboxClaim", "sandboxclaims"),
        ]
    ),
]
KNOWN_RESOURCES: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in _KNOWN}
