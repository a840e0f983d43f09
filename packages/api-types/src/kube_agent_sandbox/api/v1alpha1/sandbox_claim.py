"""SandboxClaim, extensions.agents.x-k8s.io/v1alpha1 (served, deprecated; docs/reference/api.md).

Selects a template directly (``sandboxTemplateRef``) plus a ``warmpool`` policy string instead
of v1beta1's ``warmPoolRef``, and has no ``volumeClaimTemplates``.
"""

from __future__ import annotations

from typing import Annotated, Final

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeModel, KubeObject
from kube_agent_sandbox.api.markers import ATOMIC_LIST, Subresources
from kube_agent_sandbox.api.resources import SANDBOX_CLAIM
from kube_agent_sandbox.api.v1beta1.common import PodMetadata
from kube_agent_sandbox.api.v1beta1.sandbox_claim import (
    ClaimLifecycle,
    EnvVar,
    SandboxClaimStatus,
)
from kube_agent_sandbox.api.v1beta1.sandbox_warm_pool import SandboxTemplateRef

WARM_POOL_POLICY_NONE: Final = "none"
"""``warmpool`` value: always cold start."""
WARM_POOL_POLICY_DEFAULT: Final = "default"
"""``warmpool`` value: any pool of the template (the default)."""


class SandboxClaimSpec(KubeModel):
    """Desired state of a v1alpha1 claim.

    Attributes:
        sandbox_template_ref: the template.
        warmpool: ``default`` (any pool), ``none`` (cold start) or a pool name.
        lifecycle: expiry.
        additional_pod_metadata: labels/annotations added to the Pod.
        env: environment variables.
    """

    sandbox_template_ref: SandboxTemplateRef
    warmpool: str = WARM_POOL_POLICY_DEFAULT
    lifecycle: ClaimLifecycle | None = None
    additional_pod_metadata: PodMetadata | None = None
    env: Annotated[list[EnvVar], ATOMIC_LIST] | None = None


class SandboxClaim(
    KubeObject,
    resource=SANDBOX_CLAIM,
    version=constants.V1ALPHA1,
    deprecated=True,
    subresources=Subresources(status=True),
):
    """A SandboxClaim as the deprecated v1alpha1 API shows it."""

    spec: SandboxClaimSpec
    status: SandboxClaimStatus | None = None
