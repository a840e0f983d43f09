"""Building blocks shared by the v1beta1 kinds (docs/reference/api.md).

``SandboxBlueprint`` is what a Sandbox and a SandboxTemplate both describe (pod template,
volume claim templates, service); the other classes are its parts.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import StrictBool

from kube_agent_sandbox.api.base import KubeModel
from kube_agent_sandbox.api.embedded.types import PersistentVolumeClaimSpec, PodSpec
from kube_agent_sandbox.api.markers import ATOMIC_LIST


class PodMetadata(KubeModel):
    """Labels and annotations for a Pod (the only metadata a pod template may carry)."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class EmbeddedObjectMetadata(KubeModel):
    """Name, labels and annotations of an object created from a template (e.g. a PVC)."""

    name: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodTemplate(KubeModel):
    """The Pod a Sandbox runs.

    Attributes:
        spec: a full core/v1 PodSpec (a JSON dict, see :mod:`kube_agent_sandbox.api.embedded`).
        metadata: labels and annotations for the Pod.
    """

    spec: PodSpec
    metadata: PodMetadata | None = None


class PersistentVolumeClaimTemplate(KubeModel):
    """A PVC to create for each Sandbox (named ``<metadata.name>-<sandbox name>``)."""

    metadata: EmbeddedObjectMetadata | None = None
    spec: PersistentVolumeClaimSpec


VolumeClaimTemplates = Annotated[list[PersistentVolumeClaimTemplate], ATOMIC_LIST]
"""An atomic list of PVC templates."""


class SandboxBlueprint(KubeModel):
    """What a Sandbox runs; inlined into SandboxSpec and SandboxTemplateSpec.

    Attributes:
        pod_template: the Pod.
        volume_claim_templates: PVCs created per Sandbox.
        service: ``True`` = maintain a headless Service; ``False`` = delete an owned one;
            unset = keep an existing one but never create one.
    """

    pod_template: PodTemplate
    volume_claim_templates: VolumeClaimTemplates | None = None
    service: StrictBool | None = None
