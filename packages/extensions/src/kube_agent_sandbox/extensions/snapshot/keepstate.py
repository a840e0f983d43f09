"""The state keeper: saves a suspended, opted-in Sandbox's container before its Pod goes.

A Sandbox annotated ``extensions.agents.x-k8s.io/snapshot-on-suspend: Filesystem`` that is
suspended while its Pod runs gets a SandboxSnapshot ``<sandbox>-suspend-<generation>`` (owned by
nobody, so it outlives the Sandbox). The core Sandbox controller keeps the Pod meanwhile
(``kube_agent_sandbox.controller.sandbox.keepstate``); this reconciler tells it how the save
goes through annotations on the Sandbox (``kube_agent_sandbox.api.keepstate``):

* the snapshot is Pending or Committing: progress ``Saving``;
* it is Ready: progress ``Saved`` and ``resume-from`` (the pinned image, which container, the
  template image it replaces) in one write; the core then deletes the Pod, and the Pod of the
  resume runs that image;
* it Failed (registry down, push failed, ``mode: Memory`` on a node that cannot checkpoint...):
  progress ``Failed`` with its reason and message, and a Warning Event on the Sandbox; the Pod
  stays and the Sandbox stays usable. Deleting the failed SandboxSnapshot retries (it is made
  again under the same name); a resume ends the attempt, a later suspend makes a new one.
* the exception: a ``Memory`` save that failed with ``MemorySnapshotUnsupported`` on a Sandbox
  that also says ``snapshot-on-suspend-fallback: Filesystem`` goes on as a ``Filesystem``
  SandboxSnapshot ``<sandbox>-suspend-<generation>-filesystem``, with a Warning Event
  ``MemoryNotKept`` naming what the node lacks; the progress names that snapshot and says
  ``mode: Filesystem``. Other failures (a push that failed...) never fall back: the files
  would fail the same way, and a retry may keep the memory.

Every write to the Sandbox is locked on the resourceVersion the keeper read it at: a resume that
lands meanwhile makes the write fail (and the next pass sees the Sandbox running and stops), so
a save is never reported for a Pod that went on running. The progress also names the Sandbox's
generation, which any resume changes, for the same reason on the core's side.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    EventRecorder,
    Obj,
    Reader,
    Request,
    Result,
    TransientError,
    is_owned_by,
    is_terminating,
    meta,
    name_of,
    namespace_of,
    truncate_note,
    uid_of,
)
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.reconciler import pod_name_of

log = logging.getLogger(__name__)

ANNOTATION_SAVED_ON_SUSPEND: Final = "extensions.agents.x-k8s.io/saved-on-suspend"
"""On a SandboxSnapshot the keeper made: the UID of the Pod it saves."""
FIELD_MANAGER: Final = "agent-sandbox-state-keeper"

REASON_STATE_SAVED: Final = "StateSaved"
REASON_INVALID_MODE: Final = "InvalidSnapshotOnSuspend"
FALLBACK_SUFFIX: Final = "-filesystem"
_NAME_MAX: Final = 100  # the default tag is the name: at most 128 characters


class KeepStateRetry(TransientError):
    """Raised so the queue retries with backoff (a write conflict, the API server)."""


def snapshot_name(sandbox: str, generation: int, *, fallback: bool = False) -> str:
    """The SandboxSnapshot saving ``sandbox`` suspended at ``generation`` (deterministic: a
    keeper that crashed between create and report finds its own snapshot again);
    ``fallback``: the Filesystem one made after a Memory save the node could not do."""
    suffix = f"-suspend-{generation}" + (FALLBACK_SUFFIX if fallback else "")
    if len(sandbox) + len(suffix) <= _NAME_MAX:
        return sandbox + suffix
    digest = hashlib.sha256(sandbox.encode()).hexdigest()[:8]
    return f"{sandbox[: _NAME_MAX - len(suffix) - 9].rstrip('.-')}-{digest}{suffix}"


def snapshot_to_sandbox(snapshot: Obj) -> list[Request]:
    """Mapper: a snapshot the keeper made wakes the Sandbox it saves."""
    if ANNOTATION_SAVED_ON_SUSPEND not in (meta(snapshot).get("annotations") or {}):
        return []
    source = str(s.spec_of(snapshot).get("sandboxName") or "")
    return [Request(namespace_of(snapshot), source)] if source else []


class StateKeeper:
    """Saves a suspended, opted-in Sandbox's container and reports it on the Sandbox.

    Args:
        client: Writes against the API server (and reads the Pod live).
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

    async def reconcile(self, request: Request) -> Result:
        """Move the save of the Sandbox named by ``request`` along.

        Raises:
            KeepStateRetry: A write conflicted or failed; retried with backoff.
        """
        sandbox = self._sandboxes.get(request.namespace, request.name)
        if sandbox is None or meta(sandbox).get("deletionTimestamp"):
            return Result()
        mode = _opt_in(sandbox)
        suspended = (sandbox.get("spec") or {}).get("operatingMode") == c.OPERATING_MODE_SUSPENDED
        if not mode or not suspended:
            return Result()
        try:
            return await self._keep(sandbox, mode)
        except ApiError as exc:
            if exc.not_found:
                return Result()
            if exc.conflict:
                # The cache was behind the Sandbox (the core controller writes it too): read
                # it again and decide again, through the rate limiter, without an error log.
                log.debug("sandbox %s changed under the state keeper; again", request)
                return Result(requeue=True)
            raise KeepStateRetry(f"keeping the state of sandbox {request}: {exc}") from exc

    async def _keep(self, sandbox: Obj, mode: str) -> Result:
        namespace = namespace_of(sandbox)
        pod = await self._pod(sandbox)
        if pod is None:
            return Result()  # nothing runs: nothing to save, and the core has nothing to keep
        generation = int(meta(sandbox).get("generation") or 0)
        pod_uid = uid_of(pod) or ""
        progress = k.SuspendProgress.parse(
            (meta(sandbox).get("annotations") or {}).get(k.ANNOTATION_SUSPEND_SNAPSHOT)
        )
        current = progress if progress is not None and progress.about(generation, pod_uid) else None
        if current is not None and current.phase == k.PHASE_SAVED:
            return Result()
        name = (
            current.snapshot if current is not None else snapshot_name(name_of(sandbox), generation)
        )
        invalid = _invalid_opt_in(sandbox, mode)
        if invalid:
            report = k.SuspendProgress(
                generation, pod_uid, name, k.PHASE_FAILED, REASON_INVALID_MODE, invalid
            )
            await self._report(sandbox, current, report, pod=pod)
            return Result()
        fallback = snapshot_name(name_of(sandbox), generation, fallback=True)
        if name == fallback:
            mode = k.MODE_FILESYSTEM
        snapshot = self._snapshots.get(namespace, name)
        if snapshot is None:
            snapshot = await self._create(sandbox, name, mode, pod_uid)
        if _falls_back(sandbox, mode, snapshot):
            name, mode = fallback, k.MODE_FILESYSTEM
            snapshot = await self._fall_back(sandbox, snapshot, name, pod_uid)
        phase = s.phase_of(snapshot)
        if phase == s.READY:
            return await self._saved(sandbox, current, snapshot, pod, generation, mode)
        reason, message = _ready_reason(snapshot)
        if phase == s.FAILED:
            text = (
                f"SandboxSnapshot {name} failed ({reason}): {message}. To retry, delete "
                f"SandboxSnapshot {name} (it is made again); or resume the Sandbox"
            )
            report = k.SuspendProgress(
                generation, pod_uid, name, k.PHASE_FAILED, reason, text, mode=mode
            )
        else:
            report = k.SuspendProgress(
                generation, pod_uid, name, k.PHASE_SAVING, reason, f"{phase}: {message}", mode=mode
            )
        await self._report(sandbox, current, report, pod=pod)
        return Result()

    async def _fall_back(self, sandbox: Obj, failed: Obj, name: str, pod_uid: str) -> Obj:
        """The Filesystem SandboxSnapshot replacing a Memory one the node could not make."""
        snapshot = self._snapshots.get(namespace_of(sandbox), name)
        if snapshot is not None:
            return snapshot
        _, why = _ready_reason(failed)
        self._event(
            sandbox,
            "Warning",
            k.REASON_MEMORY_NOT_KEPT,
            f"SandboxSnapshot {name_of(failed)} could not keep the memory "
            f"({s.REASON_MEMORY_UNSUPPORTED}: {why}); as "
            f"{k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK} allows, SandboxSnapshot {name} "
            f"keeps the filesystem and a resume starts the processes afresh",
        )
        return await self._create(sandbox, name, k.MODE_FILESYSTEM, pod_uid)

    async def _pod(self, sandbox: Obj) -> Obj | None:
        """The Sandbox's own Pod while it still runs (not terminating), else None."""
        try:
            pod = await self._client.get(PODS, namespace_of(sandbox), pod_name_of(sandbox))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        if is_terminating(pod) or not is_owned_by(pod, sandbox):
            return None
        return pod

    async def _create(self, sandbox: Obj, name: str, mode: str, pod_uid: str) -> Obj:
        body = {
            "apiVersion": SANDBOX_SNAPSHOTS.api_version,
            "kind": SANDBOX_SNAPSHOTS.kind,
            "metadata": {
                "name": name,
                "namespace": namespace_of(sandbox),
                "annotations": {ANNOTATION_SAVED_ON_SUSPEND: pod_uid},
            },
            "spec": {"sandboxName": name_of(sandbox), "mode": mode},
        }
        try:
            created = await self._client.create(
                SANDBOX_SNAPSHOTS, namespace_of(sandbox), body, field_manager=FIELD_MANAGER
            )
        except ApiError as exc:
            if not exc.already_exists:
                raise
            return await self._client.get(SANDBOX_SNAPSHOTS, namespace_of(sandbox), name)
        log.info(
            "sandbox %s/%s suspended: saving its state as SandboxSnapshot %s",
            namespace_of(sandbox),
            name_of(sandbox),
            name,
        )
        return created

    async def _saved(
        self,
        sandbox: Obj,
        current: k.SuspendProgress | None,
        snapshot: Obj,
        pod: Obj,
        generation: int,
        mode: str,
    ) -> Result:
        status = s.status_of(snapshot)
        container = _container_named(pod, str(status.get("containerID") or ""))
        base = _template_image(sandbox, container)
        name = name_of(snapshot)
        pod_uid = uid_of(pod) or ""
        if container is None or base is None:
            # The snapshot is of another container than the Pod runs now (cannot happen while
            # the Pod is kept, but never resume from a guess).
            report = k.SuspendProgress(
                generation,
                pod_uid,
                name,
                k.PHASE_FAILED,
                s.REASON_SOURCE_DELETED,
                f"SandboxSnapshot {name} does not match a container of Pod {name_of(pod)}; "
                f"delete it to retry",
                mode=mode,
            )
            await self._report(sandbox, current, report, pod=pod)
            return Result()
        pull_secret = str(
            (meta(sandbox).get("annotations") or {}).get(k.ANNOTATION_SNAPSHOT_PULL_SECRET) or ""
        )
        resume = k.ResumeFrom(
            pod=pod_uid,
            container=container,
            image=str(status.get("image") or ""),
            base=base,
            snapshot=name,
            pull_secret=pull_secret,
        )
        message = f"saved as {resume.image}"
        if mode != _opt_in(sandbox):
            message += f" (the filesystem only: {k.REASON_MEMORY_NOT_KEPT}, see the Events)"
        report = k.SuspendProgress(
            generation, pod_uid, name, k.PHASE_SAVED, message=message, mode=mode
        )
        await self._report(sandbox, current, report, pod=pod, resume=resume)
        return Result()

    async def _report(
        self,
        sandbox: Obj,
        current: k.SuspendProgress | None,
        report: k.SuspendProgress,
        *,
        pod: Obj,
        resume: k.ResumeFrom | None = None,
    ) -> None:
        """Write the progress (and the saved state) locked on the Sandbox as read; Event once."""
        if current == report:
            return
        annotations = {k.ANNOTATION_SUSPEND_SNAPSHOT: report.to_annotation()}
        if resume is not None:
            annotations[k.ANNOTATION_RESUME_FROM] = resume.to_annotation()
        patch = {
            "metadata": {
                "resourceVersion": meta(sandbox).get("resourceVersion"),
                "annotations": annotations,
            }
        }
        # A conflict (resumed meanwhile, or another writer) goes up: the pass is retried.
        await self._client.patch(SANDBOXES, namespace_of(sandbox), name_of(sandbox), patch)
        if report.phase == k.PHASE_FAILED:
            self._event(sandbox, "Warning", k.REASON_STATE_NOT_SAVED, report.message)
        elif report.phase == k.PHASE_SAVED:
            kept = "memory and filesystem" if report.mode == k.MODE_MEMORY else "filesystem"
            self._event(
                sandbox,
                "Normal",
                REASON_STATE_SAVED,
                f"the {kept} of Pod {name_of(pod)} is saved in SandboxSnapshot "
                f"{report.snapshot}; the Pod goes and a resume starts from it",
            )

    def _event(self, sandbox: Obj, type_: str, reason: str, message: str) -> None:
        if self._recorder is not None:
            self._recorder.event(
                sandbox, type_=type_, reason=reason, action="KeepState", note=truncate_note(message)
            )


