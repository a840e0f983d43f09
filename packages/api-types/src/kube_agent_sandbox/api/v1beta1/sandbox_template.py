"""SandboxTemplate, extensions.agents.x-k8s.io/v1beta1 (storage version).

See docs/concepts/templates.md.
"""

from __future__ import annotations

from enum import StrEnum

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeModel, KubeObject
from kube_agent_sandbox.api.embedded.types import NetworkPolicyEgressRule, NetworkPolicyIngressRule
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATE
from kube_agent_sandbox.api.v1beta1.common import SandboxBlueprint


class NetworkPolicyManagement(StrEnum):
    """Whether the controller manages the template's shared NetworkPolicy."""

    MANAGED = "Managed"
    UNMANAGED = "Unmanaged"


class EnvVarsInjectionPolicy(StrEnum):
    """Whether claims may inject environment variables into the template's containers."""

    ALLOWED = "Allowed"
    OVERRIDES = "Overrides"
    DISALLOWED = "Disallowed"


class VolumeClaimTemplatesPolicy(StrEnum):
    """Whether claims may add (``Allowed``) or also replace (``Overrides``) PVC templates."""

    DISALLOWED = "Disallowed"
    ALLOWED = "Allowed"
    OVERRIDES = "Overrides"


class NetworkPolicySpec(KubeModel):
    """The rules of the NetworkPolicy applied to a template's sandboxes.

    A restricted NetworkPolicySpec: the controller fills in the pod selector and policy types.
    """

    ingress: list[NetworkPolicyIngressRule] | None = None
    egress: list[NetworkPolicyEgressRule] | None = None


class SandboxTemplateSpec(SandboxBlueprint):
    """A reusable Sandbox blueprint plus the policies claims of it are subject to.

    Attributes:
        network_policy: ingress/egress rules for the template's sandboxes.
        network_policy_management: ``Managed`` (default) or ``Unmanaged``.
        env_vars_injection_policy: what claims may do with ``spec.env`` (default
            ``Disallowed``).
        volume_claim_templates_policy: what claims may do with ``spec.volumeClaimTemplates``
            (default ``Disallowed``).
    """

    network_policy: NetworkPolicySpec | None = None
    network_policy_management: NetworkPolicyManagement = NetworkPolicyManagement.MANAGED
    env_vars_injection_policy: EnvVarsInjectionPolicy = EnvVarsInjectionPolicy.DISALLOWED
    volume_claim_templates_policy: VolumeClaimTemplatesPolicy = (
        VolumeClaimTemplatesPolicy.DISALLOWED
    )


class SandboxTemplate(
    KubeObject, resource=SANDBOX_TEMPLATE, version=constants.V1BETA1, storage=True
):
    """A template that warm pools and claims create Sandboxes from (no status)."""

    spec: SandboxTemplateSpec
