"""Sandbox, agents.x-k8s.io/v1beta1 (storage version; docs/concepts/sandbox.md)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeModel, KubeObject, KubeTime
from kube_agent_sandbox.api.conditions import Condition
from kube_agent_sandbox.api.markers import CELRule, PrinterColumn, Subresources
from kube_agent_sandbox.api.resources import SANDBOX
from kube_agent_sandbox.api.v1beta1.common import SandboxBlueprint

VOLUME_CLAIM_TEMPLATES_IMMUTABLE = CELRule(
    rule=(
        "has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && "
        "(!has(self.volumeClaimTemplates) || "
        "self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)"
    ),
    message="volumeClaimTemplates is immutable",
)
"""Once created, a Sandbox's volumeClaimTemplates may not be added, removed or changed."""

READY_COLUMN = PrinterColumn(
    name="Ready", type="string", json_path=".status.conditions[?(@.type=='Ready')].status"
)
REASON_COLUMN = PrinterColumn(
    name="Reason", type="string", json_path=".status.conditions[?(@.type=='Ready')].reason"
)
AGE_COLUMN = PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp")


class ShutdownPolicy(StrEnum):
    """What happens to a Sandbox when its shutdownTime passes."""

    DELETE = "Delete"
    RETAIN = "Retain"


class OperatingMode(StrEnum):
    """Whether the Sandbox's Pod should exist."""

    RUNNING = "Running"
    SUSPENDED = "Suspended"


class Lifecycle(KubeModel):
    """Expiry of a Sandbox (inlined into its spec).

    Attributes:
        shutdown_time: absolute expiry time.
        shutdown_policy: ``Retain`` (default) keeps the Sandbox object, ``Delete`` deletes it.
    """

    shutdown_time: KubeTime | None = None
    shutdown_policy: ShutdownPolicy = ShutdownPolicy.RETAIN


class SandboxSpec(SandboxBlueprint, Lifecycle, validations=(VOLUME_CLAIM_TEMPLATES_IMMUTABLE,)):
    """Desired state of a Sandbox.

    Attributes:
        operating_mode: ``Running`` (default) keeps a Pod; ``Suspended`` deletes it and keeps
            its PVCs.
    """

    operating_mode: OperatingMode = OperatingMode.RUNNING


class SandboxStatus(KubeModel):
    """Observed state of a Sandbox.

    Attributes:
        service_fqdn: DNS name of the headless Service.
        service: name of the Service.
        conditions: ``Suspended``, ``Ready``, ``Finished``.
        selector: label selector of the Pod (for the scale subresource of old versions).
        pod_ips: the Pod's IPs.
        node_name: the node running the Pod.
    """

    service_fqdn: str | None = Field(default=None, alias="serviceFQDN")
    service: str | None = None
    conditions: list[Condition] | None = None
    selector: str | None = None
    pod_ips: list[str] | None = Field(default=None, alias="podIPs")
    node_name: str | None = None


class Sandbox(
    KubeObject,
    resource=SANDBOX,
    version=constants.V1BETA1,
    storage=True,
    subresources=Subresources(status=True),
    printer_columns=(READY_COLUMN, REASON_COLUMN, AGE_COLUMN),
):
    """An isolated, stateful, singleton workload: one Pod, optional PVCs and Service."""

    spec: SandboxSpec
    status: SandboxStatus | None = None