def _opt_in(sandbox: Obj) -> str:
    return str((meta(sandbox).get("annotations") or {}).get(k.ANNOTATION_SNAPSHOT_ON_SUSPEND) or "")


def _invalid_opt_in(sandbox: Obj, mode: str) -> str:
    """Why the Sandbox's opt-in (mode and fallback) cannot be followed; ``""`` when it can."""
    annotations = meta(sandbox).get("annotations") or {}
    if mode not in k.MODES:
        return (
            f"{k.ANNOTATION_SNAPSHOT_ON_SUSPEND}={mode!r} is not one of "
            f"{', '.join(k.MODES)}; the state was not saved"
        )
    fallback = annotations.get(k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK)
    if fallback is not None and fallback != k.MODE_FILESYSTEM:
        return (
            f"{k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK}={fallback!r} is not "
            f"{k.MODE_FILESYSTEM!r} (the one fallback); the state was not saved"
        )
    return ""


def _falls_back(sandbox: Obj, mode: str, snapshot: Obj) -> bool:
    """Whether this Memory snapshot failed because the node cannot checkpoint, and the
    Sandbox accepts the files alone then."""
    accepts = (meta(sandbox).get("annotations") or {}).get(
        k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK
    ) == k.MODE_FILESYSTEM
    return (
        accepts
        and mode == k.MODE_MEMORY
        and s.phase_of(snapshot) == s.FAILED
        and _ready_reason(snapshot)[0] == s.REASON_MEMORY_UNSUPPORTED
    )


def _ready_reason(snapshot: Obj) -> tuple[str, str]:
    for cond in s.status_of(snapshot).get("conditions") or []:
        if cond.get("type") == s.CONDITION_READY:
            return str(cond.get("reason") or ""), str(cond.get("message") or "")
    return "", "not started yet"


def _container_named(pod: Obj, container_id: str) -> str | None:
    """The name of the Pod's container with this (runtime-less) ID."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if str(status.get("containerID") or "").partition("://")[2] == container_id:
            return str(status.get("name") or "") or None
    return None


def _template_image(sandbox: Obj, container: str | None) -> str | None:
    spec = ((sandbox.get("spec") or {}).get("podTemplate") or {}).get("spec") or {}
    for item in spec.get("containers") or []:
        if item.get("name") == container:
            return str(item.get("image") or "")
    return None
