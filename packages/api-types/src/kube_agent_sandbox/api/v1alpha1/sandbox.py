"""Sandbox, agents.x-k8s.io/v1alpha1 (served, deprecated; docs/reference/api.md).

Differs from v1beta1: ``replicas`` (0 or 1) instead of ``operatingMode``, no immutability rule on
volumeClaimTemplates, ``status.replicas`` instead of ``status.nodeName``, a scale subresource and
no printer columns.
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge, Le
from pydantic import Field, Strict

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeModel, KubeObject
from kube_agent_sandbox.api.conditions import Condition
from kube_agent_sandbox.api.markers import INT32, ScaleSubresource, Subresources
from kube_agent_sandbox.api.resources import SANDBOX
from kube_agent_sandbox.api.v1beta1.common import SandboxBlueprint
from kube_agent_sandbox.api.v1beta1.sandbox import Lifecycle

SANDBOX_V1ALPHA1_SUBRESOURCES = Subresources(
    status=True,
    scale=ScaleSubresource(
        spec_replicas_path=".spec.replicas",
        status_replicas_path=".status.replicas",
        label_selector_path=".status.selector",
    ),
)


class SandboxSpec(SandboxBlueprint, Lifecycle):
    """Desired state of a v1alpha1 Sandbox.

    Attributes:
        replicas: 1 (default) runs the Pod, 0 suspends it.
    """

    replicas: Annotated[int, Strict(), Ge(0), Le(1), INT32] = 1


class SandboxStatus(KubeModel):
    """Observed state of a v1alpha1 Sandbox."""

    service_fqdn: str | None = Field(default=None, alias="serviceFQDN")
    service: str | None = None
    conditions: list[Condition] | None = None
    replicas: Annotated[int, Strict(), Ge(0), INT32] | None = None
    selector: str | None = None
    pod_ips: list[str] | None = Field(default=None, alias="podIPs")


class Sandbox(
    KubeObject,
    resource=SANDBOX,
    version=constants.V1ALPHA1,
    deprecated=True,
    subresources=SANDBOX_V1ALPHA1_SUBRESOURCES,
):
    """A Sandbox as the deprecated v1alpha1 API shows it."""

    spec: SandboxSpec
    status: SandboxStatus | None = None
