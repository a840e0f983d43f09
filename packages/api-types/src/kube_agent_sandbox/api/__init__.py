"""Typed models of the Agent Sandbox API (agents.x-k8s.io and extensions.agents.x-k8s.io).

The pydantic models here are the source of truth: CRDs are generated from them, and the
controller, extensions and SDK all speak them. The storage version (v1beta1) is re-exported at
the top level; the deprecated v1alpha1 models live in :mod:`kube_agent_sandbox.api.v1alpha1`.

Models read and write camelCase (``spec.operatingMode``), accept snake_case in Python, and dump
with :meth:`~kube_agent_sandbox.api.base.KubeModel.to_dict`. Embedded Kubernetes types (PodSpec,
PVC spec, NetworkPolicy rules, ObjectMeta) are plain dicts checked against Kubernetes' own schema
(see :mod:`kube_agent_sandbox.api.embedded`).
"""

from kube_agent_sandbox.api.base import KubeModel, KubeObject, KubeTime, format_time
from kube_agent_sandbox.api.conditions import Condition, ConditionStatus
from kube_agent_sandbox.api.errors import field_path, validation_messages
from kube_agent_sandbox.api.markers import (
    CELRule,
    Format,
    Int32,
    Int64,
    ListType,
    PrinterColumn,
    ScaleSubresource,
    Subresources,
)
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.registry import KINDS, KindInfo, kind_info, model_for, parse_object
from kube_agent_sandbox.api.resources import (
    SANDBOX,
    SANDBOX_CLAIM,
    SANDBOX_TEMPLATE,
    SANDBOX_WARM_POOL,
    ResourceNames,
)
from kube_agent_sandbox.api.v1beta1 import (
    ClaimLifecycle,
    ClaimSandboxStatus,
    ClaimShutdownPolicy,
    EmbeddedObjectMetadata,
    EnvVar,
    EnvVarsInjectionPolicy,
    Lifecycle,
    NetworkPolicyManagement,
    NetworkPolicySpec,
    OperatingMode,
    PersistentVolumeClaimTemplate,
    PodMetadata,
    PodTemplate,
    Sandbox,
    SandboxBlueprint,
    SandboxClaim,
    SandboxClaimSpec,
    SandboxClaimStatus,
    SandboxSpec,
    SandboxStatus,
    SandboxTemplate,
    SandboxTemplateRef,
    SandboxTemplateSpec,
    SandboxWarmPool,
    SandboxWarmPoolSpec,
    SandboxWarmPoolStatus,
    ShutdownPolicy,
    UpdateStrategy,
    UpdateStrategyType,
    VolumeClaimTemplatesPolicy,
    WarmPoolRef,
)

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "SANDBOX",
    "SANDBOX_CLAIM",
    "SANDBOX_TEMPLATE",
    "SANDBOX_WARM_POOL",
    "CELRule",
    "ClaimLifecycle",
    "ClaimSandboxStatus",
    "ClaimShutdownPolicy",
    "Condition",
    "ConditionStatus",
    "EmbeddedObjectMetadata",
    "EnvVar",
    "EnvVarsInjectionPolicy",
    "Format",
    "Int32",
    "Int64",
    "KindInfo",
    "KubeModel",
    "KubeObject",
    "KubeTime",
    "Lifecycle",
    "ListType",
    "NetworkPolicyManagement",
    "NetworkPolicySpec",
    "OperatingMode",
    "PersistentVolumeClaimTemplate",
    "PodMetadata",
    "PodTemplate",
    "PrinterColumn",
    "ResourceNames",
    "Sandbox",
    "SandboxBlueprint",
    "SandboxClaim",
    "SandboxClaimSpec",
    "SandboxClaimStatus",
    "SandboxSpec",
    "SandboxStatus",
    "SandboxTemplate",
    "SandboxTemplateRef",
    "SandboxTemplateSpec",
    "SandboxWarmPool",
    "SandboxWarmPoolSpec",
    "SandboxWarmPoolStatus",
    "ScaleSubresource",
    "ShutdownPolicy",
    "Subresources",
    "UpdateStrategy",
    "UpdateStrategyType",
    "VolumeClaimTemplatesPolicy",
    "WarmPoolRef",
    "__version__",
    "field_path",
    "format_time",
    "kind_info",
    "model_for",
    "name_hash",
    "parse_object",
    "validation_messages",
]
