"""Typed models of the Agent Sandbox API (agents.x-k8s.io and extensions.agents.x-k8s.io).

The pydantic models here are the source of truth: CRDs are generated from them, and the
controller, extensions and SDK all speak them. The storage version (v1beta1) is re-exported at
the top level; the deprecated v1alpha1 models live in :mod:`kube_agent_sandbox.api.v1alpha1`.

Models read and write camelCase (``spec.operatingMode``), accept snake_case in Python, and dump
with :meth:`~kube_agent_sandbox.api.base.KubeModel.to_dict`. Embedded Kubernetes types (PodSpec,
PVC spec, NetworkPolicy rules, ObjectMeta) are plain dicts checked against Kubernetes' own schema
(see :mod:`kube_agent_sandbox.api.embedded`).

Importing this package is cheap: the names below are loaded on first use (PEP 562), so a
process that only needs :mod:`kube_agent_sandbox.api.constants` (the controller) does not pay
for pydantic and the models (about 13 MiB of resident memory).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_LAZY: dict[str, str] = {
    "KubeModel": "kube_agent_sandbox.api.base",
    "KubeObject": "kube_agent_sandbox.api.base",
    "KubeTime": "kube_agent_sandbox.api.base",
    "format_time": "kube_agent_sandbox.api.base",
    "Condition": "kube_agent_sandbox.api.conditions",
    "ConditionStatus": "kube_agent_sandbox.api.conditions",
    "field_path": "kube_agent_sandbox.api.errors",
    "validation_messages": "kube_agent_sandbox.api.errors",
    "CELRule": "kube_agent_sandbox.api.markers",
    "Format": "kube_agent_sandbox.api.markers",
    "Int32": "kube_agent_sandbox.api.markers",
    "Int64": "kube_agent_sandbox.api.markers",
    "ListType": "kube_agent_sandbox.api.markers",
    "PrinterColumn": "kube_agent_sandbox.api.markers",
    "ScaleSubresource": "kube_agent_sandbox.api.markers",
    "Subresources": "kube_agent_sandbox.api.markers",
    "name_hash": "kube_agent_sandbox.api.namehash",
    "KINDS": "kube_agent_sandbox.api.registry",
    "KindInfo": "kube_agent_sandbox.api.registry",
    "kind_info": "kube_agent_sandbox.api.registry",
    "model_for": "kube_agent_sandbox.api.registry",
    "parse_object": "kube_agent_sandbox.api.registry",
    "SANDBOX": "kube_agent_sandbox.api.resources",
    "SANDBOX_CLAIM": "kube_agent_sandbox.api.resources",
    "SANDBOX_TEMPLATE": "kube_agent_sandbox.api.resources",
    "SANDBOX_WARM_POOL": "kube_agent_sandbox.api.resources",
    "ResourceNames": "kube_agent_sandbox.api.resources",
    "ClaimLifecycle": "kube_agent_sandbox.api.v1beta1",
    "ClaimSandboxStatus": "kube_agent_sandbox.api.v1beta1",
    "ClaimShutdownPolicy": "kube_agent_sandbox.api.v1beta1",
    "EmbeddedObjectMetadata": "kube_agent_sandbox.api.v1beta1",
    "EnvVar": "kube_agent_sandbox.api.v1beta1",
    "EnvVarsInjectionPolicy": "kube_agent_sandbox.api.v1beta1",
    "Lifecycle": "kube_agent_sandbox.api.v1beta1",
    "NetworkPolicyManagement": "kube_agent_sandbox.api.v1beta1",
    "NetworkPolicySpec": "kube_agent_sandbox.api.v1beta1",
    "OperatingMode": "kube_agent_sandbox.api.v1beta1",
    "PersistentVolumeClaimTemplate": "kube_agent_sandbox.api.v1beta1",
    "PodMetadata": "kube_agent_sandbox.api.v1beta1",
    "PodTemplate": "kube_agent_sandbox.api.v1beta1",
    "Sandbox": "kube_agent_sandbox.api.v1beta1",
    "SandboxBlueprint": "kube_agent_sandbox.api.v1beta1",
    "SandboxClaim": "kube_agent_sandbox.api.v1beta1",
    "SandboxClaimSpec": "kube_agent_sandbox.api.v1beta1",
    "SandboxClaimStatus": "kube_agent_sandbox.api.v1beta1",
    "SandboxSpec": "kube_agent_sandbox.api.v1beta1",
    "SandboxStatus": "kube_agent_sandbox.api.v1beta1",
    "SandboxTemplate": "kube_agent_sandbox.api.v1beta1",
    "SandboxTemplateRef": "kube_agent_sandbox.api.v1beta1",
    "SandboxTemplateSpec": "kube_agent_sandbox.api.v1beta1",
    "SandboxWarmPool": "kube_agent_sandbox.api.v1beta1",
    "SandboxWarmPoolSpec": "kube_agent_sandbox.api.v1beta1",
    "SandboxWarmPoolStatus": "kube_agent_sandbox.api.v1beta1",
    "ShutdownPolicy": "kube_agent_sandbox.api.v1beta1",
    "UpdateStrategy": "kube_agent_sandbox.api.v1beta1",
    "UpdateStrategyType": "kube_agent_sandbox.api.v1beta1",
    "VolumeClaimTemplatesPolicy": "kube_agent_sandbox.api.v1beta1",
    "WarmPoolRef": "kube_agent_sandbox.api.v1beta1",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
