"""Helpers of the SandboxSnapshot integration tests: the namespace API with snapshot waits, and
the node agent's committer for a cluster without containerd (kwok).

The committer is the one part that differs from a real node: instead of reading a container's
overlay upper directory through containerd, it writes a layer from a folder of files and pushes
it, with the same image builder and registry client, to the same real registry.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from extensions_runner import start_extensions_controller

from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ControllerBuilder,
    Manager,
    Obj,
    load_kubeconfig,
)
from kube_agent_sandbox.extensions.snapshot.agent import (
    EVENT_REPORTER,
    Committer,
    MemoryCommitter,
    SnapshotAgent,
)
from kube_agent_sandbox.extensions.snapshot.commit import CommitResult, CommitTarget
from kube_agent_sandbox.extensions.snapshot.image import (
    OCI_CONFIG,
    OCI_MANIFEST,
    build_snapshot_image,
)
from kube_agent_sandbox.extensions.snapshot.layer import write_layer
from kube_agent_sandbox.extensions.snapshot.registry import RegistryClient, sha256_digest
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.nsapi import NamespaceApi
from kube_agent_sandbox.testing.registry import RunningRegistry

SECRET = "registry"
"""The namespace's dockerconfigjson Secret of the registry."""


def dockerconfig(registry: RunningRegistry, password: str) -> dict[str, Any]:
    auth = base64.b64encode(f"{registry.username}:{password}".encode()).decode()
    config = json.dumps({"auths": {registry.host: {"auth": auth}}}).encode()
    return {
        "metadata": {"name": SECRET},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config).decode()},
    }


def auth_file(path: Path, registry: RunningRegistry, password: str) -> str:
    """Write the registry's credentials as the kubelet mounts a dockerconfigjson Secret."""
    path.write_bytes(
        base64.b64decode(dockerconfig(registry, password)["data"][".dockerconfigjson"])
    )
    return str(path)


def start_snapshot_controller(
    runner: ControllerRunner,
    request: pytest.FixtureRequest,
    namespace: str,
    settings: RegistrySettings,
    *,
    commit_timeout: float = 600.0,
    names: tuple[str, ...] = ("snapshot",),
) -> None:
    options = ControllerOptions(
        extensions=True,
        snapshot_registry=settings.url,
        snapshot_registry_auth_file=settings.auth_file,
        snapshot_registry_ca=settings.ca_file,
        snapshot_commit_timeout=commit_timeout,
    )
    start_extensions_controller(
        runner,
        rootpath=request.config.rootpath,
        namespace=namespace,
        options=options,
        names=names,
    )


