"""SandboxClaim, extensions.agents.x-k8s.io/v1beta1 (storage version; docs/concepts/claims.md)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from annotated_types import Ge
from pydantic import Field, Strict

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeModel, KubeObject, KubeTime
from kube_agent_sandbox.api.conditions import Condition
from kube_agent_sandbox.api.markers import ATOMIC_LIST, INT32, PrinterColumn, Subresources
from kube_agent_sandbox.api.resources import SANDBOX_CLAIM
from kube_agent_sandbox.api.v1beta1.common import PodMetadata, VolumeClaimTemplates
from kube_agent_sandbox.api.v1beta1.sandbox import AGE_COLUMN, READY_COLUMN, REASON_COLUMN

CLAIM_PRINTER_COLUMNS = (
    READY_COLUMN,
    PrinterColumn(name="Sandbox", type="string", json_path=".status.sandbox.name"),
    REASON_COLUMN,
    AGE_COLUMN,
)
"""Columns ``kubectl get sandboxclaim`` shows."""


class ClaimShutdownPolicy(StrEnum):
    """What happens when a claim expires."""

    DELETE = "Delete"
    DELETE_FOREGROUND = "DeleteForeground"
    RETAIN = "Retain"


class ClaimLifecycle(KubeModel):
    """Expiry of a claim.

    Attributes:
        shutdown_time: absolute expiry (not copied to the Sandbox).
        ttl_seconds_after_finished: delete this long after the Sandbox finished.
        shutdown_policy: ``Retain`` (default), ``Delete`` or ``DeleteForeground``.
    """

    shutdown_time: KubeTime | None = None
    ttl_seconds_after_finished: Annotated[int, Strict(), Ge(0), INT32] | None = None
    shutdown_policy: ClaimShutdownPolicy = ClaimShutdownPolicy.RETAIN


class EnvVar(KubeModel):
    """An environment variable a claim injects (subject to the template's policy).

    Attributes:
        name: variable name.
        value: variable value.
        container_name: only this container (default: all).
    """

    name: str
    value: str
    container_name: str | None = None


class WarmPoolRef(KubeModel):
    """Reference to a SandboxWarmPool in the same namespace."""

    name: str


class ClaimSandboxStatus(KubeModel):
    """The Sandbox a claim got."""

    name: str | None = None
    pod_ips: list[str] | None = Field(default=None, alias="podIPs")


class SandboxClaimSpec(KubeModel):
    """Desired state of a claim.

    Attributes:
        warm_pool_ref: the pool (and through it the template) to take a Sandbox from.
        lifecycle: expiry.
        additional_pod_metadata: labels/annotations added to the Pod.
        env: environment variables (forces a cold start).
        volume_claim_templates: PVC templates (forces a cold start).
    """

    warm_pool_ref: WarmPoolRef
    lifecycle: ClaimLifecycle | None = None
    additional_pod_metadata: PodMetadata | None = None
    env: Annotated[list[EnvVar], ATOMIC_LIST] | None = None
    volume_claim_templates: VolumeClaimTemplates | None = None


class SandboxClaimStatus(KubeModel):
    """Observed state of a claim."""

    conditions: list[Condition] | None = None
    sandbox: ClaimSandboxStatus | None = None


class SandboxClaim(
    KubeObject,
    resource=SANDBOX_CLAIM,
    version=constants.V1BETA1,
    storage=True,
    subresources=Subresources(status=True),
    printer_columns=CLAIM_PRINTER_COLUMNS,
):
    """A request for a Sandbox from a warm pool."""

    spec: SandboxClaimSpec
    status: SandboxClaimStatus | None = None
