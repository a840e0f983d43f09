"""The v1beta1 API (storage version, conversion hub) of every kind."""

from kube_agent_sandbox.api.v1beta1.common import (
    EmbeddedObjectMetadata,
    PersistentVolumeClaimTemplate,
    PodMetadata,
    PodTemplate,
    SandboxBlueprint,
)
from kube_agent_sandbox.api.v1beta1.sandbox import (
    Lifecycle,
    OperatingMode,
    Sandbox,
    SandboxSpec,
    SandboxStatus,
    ShutdownPolicy,
)
from kube_agent_sandbox.api.v1beta1.sandbox_claim import (
    ClaimLifecycle,
    ClaimSandboxStatus,
    ClaimShutdownPolicy,
    EnvVar,
    SandboxClaim,
    SandboxClaimSpec,
    SandboxClaimStatus,
    WarmPoolRef,
)
from kube_agent_sandbox.api.v1beta1.sandbox_snapshot import (
    SandboxSnapshot,
    SandboxSnapshotSpec,
    SandboxSnapshotStatus,
    SnapshotMode,
    SnapshotPhase,
)
from kube_agent_sandbox.api.v1beta1.sandbox_template import (
    EnvVarsInjectionPolicy,
    NetworkPolicyManagement,
    NetworkPolicySpec,
    SandboxTemplate,
    SandboxTemplateSpec,
    VolumeClaimTemplatesPolicy,
)
from kube_agent_sandbox.api.v1beta1.sandbox_warm_pool import (
    SandboxTemplateRef,
    SandboxWarmPool,
    SandboxWarmPoolSpec,
    SandboxWarmPoolStatus,
    UpdateStrategy,
    UpdateStrategyType,
)

__all__ = [
    "ClaimLifecycle",
    "ClaimSandboxStatus",
    "ClaimShutdownPolicy",
    "EmbeddedObjectMetadata",
    "EnvVar",
    "EnvVarsInjectionPolicy",
    "Lifecycle",
    "NetworkPolicyManagement",
    "NetworkPolicySpec",
    "OperatingMode",
    "PersistentVolumeClaimTemplate",
    "PodMetadata",
    "PodTemplate",
    "Sandbox",
    "SandboxBlueprint",
    "SandboxClaim",
    "SandboxClaimSpec",
    "SandboxClaimStatus",
    "SandboxSnapshot",
    "SandboxSnapshotSpec",
    "SandboxSnapshotStatus",
    "SandboxSpec",
    "SandboxStatus",
    "SandboxTemplate",
    "SandboxTemplateRef",
    "SandboxTemplateSpec",
    "SandboxWarmPool",
    "SandboxWarmPoolSpec",
    "SandboxWarmPoolStatus",
    "ShutdownPolicy",
    "SnapshotMode",
    "SnapshotPhase",
    "UpdateStrategy",
    "UpdateStrategyType",
    "VolumeClaimTemplatesPolicy",
    "WarmPoolRef",
]
