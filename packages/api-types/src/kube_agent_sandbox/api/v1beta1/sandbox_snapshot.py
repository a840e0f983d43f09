"""SandboxSnapshot, extensions.agents.x-k8s.io/v1beta1 (storage version; v1alpha1 is identical).

A snapshot of a running Sandbox's container: its writable layer committed as an OCI image on
top of the image it runs, pushed to the registry the operator configured. It is an object of
its own (no owner reference to the Sandbox), so it outlives the Sandbox it came from; deleting it
deletes its image from the registry. See docs/guides/snapshots.md.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from annotated_types import Ge
from pydantic import Field, Strict, StringConstraints

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeModel, KubeObject, KubeTime
from kube_agent_sandbox.api.conditions import Condition
from kube_agent_sandbox.api.markers import INT64, CELRule, PrinterColumn, Subresources
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOT
from kube_agent_sandbox.api.v1beta1.sandbox import AGE_COLUMN

SNAPSHOT_PRINTER_COLUMNS = (
    PrinterColumn(name="Phase", type="string", json_path=".status.phase"),
    PrinterColumn(name="Mode", type="string", json_path=".spec.mode"),
    PrinterColumn(name="Source", type="string", json_path=".spec.sandboxName"),
    PrinterColumn(name="Digest", type="string", json_path=".status.digest"),
    PrinterColumn(name="Size", type="integer", json_path=".status.size"),
    AGE_COLUMN,
)
"""Columns ``kubectl get sandboxsnapshots`` shows (both versions)."""

SNAPSHOT_SPEC_IMMUTABLE = CELRule(rule="self == oldSelf", message="spec is immutable")
"""A snapshot is taken once: what it was asked for cannot change afterwards."""

_REPOSITORY = r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
_TAG = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$"


class SnapshotMode(StrEnum):
    """What a snapshot keeps."""

    FILESYSTEM = "Filesystem"
    """The container's writable layer (files), as an image layer."""
    MEMORY = "Memory"
    """Files and process memory: the kubelet's checkpoint API (CRIU) on the node; where the
    node cannot, the snapshot fails with a condition that names what is missing."""


class SnapshotPhase(StrEnum):
    """Where a snapshot is in its life."""

    PENDING = "Pending"
    COMMITTING = "Committing"
    READY = "Ready"
    FAILED = "Failed"


class SandboxSnapshotSpec(KubeModel, validations=(SNAPSHOT_SPEC_IMMUTABLE,)):
    """What to snapshot (immutable once created).

    Attributes:
        sandbox_name: The Sandbox (same namespace) whose running container is committed.
        mode: ``Filesystem`` (the default) or ``Memory`` (needs CRIU on the node).
        repository: Repository in the controller's configured registry (default
            ``<prefix>/<namespace>/<sandbox>``).
        tag: Tag of the pushed image (default: the snapshot's name).
    """

    sandbox_name: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    mode: SnapshotMode = SnapshotMode.FILESYSTEM
    repository: (
        Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=_REPOSITORY)] | None
    ) = None
    tag: Annotated[str, StringConstraints(pattern=_TAG)] | None = None


class SandboxSnapshotStatus(KubeModel):
    """What the snapshot became.

    Attributes:
        phase: ``Pending``, ``Committing``, ``Ready`` or ``Failed``.
        conditions: ``Ready`` (True once the image is pushed; its reason says why not) and
            ``ImageDeleted`` (while the finalizer deletes the image).
        image: The pinned reference ``registry/repository@sha256:...`` a Pod's ``image`` can name.
        digest: The image manifest's digest.
        size: Bytes the snapshot added: the committed layer, compressed.
        source_sandbox: The Sandbox it was taken from (kept after that Sandbox is gone).
        source_image: The image the Sandbox's container ran.
        source_pod: The Pod whose container was committed.
        container_id: The containerd ID of that container (what the node agent commits).
        container: That container's name in the Pod (what the kubelet checkpoints).
        node: The node that hosted the container and committed it.
        target: Where the image is pushed, ``registry/repository:tag``.
        start_time: When the commit started.
        completion_time: When it became Ready or Failed.
    """

    phase: SnapshotPhase | None = None
    conditions: list[Condition] | None = None
    image: str | None = None
    digest: str | None = None
    size: Annotated[int, Strict(), Ge(0), INT64] | None = None
    source_sandbox: str | None = None
    source_image: str | None = None
    source_pod: str | None = None
    container_id: str | None = Field(default=None, alias="containerID")
    container: str | None = None
    node: str | None = None
    target: str | None = None
    start_time: KubeTime | None = None
    completion_time: KubeTime | None = None


class SandboxSnapshot(
    KubeObject,
    resource=SANDBOX_SNAPSHOT,
    version=constants.V1BETA1,
    storage=True,
    subresources=Subresources(status=True),
    printer_columns=SNAPSHOT_PRINTER_COLUMNS,
):
    """A filesystem snapshot of a running Sandbox, kept as an image in a registry."""

    spec: SandboxSnapshotSpec
    status: SandboxSnapshotStatus | None = None
