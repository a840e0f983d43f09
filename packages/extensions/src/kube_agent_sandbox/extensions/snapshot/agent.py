"""The node agent (``agent-sandbox-snapshotter``): commits the snapshots of its node.

One runs on every node (a DaemonSet) with containerd's socket and its overlay snapshots
mounted. It watches SandboxSnapshots, and for each in phase Committing whose ``status.node`` is
its node it commits ``status.containerID`` with :func:`commit_container`, pushes to
``status.target`` and writes Ready (image, digest, size) or Failed (the cause). A ``Memory``
snapshot is checkpointed by the node's kubelet instead (``checkpoint.py``) when the agent is
given the kubelet's checkpoints folder (``--kubelet-checkpoints-dir``); without it, or where the
kubelet, the runtime or CRIU cannot, the snapshot fails with ``MemorySnapshotUnsupported``.
The API server is the only channel between the controller and the agents: no endpoint to
expose or authenticate.

Commits of one container run one at a time (two snapshots of one sandbox at once both succeed,
in turn: runc cannot freeze a frozen container twice). When the controller failed the snapshot
while the agent pushed (its Pod or node went away), the agent's Ready write conflicts, and the
agent deletes what it pushed instead: nothing half-done is left listed as Ready, nor on a
snapshot made again under the same name (the write is for the object, by UID, it committed).

Run: ``python -m kube_agent_sandbox.extensions.snapshot.agent --node-name $NODE_NAME
--snapshot-registry https://registry:5000 ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ApiError,
    Client,
    ControllerBuilder,
    EventRecorder,
    Manager,
    Obj,
    Reader,
    Request,
    Result,
    TransientError,
    load_config,
    meta,
    name_of,
    namespace_of,
    truncate_note,
)
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.checkpoint import (
    SERVICE_ACCOUNT_TOKEN,
    CheckpointError,
    KubeletCheckpointer,
    checkpoint_container,
    ssl_context,
)
from kube_agent_sandbox.extensions.snapshot.commit import CommitResult, CommitTarget
from kube_agent_sandbox.extensions.snapshot.commit import commit_container as _commit
from kube_agent_sandbox.extensions.snapshot.containerd import ContainerdError, ContainerdNode
from kube_agent_sandbox.extensions.snapshot.image import ImageError
from kube_agent_sandbox.extensions.snapshot.layer import LayerError
from kube_agent_sandbox.extensions.snapshot.metrics import SnapshotMetrics
from kube_agent_sandbox.extensions.snapshot.nospace import (
    disk_full_message,
    node_disk_full,
    registry_full,
    registry_full_message,
)
from kube_agent_sandbox.extensions.snapshot.registry import RegistryClient, RegistryError
from kube_agent_sandbox.extensions.snapshot.settings import (
    RegistrySettings,
    SettingsError,
    parse_settings,
)

log = logging.getLogger(__name__)

CONTROLLER_NAME: Final = "snapshotter"
EVENT_REPORTER: Final = "agent-sandbox-snapshotter"
DEFAULT_SOCKET: Final = "/run/containerd/containerd.sock"
_WRITE_ATTEMPTS: Final = 5


class Committer(Protocol):
    """Commits one container and pushes it (``commit_container`` bound to the node)."""

    async def __call__(
        self, container_id: str, target: CommitTarget, registry: RegistryClient, *, comment: str
    ) -> CommitResult: ...


class MemoryCommitter(Protocol):
    """Checkpoints one container through the kubelet and pushes the archive as an image."""

    async def __call__(
        self,
        *,
        namespace: str,
        pod: str,
        container: str,
        source_image: str,
        target: CommitTarget,
        registry: RegistryClient,
    ) -> CommitResult: ...


def kubelet_committer(checkpointer: KubeletCheckpointer, checkpoints_dir: Path) -> MemoryCommitter:
    """The real memory committer: this node's kubelet, its checkpoints folder mounted."""
    return functools.partial(checkpoint_container, checkpointer, checkpoints_dir)


