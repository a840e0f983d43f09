"""The v1alpha1 API (served, deprecated) of every kind.

Only the classes that differ from v1beta1 live here; shared parts (pod template, PVC template,
policies, lifecycle, most statuses) are the v1beta1 classes, as their schemas are identical.
"""

from kube_agent_sandbox.api.v1alpha1.sandbox import Sandbox, SandboxSpec, SandboxStatus
from kube_agent_sandbox.api.v1alpha1.sandbox_claim import (
    WARM_POOL_POLICY_DEFAULT,
    WARM_POOL_POLICY_NONE,
    SandboxClaim,
    SandboxClaimSpec,
)
from kube_agent_sandbox.api.v1alpha1.sandbox_snapshot import SandboxSnapshot
from kube_agent_sandbox.api.v1alpha1.sandbox_template import SandboxTemplate, SandboxTemplateSpec
from kube_agent_sandbox.api.v1alpha1.sandbox_warm_pool import (
    SandboxWarmPool,
    SandboxWarmPoolSpec,
    SandboxWarmPoolStatus,
)

__all__ = [
    "WARM_POOL_POLICY_DEFAULT",
    "WARM_POOL_POLICY_NONE",
    "Sandbox",
    "SandboxClaim",
    "SandboxClaimSpec",
    "SandboxSnapshot",
    "SandboxSpec",
    "SandboxStatus",
    "SandboxTemplate",
    "SandboxTemplateSpec",
    "SandboxWarmPool",
    "SandboxWarmPoolSpec",
    "SandboxWarmPoolStatus",
]