@contextlib.asynccontextmanager
async def running_agent(
    cluster: Any,
    namespace: str,
    node: str,
    settings: RegistrySettings,
    committer: Committer,
    memory: MemoryCommitter | None = None,
    workdir: Path | None = None,
) -> AsyncIterator[None]:
    """The node agent of ``node`` (informer, queue, status writes and Events as in the DaemonSet);
    ``memory``: its Memory snapshots (None: as without ``--kubelet-checkpoints-dir``);
    ``workdir``: its ``--workdir``."""
    async with ApiClient(load_kubeconfig(str(cluster.kubeconfig))) as api:
        manager = Manager(
            api, metrics_bind_address="0", health_bind_address="0", namespace=namespace
        )
        agent = SnapshotAgent(
            manager.client,
            snapshots=manager.informer(SANDBOX_SNAPSHOTS),
            node_name=node,
            settings=settings,
            committer=committer,
            memory=memory,
            workdir=workdir,
            recorder=manager.event_recorder(EVENT_REPORTER),
        )
        ControllerBuilder(manager, "snapshotter").for_resource(SANDBOX_SNAPSHOTS).with_workers(
            4
        ).complete(agent)
        task = asyncio.create_task(manager.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


_EMPTY_CONFIG = json.dumps(
    {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
).encode()


class SnapshotEnv(NamespaceApi):
    """Sandboxes, snapshots and their waits."""

    async def running_sandbox(
        self,
        name: str,
        annotations: dict[str, str] | None = None,
        node_selector: dict[str, str] | None = None,
    ) -> Obj:
        """A Ready Sandbox whose Pod reports a containerd container ID (as a kubelet would);
        ``node_selector`` pins its Pod to chosen nodes."""
        pod_spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
        if node_selector:
            pod_spec["nodeSelector"] = node_selector
        await self.create(
            SANDBOXES,
            {
                "metadata": {"name": name, "annotations": annotations or {}},
                "spec": {"podTemplate": {"spec": pod_spec}},
            },
        )

        async def pod_running() -> Obj | None:
            pod = await self.get(PODS, name)
            statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
            return pod if statuses and statuses[0].get("state", {}).get("running") else None

        pod = await self.until(pod_running, f"the Pod of {name} running")
        return await self.report_container(pod)

    async def report_container(self, pod: Obj) -> Obj:
        """Give the Pod's running container a containerd ID, as a kubelet would."""
        name = pod["metadata"]["name"]
        statuses = pod["status"]["containerStatuses"]
        statuses[0]["containerID"] = f"containerd://{secrets.token_hex(32)}"
        await self.client.patch(
            PODS,
            self.namespace,
            name,
            {"status": {"containerStatuses": statuses}},
            subresource="status",
        )
        return pod

    async def snapshot(self, name: str, sandbox: str, **spec: str) -> Obj:
        return await self.create(
            SANDBOX_SNAPSHOTS,
            {"metadata": {"name": name}, "spec": {"sandboxName": sandbox, **spec}},
        )

    async def until_phase(self, name: str, phase: str) -> Obj:
        async def probe() -> Obj | None:
            obj = await self.get(SANDBOX_SNAPSHOTS, name)
            return obj if ((obj or {}).get("status") or {}).get("phase") == phase else None

        return await self.until(probe, f"snapshot {name} {phase}")

    async def until_condition(self, name: str, type_: str, reason: str) -> Obj:
        async def probe() -> Obj | None:
            obj = await self.get(SANDBOX_SNAPSHOTS, name)
            for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
                if cond.get("type") == type_ and cond.get("reason") == reason:
                    return obj
            return None

        return await self.until(probe, f"snapshot {name} {type_} reason {reason}")


@dataclass
class FolderCommitter:
    """Commits a folder of files instead of a container (kwok has none); records overlaps.

    Attributes:
        root: Where the folders (the containers' writes) go.
        workdir: Where the layer file is written while pushed, in a temporary folder removed
            after, as the agent's ``--workdir`` (``root`` when None).
        payload: Bytes of random data (gzip cannot shrink it) added to the container's writes.
        gate: Awaited before returning the result, when set (a test holds the commit there).
        running: Container IDs being committed now.
        overlapped: Set when two commits of one container ran at once.
    """

    root: Path
    workdir: Path | None = None
    payload: int = 0
    gate: asyncio.Event | None = None
    running: set[str] = field(default_factory=set)
    overlapped: bool = False

    async def __call__(
        self, container_id: str, target: CommitTarget, registry: RegistryClient, *, comment: str
    ) -> CommitResult:
        if container_id in self.running:
            self.overlapped = True
        self.running.add(container_id)
        try:
            return await self._commit(container_id, target, registry, comment)
        finally:
            self.running.discard(container_id)

    async def _commit(
        self, container_id: str, target: CommitTarget, registry: RegistryClient, comment: str
    ) -> CommitResult:
        tree = self.root / secrets.token_hex(4)
        (tree / "var/tmp").mkdir(parents=True)
        (tree / "var/tmp/agent-notes.txt").write_text(f"written in {container_id[:12]}")
        if self.payload:
            (tree / "var/tmp/data.bin").write_bytes(os.urandom(self.payload))
        with tempfile.TemporaryDirectory(prefix="snapshot-", dir=self.workdir or self.root) as tmp:
            return await self._push(tree, Path(tmp) / "layer.tar.gz", target, registry, comment)

    async def _push(
        self, tree: Path, blob: Path, target: CommitTarget, registry: RegistryClient, comment: str
    ) -> CommitResult:
        with blob.open("wb") as out:
            layer = write_layer(tree, out)
        base = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": OCI_CONFIG,
                "digest": sha256_digest(_EMPTY_CONFIG),
                "size": len(_EMPTY_CONFIG),
            },
            "layers": [],
        }
        image = build_snapshot_image(base, _EMPTY_CONFIG, layer, comment=comment)
        await registry.push_blob(target.repository, layer.digest, blob)
        await registry.push_blob(target.repository, image.config_digest, image.config)
        digest = await registry.put_manifest(
            target.repository, target.tag, image.manifest, image.media_type
        )
        # Give a concurrent commit of the same container the chance to overlap, if allowed.
        await asyncio.sleep(0)
        if self.gate is not None:
            await self.gate.wait()
        return CommitResult(
            image=target.reference(digest),
            digest=digest,
            layer=layer,
            base_image="busybox",
            frozen_seconds=0.0,
        )
