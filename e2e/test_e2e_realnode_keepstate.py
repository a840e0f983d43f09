"""A suspend that keeps the filesystem, on the real node: a Sandbox opted in with
``snapshot-on-suspend: Filesystem`` writes a file outside any volume, is suspended (its container
is committed through the node's containerd and pushed to the cluster's registry before the Pod
goes), and the Pod of the resume, pulled from that registry, finds the file.

The core Sandbox controller must run in the same process as the state keeper (that is the rule
that keeps a suspend from waiting for nobody), and the deployed controller has no registry, so
it is scaled to zero while this test runs the core controller, the SandboxSnapshot controller,
the keeper and the node agent in-process, as ``--extensions --snapshot-registry`` would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ControllerBuilder,
    Manager,
    load_kubeconfig,
)
from kube_agent_sandbox.controller.sandbox.setup import setup as sandbox_setup
from kube_agent_sandbox.extensions.snapshot import setup as snapshot_setup
from kube_agent_sandbox.extensions.snapshot.agent import SnapshotAgent, node_committer
from kube_agent_sandbox.extensions.snapshot.containerd import ContainerdNode
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.cluster import CONTROLLER_DEPLOYMENT, CONTROLLER_NAMESPACE
from kube_agent_sandbox.testing.node.workload import sandbox_manifest
from kube_agent_sandbox.testing.registry import RunningRegistry
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

NAME = "keeper"
SNAP = f"{NAME}-suspend-2"  # generation 2: the suspend is the first spec change
# Prints what an earlier life of the container left outside volumes, then leaves its own mark.
PROGRAM = (
    "import pathlib, time; p = pathlib.Path('/var/tmp/agent-notes.txt');"
    " print(p.read_text() if p.exists() else 'fresh', flush=True);"
    " p.write_text('kept across the suspend'); time.sleep(3600)"
)
TIMEOUT = 180.0


def _dockerconfigjson(registry: RunningRegistry) -> bytes:
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    return json.dumps({"auths": {registry.host: {"auth": auth}}}).encode()


def _scale_deployed_controller(cluster: ClusterAccess, replicas: int) -> None:
    cluster.kubectl(
        "-n", CONTROLLER_NAMESPACE, "scale", f"deployment/{CONTROLLER_DEPLOYMENT}",
        f"--replicas={replicas}",
    )  # fmt: skip
    if replicas:
        cluster.kubectl(
            "-n", CONTROLLER_NAMESPACE, "rollout", "status",
            f"deployment/{CONTROLLER_DEPLOYMENT}", f"--timeout={int(TIMEOUT)}s",
            timeout=TIMEOUT + 30,
        )  # fmt: skip
        return
    pods = client.CoreV1Api(cluster.api_client())
    deadline = time.monotonic() + TIMEOUT
    while pods.list_namespaced_pod(
        CONTROLLER_NAMESPACE, label_selector=f"app={CONTROLLER_DEPLOYMENT}"
    ).items:
        assert time.monotonic() < deadline, "the deployed controller did not stop"
        time.sleep(1)


@pytest.fixture
def deployed_controller_stopped(
    cluster: ClusterAccess, real_node_environment: object
) -> Iterator[None]:
    _scale_deployed_controller(cluster, 0)
    try:
        yield
    finally:
        _scale_deployed_controller(cluster, 1)


async def _run_stack(
    kubeconfig: Path,
    node: Any,
    namespace: str,
    settings: RegistrySettings,
    workdir: Path,
    body: Callable[[], Awaitable[None]],
) -> None:
    options = ControllerOptions(
        extensions=True,
        snapshot_registry=settings.url,
        snapshot_registry_auth_file=settings.auth_file,
        snapshot_registry_ca=settings.ca_file,
    )
    async with ApiClient(load_kubeconfig(str(kubeconfig))) as api:
        manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
        sandbox_setup(manager, options, namespace=namespace)
        snapshot_setup.setup(manager, options, namespace=namespace)
        agent = SnapshotAgent(
            manager.client,
            snapshots=manager.informer(SANDBOX_SNAPSHOTS, namespace=namespace),
            node_name=node.options.node_name,
            settings=settings,
            committer=node_committer(ContainerdNode(node.containerd.layout.socket), workdir),
        )
        ControllerBuilder(manager, "snapshotter").for_resource(SANDBOX_SNAPSHOTS).with_workers(
            2
        ).complete(agent)
        task = asyncio.create_task(manager.run())
        try:
            await body()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def test_a_suspend_keeps_the_file_and_the_resume_finds_it(
    cluster: ClusterAccess,
    namespace: str,
    python_image: str,
    real_node_environment: object,
    deployed_controller_stopped: None,
    oci_registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    node = real_node_environment.node  # type: ignore[attr-defined]
    api = cluster.api_client()
    auth_file = tmp_path / "registry-auth.json"
    auth_file.write_bytes(_dockerconfigjson(oci_registry))
    settings = RegistrySettings(
        url=oci_registry.url, auth_file=str(auth_file), ca_file=str(oci_registry.ca_file or "")
    )
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "registry", "namespace": namespace},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {
                ".dockerconfigjson": base64.b64encode(_dockerconfigjson(oci_registry)).decode()
            },
        }
    )
    manifest = sandbox_manifest(NAME, image=python_image, command=["python3", "-c", PROGRAM])
    manifest["metadata"]["namespace"] = namespace
    manifest["metadata"]["annotations"] = {
        k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_FILESYSTEM,
        k.ANNOTATION_SNAPSHOT_PULL_SECRET: "registry",
    }
    sandbox_ref = ObjectRef("agents.x-k8s.io/v1beta1", "Sandbox", NAME, namespace)
    pod_ref = ObjectRef("v1", "Pod", NAME, namespace)

    def ready(s: dict[str, Any]) -> bool:
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (s.get("status") or {}).get("conditions") or []
        )

    async def wait(ref: ObjectRef, probe: Callable[[dict[str, Any]], bool], what: str) -> Any:
        return await asyncio.to_thread(wait_for_object, api, ref, probe, timeout=TIMEOUT, what=what)

    async def logs() -> str:
        """The container's output ("" while it is still being created or pulled)."""
        done = await asyncio.to_thread(cluster.kubectl, "-n", namespace, "logs", NAME, check=False)
        return str(done.stdout).strip()

    async def set_mode(mode: str) -> None:
        patch = json.dumps({"spec": {"operatingMode": mode}})
        await asyncio.to_thread(
            cluster.kubectl, "-n", namespace, "patch", "sandbox", NAME, "--type=merge", "-p", patch
        )

    async def scenario() -> None:
        await asyncio.to_thread(cluster.apply, manifest)
        await wait(sandbox_ref, ready, "the Sandbox Ready")
        first = await wait(pod_ref, lambda p: bool(p.get("status", {}).get("podIP")), "its Pod")
        for _ in range(60):
            if await logs() == "fresh":
                break
            await asyncio.sleep(1)
        assert await logs() == "fresh"

        await set_mode("Suspended")
        snapshot = await wait(
            ObjectRef("extensions.agents.x-k8s.io/v1beta1", "SandboxSnapshot", SNAP, namespace),
            lambda s: (s.get("status") or {}).get("phase") in ("Ready", "Failed"),
            "the suspend's SandboxSnapshot to finish",
        )
        assert snapshot["status"]["phase"] == "Ready", snapshot["status"]

        def new_and_running(p: dict[str, Any]) -> bool:
            running = (p.get("status") or {}).get("phase") == "Running"
            return running and p["metadata"]["uid"] != first["metadata"]["uid"]

        await set_mode("Running")
        await wait(sandbox_ref, ready, "the resumed Sandbox Ready")
        resumed = await wait(pod_ref, new_and_running, "the Pod of the resume running")
        assert resumed["spec"]["containers"][0]["image"] == snapshot["status"]["image"]
        for _ in range(90):
            if await logs() == "kept across the suspend":
                break
            await asyncio.sleep(1)
        assert await logs() == "kept across the suspend"

        # Leave nothing behind: the snapshot's finalizer needs this process's controller.
        await asyncio.to_thread(
            cluster.kubectl, "-n", namespace, "delete", "sandbox", NAME, "--wait=true"
        )
        await asyncio.to_thread(
            cluster.kubectl, "-n", namespace, "delete", "sandboxsnapshot", SNAP, "--wait=true"
        )

    asyncio.run(_run_stack(cluster.kubeconfig, node, namespace, settings, tmp_path, scenario))
