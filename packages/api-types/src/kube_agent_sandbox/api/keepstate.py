"""Keeping a suspended Sandbox's filesystem: the annotations the core Sandbox controller and the
extensions' state keeper exchange.

Upstream's v1beta1 schemas have no field for it and the core controller must not import the
extensions, so the handshake is three annotations on the Sandbox, written by different parties:

* :data:`ANNOTATION_SNAPSHOT_ON_SUSPEND` (the user, a claim, a template, the gateway): the opt-in,
  ``Filesystem`` or ``Memory`` (which fails with ``MemorySnapshotUnsupported`` where the node
  cannot checkpoint).
* :data:`ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK` (the same parties, with ``Memory``):
  ``Filesystem`` accepts the files alone where the node cannot keep the memory; without it that
  save fails and the Pod is kept, as for any failed save.
* :data:`ANNOTATION_SUSPEND_SNAPSHOT` (the keeper): where saving this suspension stands, as
  :class:`SuspendProgress` (the Sandbox's generation and Pod UID it is about, the
  SandboxSnapshot, the phase, and a failure's reason and message).
* :data:`ANNOTATION_RESUME_FROM` (the keeper, in the same write as the ``Saved`` progress): the
  pinned image the next Pod's container runs, as :class:`ResumeFrom`.

The core controller keeps a suspended Sandbox's Pod while the opt-in is set, unless the progress
says ``Saved`` for this generation and this Pod; it only does so when its own process runs the
keeper (``--extensions`` with ``--snapshot-registry``), so it never waits for nobody.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Final

from kube_agent_sandbox.api import constants

__all__ = [
    "ANNOTATION_RESUME_FROM",
    "ANNOTATION_SNAPSHOT_ON_SUSPEND",
    "ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK",
    "ANNOTATION_SNAPSHOT_PULL_SECRET",
    "ANNOTATION_SUSPEND_SNAPSHOT",
    "MODES",
    "MODE_FILESYSTEM",
    "MODE_MEMORY",
    "PHASE_FAILED",
    "PHASE_SAVED",
    "PHASE_SAVING",
    "REASON_MEMORY_NOT_KEPT",
    "REASON_SAVING_STATE",
    "REASON_STATE_NOT_SAVED",
    "ResumeFrom",
    "SuspendProgress",
]

ANNOTATION_SNAPSHOT_ON_SUSPEND: Final = "extensions.agents.x-k8s.io/snapshot-on-suspend"
ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK: Final = (
    "extensions.agents.x-k8s.io/snapshot-on-suspend-fallback"
)
"""With ``snapshot-on-suspend: Memory``: ``Filesystem`` (the one value) saves the files where the
node cannot checkpoint (``MemorySnapshotUnsupported``), rather than keep the Pod unsaved."""
ANNOTATION_SUSPEND_SNAPSHOT: Final = "extensions.agents.x-k8s.io/suspend-snapshot"
ANNOTATION_RESUME_FROM: Final = "extensions.agents.x-k8s.io/resume-from"
ANNOTATION_SNAPSHOT_PULL_SECRET: Final = constants.ANNOTATION_SNAPSHOT_PULL_SECRET
"""A ``kubernetes.io/dockerconfigjson`` Secret the Pod pulls a snapshot's image with."""

MODE_FILESYSTEM: Final = "Filesystem"
MODE_MEMORY: Final = "Memory"
MODES: Final = (MODE_FILESYSTEM, MODE_MEMORY)

PHASE_SAVING: Final = "Saving"
PHASE_SAVED: Final = "Saved"
PHASE_FAILED: Final = "Failed"

# Reasons of the Sandbox's Suspended condition while its Pod is kept.
REASON_SAVING_STATE: Final = "SavingState"
REASON_STATE_NOT_SAVED: Final = "StateNotSaved"
# The Event (Warning) of a Memory save that fell back to the files alone.
REASON_MEMORY_NOT_KEPT: Final = "MemoryNotKept"


def _load(value: object) -> dict[str, Any] | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True, slots=True)
class SuspendProgress:
    """Where saving one suspension stands (the keeper's report to the core controller).

    Attributes:
        generation: The Sandbox's ``metadata.generation`` the keeper saw suspended; a resume
            (or any spec change) makes the report stale.
        pod: UID of the Pod whose container is saved.
        snapshot: The SandboxSnapshot's name (same namespace).
        phase: ``Saving``, ``Saved`` or ``Failed``.
        reason: A failure's reason (the SandboxSnapshot's, or the keeper's).
        message: A failure's message, or what is being done.
        mode: What the SandboxSnapshot keeps, ``Filesystem`` or ``Memory`` (``Filesystem``
            after a fallback: how a reader tells whether the memory was kept); ``""`` in
            reports written before this field.
    """

    generation: int
    pod: str
    snapshot: str
    phase: str
    reason: str = ""
    message: str = ""
    mode: str = ""

    def to_annotation(self) -> str:
        """The annotation value (compact JSON)."""
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def parse(cls, value: object) -> SuspendProgress | None:
        """The progress in an annotation value; None when absent or not one (never raises)."""
        data = _load(value)
        if data is None:
            return None
        try:
            return cls(
                generation=int(data["generation"]),
                pod=str(data["pod"]),
                snapshot=str(data["snapshot"]),
                phase=str(data["phase"]),
                reason=str(data.get("reason") or ""),
                message=str(data.get("message") or ""),
                mode=str(data.get("mode") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def about(self, generation: int, pod_uid: str) -> bool:
        """Whether this report is about this suspension (generation) of this Pod."""
        return self.generation == generation and bool(pod_uid) and self.pod == pod_uid


@dataclass(frozen=True, slots=True)
class ResumeFrom:
    """The saved state a new Pod starts from.

    Attributes:
        pod: UID of the Pod that was saved.
        container: The container whose writable layer was committed.
        image: The pinned ``registry/repository@sha256:...`` it now runs from.
        base: That container's ``image`` in the Sandbox's pod template when it was saved: a
            template changed since (another image) wins over the saved state.
        snapshot: The SandboxSnapshot holding the image.
        pull_secret: A Secret to pull it with (``""``: the template's own).
    """

    pod: str
    container: str
    image: str
    base: str
    snapshot: str
    pull_secret: str = ""

    def to_annotation(self) -> str:
        """The annotation value (compact JSON)."""
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def parse(cls, value: object) -> ResumeFrom | None:
        """The saved state in an annotation value; None when absent or not one (never raises)."""
        data = _load(value)
        if data is None:
            return None
        try:
            found = cls(
                pod=str(data["pod"]),
                container=str(data["container"]),
                image=str(data["image"]),
                base=str(data["base"]),
                snapshot=str(data["snapshot"]),
                pull_secret=str(data.get("pull_secret") or ""),
            )
        except (KeyError, TypeError):
            return None
        return found if found.image and found.container else None
