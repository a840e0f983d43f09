"""SandboxWarmPool, extensions.agents.x-k8s.io/v1beta1 (storage version).

See docs/concepts/warm-pools.md.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from annotated_types import Ge
from pydantic import Strict

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeModel, KubeObject
from kube_agent_sandbox.api.markers import (
    INT32,
    INT64,
    Int32,
    PrinterColumn,
    ScaleSubresource,
    Subresources,
)
from kube_agent_sandbox.api.resources import SANDBOX_WARM_POOL
from kube_agent_sandbox.api.v1beta1.sandbox import AGE_COLUMN

WARM_POOL_PRINTER_COLUMNS = (
    PrinterColumn(name="Ready", type="integer", json_path=".status.readyReplicas"),
    PrinterColumn(name="Desired", type="integer", json_path=".spec.replicas"),
    AGE_COLUMN,
)
"""Columns ``kubectl get swp`` shows (both versions)."""

WARM_POOL_SUBRESOURCES = Subresources(
    status=True,
    scale=ScaleSubresource(
        spec_replicas_path=".spec.replicas",
        status_replicas_path=".status.replicas",
        label_selector_path=".status.selector",
    ),
)
"""status + scale (HPA/KEDA drive ``spec.replicas``), both versions."""


class UpdateStrategyType(StrEnum):
    """How a pool replaces sandboxes made from an outdated template."""

    RECREATE = "Recreate"
    ON_REPLENISH = "OnReplenish"


class UpdateStrategy(KubeModel):
    """Update strategy of a pool."""

    type: UpdateStrategyType = UpdateStrategyType.ON_REPLENISH


class SandboxTemplateRef(KubeModel):
    """Reference to a SandboxTemplate in the same namespace."""

    name: str


class SandboxWarmPoolSpec(KubeModel):
    """Desired state of a warm pool.

    Attributes:
        replicas: how many ready sandboxes to keep (default 1).
        sandbox_template_ref: the template to create them from.
        update_strategy: how to handle template changes.
    """

    replicas: Annotated[int, Strict(), Ge(0), INT32] = 1
    sandbox_template_ref: SandboxTemplateRef
    update_strategy: UpdateStrategy | None = None


class SandboxWarmPoolStatus(KubeModel):
    """Observed state of a warm pool (absent counts mean 0).

    Attributes:
        replicas: active member sandboxes.
        ready_replicas: members whose Ready condition is True.
        selector: label selector of the members (scale subresource).
        observed_generation: the ``metadata.generation`` the controller last reconciled
            (upstream v0.5.6, #1328). It does not track template rollouts: a template change
            leaves the pool's generation alone.
    """

    replicas: Int32 | None = None
    ready_replicas: Int32 | None = None
    selector: str | None = None
    observed_generation: Annotated[int, Strict(), Ge(0), INT64] | None = None


class SandboxWarmPool(
    KubeObject,
    resource=SANDBOX_WARM_POOL,
    version=constants.V1BETA1,
    storage=True,
    subresources=WARM_POOL_SUBRESOURCES,
    printer_columns=WARM_POOL_PRINTER_COLUMNS,
):
    """A pool of pre-started Sandboxes that claims adopt."""

    spec: SandboxWarmPoolSpec
    status: SandboxWarmPoolStatus | None = None
