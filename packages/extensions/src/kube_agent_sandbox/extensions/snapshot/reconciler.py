"""The SandboxSnapshot controller: names the commit, watches it, and deletes the image with
the object.

A snapshot goes Pending -> Committing -> Ready or Failed. The controller cannot reach
containerd on a node, so it only finds the Sandbox's Pod and container, writes them (and the
target ``host/repository:tag``) into the status with phase Committing, and leaves the commit to
the node agent on that node (``agent.py``), which writes Ready or Failed (a ``Memory`` snapshot
too: the agent has its kubelet checkpoint the container, or says what the node lacks). The
controller fails a commit whose Pod went away, whose node was deleted or stayed not Ready past a
grace (``NodeLost``: its agent went with it), or that no agent finished in time. An agent that
answers after that loses the status write (``resourceVersion``) and deletes what it pushed.
Deleting a snapshot deletes its manifest from the registry first (a finalizer); a registry that
is down is retried with backoff and the object stays, with a condition and an Event naming the
cause.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS
from kube_agent_sandbox.api.rest import NODES, PODS
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    EventRecorder,
    Obj,
    Reader,
    Request,
    Result,
    TransientError,
    format_time,
    meta,
    name_of,
    namespace_of,
    truncate_note,
)
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.containerd import (
    ContainerdError,
    container_id_from_status,
)
from kube_agent_sandbox.extensions.snapshot.metrics import SnapshotMetrics
from kube_agent_sandbox.extensions.snapshot.registry import RegistryError
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings

log = logging.getLogger(__name__)

POLL_PENDING: Final = 2.0
"""Seconds between looks at a Sandbox whose Pod is not running yet."""
POLL_COMMITTING: Final = 5.0
"""Seconds between looks at a commit's Pod (is it still there?)."""
DELETE_REFUSED_RECHECK: Final = 300.0
"""Seconds before asking again a registry that refuses deletes."""
NODE_LOST_GRACE: Final = 60.0
"""Seconds a commit's node may stay not Ready (a kubelet restart) before the commit fails."""


class SnapshotRetry(TransientError):
    """Raised so the queue retries with backoff (registry down, a write conflict)."""


