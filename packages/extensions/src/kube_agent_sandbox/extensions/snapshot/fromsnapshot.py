"""The snapshot resolver: a Sandbox created from a snapshot gets its pinned image.

A Sandbox annotated ``extensions.agents.x-k8s.io/snapshot: <SandboxSnapshot>`` (same namespace)
gets no Pod from the core Sandbox controller until this reconciler resolves the snapshot
(``kube_agent_sandbox.controller.sandbox.fromsnapshot``); it reports on the Sandbox through
annotations (``kube_agent_sandbox.api.fromsnapshot``):

* the snapshot is Ready: ``resume-from`` (its pinned image, the first container, that
  container's template image as the base, the ``snapshot-pull-secret`` Secret) in one write that
  also drops the wait message; the core makes the Pod as on a resume after a kept suspend;
* it is missing, not Ready yet, or Failed (or the template has no container): the wait message
  the core shows in the Ready condition, and a Warning Event when it changes. The snapshot's
  changes wake the Sandboxes naming it.

Once ``resume-from`` is there, or once the Sandbox has had a Pod, the annotation is not read
again: a later change of it does nothing, as for a claim. Writes are locked on the
resourceVersion the resolver read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from kube_agent_sandbox.api import fromsnapshot as f
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    EventRecorder,
    Obj,
    Reader,
    Request,
    Result,
    TransientError,
    meta,
    name_of,
    namespace_of,
    truncate_note,
)
from kube_agent_sandbox.extensions.snapshot import status as s

log = logging.getLogger(__name__)

REASON_SNAPSHOT_NOT_READY: Final = "SnapshotNotReady"
REASON_SNAPSHOT_RESOLVED: Final = "SnapshotResolved"


class ResolveRetry(TransientError):
    """Raised so the queue retries with backoff (the API server failed a write)."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why the Sandbox cannot start from its snapshot yet.

    Attributes:
        message: What the Ready condition and the Event say.
        warning: Something is wrong (missing, Failed), not merely not Ready yet.
    """

    message: str
    warning: bool = True


def _annotations(obj: Obj) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def resolve(sandbox: Obj, name: str, snapshot: Obj | None) -> k.ResumeFrom | Waiting:
    """What the Sandbox starts from: the saved state, or why it cannot yet."""
    if snapshot is None:
        return Waiting(f"SandboxSnapshot {name} not found")
    phase = s.phase_of(snapshot) or "Pending"
    image = str(s.status_of(snapshot).get("image") or "")
    if phase == s.FAILED:
        return Waiting(f"SandboxSnapshot {name} failed: {_ready_message(snapshot)}")
    if phase != s.READY or not image:
        return Waiting(f"SandboxSnapshot {name} is {phase}, not Ready", warning=False)
    pod_spec = ((sandbox.get("spec") or {}).get("podTemplate") or {}).get("spec") or {}
    containers = pod_spec.get("containers") or []
    if not containers or not containers[0].get("name"):
        return Waiting("the pod template has no container to start from the snapshot")
    return k.ResumeFrom(
        pod="",
        container=str(containers[0]["name"]),
        image=image,
        base=str(containers[0].get("image") or ""),
        snapshot=name,
        pull_secret=str(_annotations(sandbox).get(k.ANNOTATION_SNAPSHOT_PULL_SECRET) or ""),
    )


def _ready_message(snapshot: Obj) -> str:
    for cond in s.status_of(snapshot).get("conditions") or []:
        if cond.get("type") == s.CONDITION_READY:
            return f"{cond.get('reason') or ''}: {cond.get('message') or ''}".strip(": ")
    return "no reason given"


class SnapshotResolver:
    """Resolves the snapshot a Sandbox is created from into the image its Pod runs.

    Args:
        client: Writes against the API server.
        sandboxes: Cache of Sandboxes.
        snapshots: Cache of SandboxSnapshots.
        recorder: Receives the Events about the Sandbox.
    """

    def __init__(
        self,
        client: Client,
        *,
        sandboxes: Reader,
        snapshots: Reader,
        recorder: EventRecorder | None = None,
    ) -> None:
        self._client = client
        self._sandboxes = sandboxes
        self._snapshots = snapshots
        self._recorder = recorder

    def sandboxes_naming(self, snapshot: Obj) -> list[Request]:
        """Mapper: a snapshot's change wakes the Sandboxes still waiting for it."""
        namespace, name = namespace_of(snapshot), name_of(snapshot)
        return [
            Request(namespace, name_of(sandbox))
            for sandbox in self._sandboxes.list(namespace)
            if f.awaited_snapshot(sandbox) == name
        ]

    async def reconcile(self, request: Request) -> Result:
        """Write the resolved image, or why not yet, on the Sandbox named by ``request``.

        Raises:
            ResolveRetry: A write failed; retried with backoff.
        """
        sandbox = self._sandboxes.get(request.namespace, request.name)
        if sandbox is None or meta(sandbox).get("deletionTimestamp"):
            return Result()
        name = f.awaited_snapshot(sandbox)
        if not name:
            return Result()
        found = resolve(sandbox, name, self._snapshots.get(request.namespace, name))
        annotations: dict[str, str | None]
        if isinstance(found, k.ResumeFrom):
            annotations = {
                k.ANNOTATION_RESUME_FROM: found.to_annotation(),
                f.ANNOTATION_SNAPSHOT_WAIT: None,
            }
        elif _annotations(sandbox).get(f.ANNOTATION_SNAPSHOT_WAIT) == found.message:
            return Result()  # already said
        else:
            annotations = {f.ANNOTATION_SNAPSHOT_WAIT: found.message}
        patch = {
            "metadata": {
                "resourceVersion": meta(sandbox).get("resourceVersion"),
                "annotations": annotations,
            }
        }
        try:
            await self._client.patch(SANDBOXES, request.namespace, request.name, patch)
        except ApiError as exc:
            if exc.not_found:
                return Result()
            if exc.conflict:
                return Result(requeue=True)  # the cache was behind: read it again, decide again
            raise ResolveRetry(f"resolving the snapshot of sandbox {request}: {exc}") from exc
        if isinstance(found, k.ResumeFrom):
            self._event(
                sandbox,
                "Normal",
                REASON_SNAPSHOT_RESOLVED,
                f"the Pod's container {found.container} runs {found.image} of SandboxSnapshot "
                f"{name}",
            )
        else:
            type_ = "Warning" if found.warning else "Normal"
            self._event(sandbox, type_, REASON_SNAPSHOT_NOT_READY, found.message)
        return Result()

    def _event(self, sandbox: Obj, type_: str, reason: str, message: str) -> None:
        if self._recorder is not None:
            self._recorder.event(
                sandbox,
                type_=type_,
                reason=reason,
                action="ResolveSnapshot",
                note=truncate_note(message),
            )
