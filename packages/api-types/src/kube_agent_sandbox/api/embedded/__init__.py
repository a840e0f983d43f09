"""Kubernetes' own types embedded in the Agent Sandbox API (PodSpec, PVC spec, NetworkPolicy rules).

They are kept as plain JSON dicts and checked against Kubernetes' published OpenAPI schema for the
type (a snapshot in ``k8s_openapi.json``), the same schema the generated CRDs embed. See
:mod:`kube_agent_sandbox.api.embedded.types` for why.
"""

from kube_agent_sandbox.api.embedded.definitions import (
    NETWORK_POLICY_EGRESS_RULE,
    NETWORK_POLICY_INGRESS_RULE,
    OBJECT_META,
    PERSISTENT_VOLUME_CLAIM_SPEC,
    POD_SPEC,
)
from kube_agent_sandbox.api.embedded.schema import kubernetes_version, structural_schema
from kube_agent_sandbox.api.embedded.types import (
    EmbeddedKubeType,
    NetworkPolicyEgressRule,
    NetworkPolicyIngressRule,
    ObjectMeta,
    PersistentVolumeClaimSpec,
    PodSpec,
)
from kube_agent_sandbox.api.embedded.validation import SchemaViolation, validate_against_schema

__all__ = [
    "NETWORK_POLICY_EGRESS_RULE",
    "NETWORK_POLICY_INGRESS_RULE",
    "OBJECT_META",
    "PERSISTENT_VOLUME_CLAIM_SPEC",
    "POD_SPEC",
    "EmbeddedKubeType",
    "NetworkPolicyEgressRule",
    "NetworkPolicyIngressRule",
    "ObjectMeta",
    "PersistentVolumeClaimSpec",
    "PodSpec",
    "SchemaViolation",
    "kubernetes_version",
    "structural_schema",
    "validate_against_schema",
]
