"""SandboxWarmPool, extensions.agents.x-k8s.io/v1alpha1 (served, deprecated; docs/reference/api.md).

Same as v1beta1 except that ``replicas`` is required and has no default, and that the status
has no ``observedGeneration`` (upstream v0.5.6 added it to v1beta1 only; conversion drops it).
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge
from pydantic import Strict

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeModel, KubeObject
from kube_agent_sandbox.api.markers import INT32, Int32
from kube_agent_sandbox.api.resources import SANDBOX_WARM_POOL
from kube_agent_sandbox.api.v1beta1.sandbox_warm_pool import (
    WARM_POOL_PRINTER_COLUMNS,
    WARM_POOL_SUBRESOURCES,
    SandboxTemplateRef,
    UpdateStrategy,
)


class SandboxWarmPoolSpec(KubeModel):
    """Desired state of a v1alpha1 warm pool (``replicas`` required)."""

    replicas: Annotated[int, Strict(), Ge(0), INT32]
    sandbox_template_ref: SandboxTemplateRef
    update_strategy: UpdateStrategy | None = None


class SandboxWarmPoolStatus(KubeModel):
    """Observed state of a v1alpha1 warm pool (absent counts mean 0; no observedGeneration)."""

    replicas: Int32 | None = None
    ready_replicas: Int32 | None = None
    selector: str | None = None


class SandboxWarmPool(
    KubeObject,
    resource=SANDBOX_WARM_POOL,
    version=constants.V1ALPHA1,
    deprecated=True,
    subresources=WARM_POOL_SUBRESOURCES,
    printer_columns=WARM_POOL_PRINTER_COLUMNS,
):
    """A SandboxWarmPool as the deprecated v1alpha1 API shows it."""

    spec: SandboxWarmPoolSpec
    status: SandboxWarmPoolStatus | None = None
