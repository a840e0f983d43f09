"""SandboxSnapshot, extensions.agents.x-k8s.io/v1alpha1 (served, deprecated like the other
v1alpha1 kinds): the same schema as v1beta1, so conversion only changes ``apiVersion``."""

from __future__ import annotations

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeObject
from kube_agent_sandbox.api.markers import Subresources
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOT
from kube_agent_sandbox.api.v1beta1.sandbox_snapshot import (
    SNAPSHOT_PRINTER_COLUMNS,
    SandboxSnapshotSpec,
    SandboxSnapshotStatus,
)


class SandboxSnapshot(
    KubeObject,
    resource=SANDBOX_SNAPSHOT,
    version=constants.V1ALPHA1,
    deprecated=True,
    subresources=Subresources(status=True),
    printer_columns=SNAPSHOT_PRINTER_COLUMNS,
):
    """A SandboxSnapshot as the deprecated v1alpha1 API shows it."""

    spec: SandboxSnapshotSpec
    status: SandboxSnapshotStatus | None = None