def no_memory_message(node: str) -> str:
    """Why a node agent without kubelet checkpoint access refuses a Memory snapshot."""
    return (
        f"the node agent on node {node} cannot checkpoint memory: it runs without "
        "--kubelet-checkpoints-dir (memory snapshots need the kubelet's ContainerCheckpoint API, "
        "containerd 2.0 to 2.3 with restore, and CRIU 4.2 or newer on the node); "
        "use mode Filesystem"
    )


def node_committer(node: ContainerdNode, workdir: Path | None) -> Committer:
    """The real committer: ``commit_container`` on this node's containerd."""

    async def commit(
        container_id: str, target: CommitTarget, registry: RegistryClient, *, comment: str
    ) -> CommitResult:
        return await _commit(node, container_id, target, registry, comment=comment, workdir=workdir)

    return commit


def parse_target(target: str) -> CommitTarget:
    """``host/repository:tag`` as a :class:`CommitTarget`.

    Raises:
        ValueError: Not of that form.
    """
    host, slash, rest = target.partition("/")
    repository, colon, tag = rest.rpartition(":")
    if not slash or not colon or not repository:
        raise ValueError(f"status.target {target!r} is not host/repository:tag")
    return CommitTarget(host, repository, tag)


class SnapshotAgent:
    """Commits the Committing snapshots of one node.

    Args:
        client: Reads snapshots fresh and writes their status.
        snapshots: Cache of SandboxSnapshots (all namespaces).
        node_name: This node.
        settings: The registry (credentials read per commit).
        committer: Does the commit.
        memory: Does a Memory snapshot (None: this node agent cannot, and says so).
        recorder: Receives the Events.
        metrics: Counts the snapshots this agent ended.
        workdir: The committer's work folder (named when it fills up; the system's temporary
            folder when None).
        clock: Now, in UTC.
    """

    def __init__(
        self,
        client: Client,
        *,
        snapshots: Reader,
        node_name: str,
        settings: RegistrySettings,
        committer: Committer,
        memory: MemoryCommitter | None = None,
        recorder: EventRecorder | None = None,
        metrics: SnapshotMetrics | None = None,
        workdir: Path | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._client = client
        self._workdir = workdir or Path(tempfile.gettempdir())
        self._memory = memory
        self._metrics = metrics
        self._snapshots = snapshots
        self._node = node_name
        self._settings = settings
        self._commit = committer
        self._recorder = recorder
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}

    def _mine(self, snapshot: Obj | None) -> bool:
        if snapshot is None:
            return False
        status = s.status_of(snapshot)
        return s.phase_of(snapshot) == s.COMMITTING and status.get("node") == self._node

    async def reconcile(self, request: Request) -> Result:
        """Commit the snapshot named by ``request`` if it is this node's to commit."""
        if not self._mine(self._snapshots.get(request.namespace, request.name)):
            return Result()
        container_id = str(
            s.status_of(self._snapshots.get(request.namespace, request.name) or {}).get(
                "containerID"
            )
            or ""
        )
        lock = self._locks.setdefault(container_id, asyncio.Lock())
        async with lock:
            # Read it fresh: the cache may not show yet that an earlier pass finished it.
            try:
                snapshot = await self._client.get(
                    SANDBOX_SNAPSHOTS, request.namespace, request.name
                )
            except ApiError as exc:
                if exc.not_found:
                    return Result()
                raise TransientError(str(exc)) from exc
            if not self._mine(snapshot):
                return Result()
            await self._run(snapshot)
        return Result()

    async def _run(self, snapshot: Obj) -> None:
        status = s.status_of(snapshot)
        try:
            target = parse_target(str(status.get("target") or ""))
        except ValueError as err:
            await self._finish(snapshot, s.FAILED, s.REASON_COMMIT_FAILED, str(err))
            return
        memory = s.spec_of(snapshot).get("mode") == "Memory"
        if memory and self._memory is None:
            await self._finish(
                snapshot, s.FAILED, s.REASON_MEMORY_UNSUPPORTED, no_memory_message(self._node)
            )
            return
        comment = f"SandboxSnapshot {namespace_of(snapshot)}/{name_of(snapshot)}"
        try:
            async with await self._settings.client() as registry:
                if memory and self._memory is not None:
                    result = await self._memory(
                        namespace=namespace_of(snapshot),
                        pod=str(status.get("sourcePod") or ""),
                        container=str(status.get("container") or ""),
                        source_image=str(status.get("sourceImage") or ""),
                        target=target,
                        registry=registry,
                    )
                    message = (
                        f"pushed {result.image} (a {result.layer.size}-byte checkpoint; the "
                        f"process was dumped in {result.frozen_seconds:.2f}s and kept running)"
                    )
                else:
                    result = await self._commit(
                        str(status.get("containerID") or ""), target, registry, comment=comment
                    )
                    message = (
                        f"pushed {result.image} ({result.layer.size} bytes added; the container "
                        f"was frozen {result.frozen_seconds:.2f}s)"
                    )
                written = await self._finish(
                    snapshot,
                    s.READY,
                    s.REASON_PUSHED,
                    message,
                    image=result.image,
                    digest=result.digest,
                    size=result.layer.size,
                    sourceImage=result.base_image,
                )
                if not written:
                    # The snapshot failed meanwhile (its Pod went away): do not leave the image.
                    await registry.delete_manifest(target.repository, result.digest)
        except RegistryError as err:
            if registry_full(err):
                message = registry_full_message(err)
                await self._finish(snapshot, s.FAILED, s.REASON_REGISTRY_STORAGE_FULL, message)
            else:
                await self._finish(snapshot, s.FAILED, s.REASON_PUSH_FAILED, str(err))
        except (CheckpointError, LayerError, ImageError, OSError) as err:
            if node_disk_full(err):
                message = disk_full_message(self._node, err, self._workdir)
                await self._finish(snapshot, s.FAILED, s.REASON_NODE_DISK_FULL, message)
            elif isinstance(err, OSError):
                raise  # not the commit's (the API server unreachable): the queue retries
            elif isinstance(err, CheckpointError) and err.unsupported:
                await self._finish(snapshot, s.FAILED, s.REASON_MEMORY_UNSUPPORTED, str(err))
            else:
                await self._finish(snapshot, s.FAILED, s.REASON_COMMIT_FAILED, str(err))
        except ContainerdError as err:
            await self._finish(snapshot, s.FAILED, s.REASON_SOURCE_DELETED, str(err))
        except ValueError as err:
            await self._finish(snapshot, s.FAILED, s.REASON_PUSH_FAILED, str(err))

    async def _finish(
        self, snapshot: Obj, phase: str, reason: str, message: str, **fields: Any
    ) -> bool:
        """Write the final status; False when the snapshot is no longer this commit's: no longer
        Committing here, or another object of the same name (the failed one deleted and made
        again while this commit hung: its result must not land on the new one)."""
        current = snapshot
        for _ in range(_WRITE_ATTEMPTS):
            if meta(current).get("uid") != meta(snapshot).get("uid") or not self._mine(current):
                return False
            body = s.with_status(
                current, phase=phase, reason=reason, message=message, now=self._clock(), **fields
            )
            try:
                await s.write_status(self._client, body)
            except ApiError as exc:
                if exc.not_found:
                    return False
                if exc.status != 409:
                    raise TransientError(str(exc)) from exc
                current = await self._client.get(
                    SANDBOX_SNAPSHOTS, namespace_of(snapshot), name_of(snapshot)
                )
                continue
            if self._metrics is not None:
                self._metrics.finished(namespace_of(snapshot), phase, reason)
            if self._recorder is not None:
                self._recorder.event(
                    snapshot,
                    type_="Normal" if phase == s.READY else "Warning",
                    reason=reason,
                    action="Snapshot",
                    note=truncate_note(message),
                )
            log.info(
                "sandboxsnapshot %s/%s: %s", namespace_of(snapshot), name_of(snapshot), message
            )
            return True
        raise TransientError(f"status of {name_of(snapshot)} kept conflicting")


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agent-sandbox-snapshotter", description=__doc__)
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""))
    parser.add_argument("--containerd-socket", default=DEFAULT_SOCKET)
    parser.add_argument("--ctr", default="ctr", help="containerd's ctr (the node's, mounted)")
    parser.add_argument("--snapshot-registry", required=True)
    parser.add_argument(
        "--snapshot-registry-auth-file",
        default="",
        help="the registry's credentials: a mounted dockerconfigjson Secret's file",
    )
    parser.add_argument("--snapshot-registry-ca", default="")
    parser.add_argument("--snapshot-repository-prefix", default="agent-sandbox/snapshots")
    parser.add_argument("--workdir", default="", help="layer files while pushed (default: /tmp)")
    parser.add_argument(
        "--kubelet-checkpoints-dir",
        default="",
        help="the kubelet's checkpoints folder, mounted (<kubelet root>/checkpoints); "
        "without it Memory snapshots fail with MemorySnapshotUnsupported",
    )
    parser.add_argument(
        "--kubelet-url",
        default=os.environ.get("KUBELET_URL", ""),
        help="this node's kubelet, https://<node IP>:10250 (default: $NODE_IP:10250)",
    )
    parser.add_argument("--kubelet-ca", default="", help="CA of the kubelet's serving cert")
    parser.add_argument(
        "--kubelet-insecure-tls",
        action="store_true",
        help="do not verify the kubelet's serving certificate (self-signed kubelet certs)",
    )
    parser.add_argument("--kubeconfig", default="")
    parser.add_argument("--metrics-bind-address", default=":8080")
    parser.add_argument("--health-probe-bind-address", default=":8081")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    """Run the agent until cancelled."""
    settings = parse_settings(
        args.snapshot_registry,
        args.snapshot_registry_auth_file,
        args.snapshot_registry_ca,
        args.snapshot_repository_prefix,
    )
    node = ContainerdNode(Path(args.containerd_socket), ctr=args.ctr)
    memory: MemoryCommitter | None = None
    if args.kubelet_checkpoints_dir:
        url = args.kubelet_url or f"https://{os.environ.get('NODE_IP', '127.0.0.1')}:10250"
        checkpointer = KubeletCheckpointer(
            url,
            node=args.node_name,
            token_file=SERVICE_ACCOUNT_TOKEN,
            context=ssl_context(args.kubelet_ca, insecure=args.kubelet_insecure_tls),
        )
        memory = kubelet_committer(checkpointer, Path(args.kubelet_checkpoints_dir))
    async with ApiClient(load_config(args.kubeconfig or None)) as api:
        manager = Manager(
            api,
            metrics_bind_address=args.metrics_bind_address,
            health_bind_address=args.health_probe_bind_address,
        )
        agent = SnapshotAgent(
            manager.client,
            snapshots=manager.informer(SANDBOX_SNAPSHOTS),
            node_name=args.node_name,
            settings=settings,
            committer=node_committer(node, Path(args.workdir) if args.workdir else None),
            memory=memory,
            workdir=Path(args.workdir) if args.workdir else None,
            recorder=manager.event_recorder(EVENT_REPORTER),
            metrics=SnapshotMetrics(manager.registry),
        )
        ControllerBuilder(manager, CONTROLLER_NAME).for_resource(SANDBOX_SNAPSHOTS).with_workers(
            4
        ).complete(agent)
        await manager.run_until_signal()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and run; 2 on a bad flag value."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = _arguments(argv)
    if not args.node_name:
        print("agent-sandbox-snapshotter: --node-name (or $NODE_NAME) is required", file=sys.stderr)
        return 2
    try:
        asyncio.run(run(args))
    except SettingsError as err:
        print(f"agent-sandbox-snapshotter: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
