"""SandboxTemplate, extensions.agents.x-k8s.io/v1alpha1 (served, deprecated; docs/reference/api.md).

Same as v1beta1 without ``volumeClaimTemplatesPolicy``.
"""

from __future__ import annotations

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeObject
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATE
from kube_agent_sandbox.api.v1beta1.common import SandboxBlueprint
from kube_agent_sandbox.api.v1beta1.sandbox_template import (
    EnvVarsInjectionPolicy,
    NetworkPolicyManagement,
    NetworkPolicySpec,
)


class SandboxTemplateSpec(SandboxBlueprint):
    """A reusable Sandbox blueprint (v1alpha1)."""

    network_policy: NetworkPolicySpec | None = None
    network_policy_management: NetworkPolicyManagement = NetworkPolicyManagement.MANAGED
    env_vars_injection_policy: EnvVarsInjectionPolicy = EnvVarsInjectionPolicy.DISALLOWED


class SandboxTemplate(
    KubeObject, resource=SANDBOX_TEMPLATE, version=constants.V1ALPHA1, deprecated=True
):
    """A SandboxTemplate as the deprecated v1alpha1 API shows it."""

    spec: SandboxTemplateSpec