class SnapshotReconciler:
    """Moves one SandboxSnapshot along; deletes its image when it is deleted.

    Args:
        client: Writes against the API server (and reads Pods and the registry Secret).
        snapshots: Cache of SandboxSnapshots.
        sandboxes: Cache of Sandboxes.
        settings: The registry.
        recorder: Receives the Events.
        metrics: Counts outcomes.
        commit_timeout: Seconds a snapshot may stay Committing.
        node_grace: Seconds the commit's node may stay not Ready before the commit fails.
        clock: Now, in UTC (tests move it).
    """

    def __init__(
        self,
        client: Client,
        *,
        snapshots: Reader,
        sandboxes: Reader,
        settings: RegistrySettings,
        recorder: EventRecorder | None = None,
        metrics: SnapshotMetrics | None = None,
        commit_timeout: float = 600.0,
        node_grace: float = NODE_LOST_GRACE,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._client = client
        self._snapshots = snapshots
        self._sandboxes = sandboxes
        self._settings = settings
        self._recorder = recorder
        self._metrics = metrics
        self._timeout = commit_timeout
        self._node_grace = node_grace
        self._clock = clock

    async def reconcile(self, request: Request) -> Result:
        """Act on the snapshot named by ``request``.

        Raises:
            SnapshotRetry: A write conflicted or the registry failed; retried with backoff.
        """
        snapshot = self._snapshots.get(request.namespace, request.name)
        if snapshot is None:
            return Result()
        try:
            if meta(snapshot).get("deletionTimestamp"):
                return await self._finalize(snapshot)
            if s.FINALIZER not in (meta(snapshot).get("finalizers") or []):
                await self._add_finalizer(snapshot)
                return Result()  # the update event brings it back
            phase = s.phase_of(snapshot)
            if phase == s.PENDING:
                return await self._start(snapshot)
            if phase == s.COMMITTING:
                return await self._watch_commit(snapshot)
            return Result()
        except ApiError as exc:
            if exc.not_found:
                return Result()
            raise SnapshotRetry(f"sandboxsnapshot {request}: {exc}") from exc

    # -- creation ------------------------------------------------------------------------------

    async def _add_finalizer(self, snapshot: Obj) -> None:
        finalizers = [*(meta(snapshot).get("finalizers") or []), s.FINALIZER]
        patch = {
            "metadata": {
                "finalizers": finalizers,
                "resourceVersion": meta(snapshot).get("resourceVersion"),
            }
        }
        await self._client.patch(
            SANDBOX_SNAPSHOTS, namespace_of(snapshot), name_of(snapshot), patch
        )

    async def _fail(self, snapshot: Obj, reason: str, message: str) -> Result:
        body = s.with_status(
            snapshot, phase=s.FAILED, reason=reason, message=message, now=self._clock()
        )
        await s.write_status(self._client, body)
        self._event(snapshot, "Warning", reason, message)
        if self._metrics is not None:
            self._metrics.finished(namespace_of(snapshot), s.FAILED, reason)
        log.info(
            "sandboxsnapshot %s/%s failed: %s", namespace_of(snapshot), name_of(snapshot), message
        )
        return Result()

    async def _pending(self, snapshot: Obj, message: str) -> Result:
        status = s.status_of(snapshot)
        if status.get("phase") != s.PENDING or _ready_message(snapshot) != message:
            body = s.with_status(
                snapshot,
                phase=s.PENDING,
                reason=s.REASON_WAITING,
                message=message,
                now=self._clock(),
            )
            await s.write_status(self._client, body)
        return Result(requeue_after=POLL_PENDING)

    async def _start(self, snapshot: Obj) -> Result:
        spec = s.spec_of(snapshot)
        namespace = namespace_of(snapshot)
        source = str(spec.get("sandboxName") or "")
        sandbox = self._sandboxes.get(namespace, source)
        if sandbox is None:
            return await self._fail(
                snapshot, s.REASON_SANDBOX_NOT_FOUND, f"Sandbox {namespace}/{source} does not exist"
            )
        pod_name = pod_name_of(sandbox)
        try:
            pod = await self._client.get(PODS, namespace, pod_name)
        except ApiError as exc:
            if not exc.not_found:
                raise
            return await self._pending(snapshot, f"Sandbox {source} has no Pod {pod_name} yet")
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        running = [c for c in statuses if (c.get("state") or {}).get("running")]
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not running or not node or not running[0].get("containerID"):
            return await self._pending(
                snapshot, f"the container of Sandbox {source} (Pod {pod_name}) is not running"
            )
        container = running[0]
        try:
            container_id = container_id_from_status(str(container["containerID"]))
        except ContainerdError as err:
            return await self._fail(snapshot, s.REASON_NOT_CONTAINERD, str(err))
        name = name_of(snapshot)
        repository = self._settings.repository(namespace, source, spec.get("repository"))
        tag = str(spec.get("tag") or name)
        target = f"{self._settings.host}/{repository}:{tag}"
        verb = "checkpointing" if spec.get("mode") == "Memory" else "committing"
        message = f"{verb} container {container.get('name')} of Pod {pod_name} on node {node}"
        body = s.with_status(
            snapshot,
            phase=s.COMMITTING,
            reason=s.REASON_COMMITTING,
            message=message,
            now=self._clock(),
            sourceSandbox=source,
            sourcePod=pod_name,
            sourceImage=str(container.get("image") or ""),
            containerID=container_id,
            container=str(container.get("name") or ""),
            node=node,
            target=target,
            startTime=format_time(self._clock()),
        )
        await s.write_status(self._client, body)
        self._event(snapshot, "Normal", s.REASON_COMMITTING, message)
        return Result(requeue_after=POLL_COMMITTING)

    async def _watch_commit(self, snapshot: Obj) -> Result:
        status = s.status_of(snapshot)
        namespace = namespace_of(snapshot)
        started = _parse_time(status.get("startTime"))
        elapsed = (self._clock() - started).total_seconds() if started else 0.0
        if elapsed >= self._timeout:
            return await self._fail(
                snapshot,
                s.REASON_TIMED_OUT,
                f"no node agent finished the commit on node {status.get('node')} within "
                f"{int(self._timeout)}s; is the agent-sandbox-snapshotter DaemonSet running there?",
            )
        # Before the Pod: a lost node's Pods go too (pod GC), which would hide the cause.
        lost = await self._node_lost(str(status.get("node") or ""))
        if lost is not None:
            return await self._fail(snapshot, s.REASON_NODE_LOST, lost)
        pod_name = str(status.get("sourcePod") or "")
        try:
            pod = await self._client.get(PODS, namespace, pod_name)
        except ApiError as exc:
            if not exc.not_found:
                raise
            pod = None
        ids = {
            str(c.get("containerID") or "").partition("://")[2]
            for c in ((pod or {}).get("status") or {}).get("containerStatuses") or []
        }
        if (
            pod is None
            or meta(pod).get("deletionTimestamp")
            or status.get("containerID") not in ids
        ):
            return await self._fail(
                snapshot,
                s.REASON_SOURCE_DELETED,
                f"the container of Pod {pod_name} went away during the commit; nothing was kept",
            )
        return Result(requeue_after=min(POLL_COMMITTING, max(1.0, self._timeout - elapsed)))

    async def _node_lost(self, node: str) -> str | None:
        """Why the commit's node (and so its agent) is lost, or None while it may still answer."""
        if not node:
            return None
        try:
            obj = await self._client.get(NODES, "", node)
        except ApiError as exc:
            if not exc.not_found:
                raise
            return (
                f"node {node} was deleted during the commit, with its node agent; nothing was "
                "kept. The Sandbox's Pod is recreated on another node: take a new snapshot there"
            )
        conditions = (obj.get("status") or {}).get("conditions") or []
        ready = next((c for c in conditions if c.get("type") == "Ready"), None)
        if ready is None or ready.get("status") == "True":
            return None
        since = _parse_time(ready.get("lastTransitionTime"))
        down = (self._clock() - since).total_seconds() if since else 0.0
        if down < self._node_grace:
            return None
        return (
            f"node {node} has not been Ready for {int(down)}s (Ready={ready.get('status')}, "
            f"{ready.get('reason') or 'no reason'}) during the commit, so its node agent cannot "
            "finish it; nothing was kept. Take a new snapshot once the Sandbox runs on a Ready node"
        )

    # -- deletion ------------------------------------------------------------------------------

    async def _finalize(self, snapshot: Obj) -> Result:
        if s.FINALIZER not in (meta(snapshot).get("finalizers") or []):
            return Result()
        status = s.status_of(snapshot)
        if s.phase_of(snapshot) == s.COMMITTING:
            # The agent may be pushing: wait for its answer (or the timeout) to know the digest.
            return await self._watch_commit(snapshot)
        keep = (meta(snapshot).get("annotations") or {}).get(s.ANNOTATION_KEEP_IMAGE) == "true"
        image = status.get("image")
        if image and not keep:
            result = await self._delete_image(snapshot, str(image))
            if result is not None:
                return result
        finalizers = [f for f in meta(snapshot).get("finalizers") or [] if f != s.FINALIZER]
        patch = {
            "metadata": {
                "finalizers": finalizers,
                "resourceVersion": meta(snapshot).get("resourceVersion"),
            }
        }
        await self._client.patch(
            SANDBOX_SNAPSHOTS, namespace_of(snapshot), name_of(snapshot), patch
        )
        return Result()

    async def _delete_image(self, snapshot: Obj, image: str) -> Result | None:
        """Delete the manifest; None when done, else what the queue should do."""
        _, repository, digest = s.split_image(image)
        try:
            async with await self._settings.client() as registry:
                await registry.delete_manifest(repository, digest)
        except RegistryError as err:
            if err.status == 405:
                message = (
                    f"the registry refuses to delete {image} (HTTP 405): enable deletes "
                    "(distribution: storage.delete.enabled=true), or annotate this snapshot "
                    f"{s.ANNOTATION_KEEP_IMAGE}=true to delete it and keep the image"
                )
                await self._image_condition(snapshot, s.REASON_DELETE_REFUSED, message)
                return Result(requeue_after=DELETE_REFUSED_RECHECK)
            reason = (
                s.REASON_CREDENTIALS_REFUSED
                if err.status in (401, 403)
                else s.REASON_REGISTRY_UNAVAILABLE
            )
            await self._image_condition(snapshot, reason, f"cannot delete {image}: {err}")
            raise SnapshotRetry(f"deleting {image}: {err}") from err
        except ValueError as err:
            await self._image_condition(snapshot, s.REASON_CREDENTIALS_REFUSED, str(err))
            raise SnapshotRetry(str(err)) from err
        self._event(snapshot, "Normal", "ImageDeleted", f"deleted {image} from the registry")
        return None

    async def _image_condition(self, snapshot: Obj, reason: str, message: str) -> None:
        conditions = s.status_of(snapshot).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == s.CONDITION_IMAGE_DELETED), None)
        if current is not None and current.get("reason") == reason:
            return  # reported already; the backoff goes on quietly
        body = s.with_status(
            snapshot,
            phase=s.phase_of(snapshot),
            reason=reason,
            message=message,
            now=self._clock(),
            condition=s.CONDITION_IMAGE_DELETED,
        )
        try:
            await s.write_status(self._client, body)
        except ApiError as exc:
            log.info("sandboxsnapshot %s: status not written: %s", name_of(snapshot), exc)
        self._event(snapshot, "Warning", reason, message)

    def _event(self, snapshot: Obj, type_: str, reason: str, message: str) -> None:
        if self._recorder is not None:
            self._recorder.event(
                snapshot, type_=type_, reason=reason, action="Snapshot", note=truncate_note(message)
            )


def pod_name_of(sandbox: Obj) -> str:
    """The Sandbox's Pod: the ``agents.x-k8s.io/pod-name`` annotation if set, else its name."""
    annotated = (meta(sandbox).get("annotations") or {}).get(c.ANNOTATION_POD_NAME)
    return str(annotated) if annotated else name_of(sandbox)


def _ready_message(snapshot: Obj) -> str | None:
    for cond in s.status_of(snapshot).get("conditions") or []:
        if cond.get("type") == s.CONDITION_READY:
            return str(cond.get("message") or "")
    return None


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
