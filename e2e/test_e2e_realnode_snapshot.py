"""A filesystem snapshot on the real node: a sandbox writes a file, its writable layer is
committed and pushed to the cluster's registry, and a new Pod started from the pushed image
(pulled by the node's containerd with the registry's credentials) finds the file.

The second test goes through the API: a SandboxSnapshot of the running sandbox becomes Ready
(the SandboxSnapshot controller and the node agent run in-process, the agent committing through
the node's containerd), a claim annotated with it gets a Sandbox from the deployed controller
that reads the file, and deleting the SandboxSnapshot deletes the image from the registry."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ControllerBuilder,
    Manager,
    load_kubeconfig,
)
from kube_agent_sandbox.extensions.claim.fromsnapshot import (
    ANNOTATION_SNAPSHOT,
    ANNOTATION_SNAPSHOT_PULL_SECRET,
)
from kube_agent_sandbox.extensions.snapshot import setup as snapshot_setup
from kube_agent_sandbox.extensions.snapshot.agent import SnapshotAgent, node_committer
from kube_agent_sandbox.extensions.snapshot.commit import CommitTarget, commit_container
from kube_agent_sandbox.extensions.snapshot.containerd import (
    ContainerdNode,
    container_id_from_status,
)
from kube_agent_sandbox.extensions.snapshot.registry import (
    Credentials,
    RegistryClient,
    RegistryError,
)
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.extensions.snapshot.status import split_image
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.workload import SandboxHandle, sandbox_manifest
from kube_agent_sandbox.testing.registry import RunningRegistry
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

WRITER = (
    "import pathlib, time; pathlib.Path('/var/tmp/agent-notes.txt').write_text('kept by the"
    " snapshot'); pathlib.Path('/etc/hostname.bak').write_text('x'); time.sleep(3600)"
)


def _dockerconfigjson(registry: RunningRegistry) -> bytes:
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    return json.dumps({"auths": {registry.host: {"auth": auth}}}).encode()


def _pull_secret(registry: RunningRegistry) -> dict[str, object]:
    config = _dockerconfigjson(registry)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "registry"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config).decode()},
    }


def test_a_new_pod_from_the_snapshot_finds_the_file_the_sandbox_wrote(
    cluster: ClusterAccess,
    namespace: str,
    python_image: str,
    real_node_environment: object,
    oci_registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    node = real_node_environment.node  # type: ignore[attr-defined]
    api = cluster.api_client()
    manifest = sandbox_manifest("writer", image=python_image, command=["python3", "-c", WRITER])
    handle = SandboxHandle.create(api, namespace, manifest)
    handle.wait_condition("Ready")
    pod = handle.pod()
    container_id = container_id_from_status(pod["status"]["containerStatuses"][0]["containerID"])
    assert oci_registry.username is not None
    assert oci_registry.password is not None

    async def commit() -> str:
        async with RegistryClient(
            oci_registry.url,
            credentials=Credentials(oci_registry.username or "", oci_registry.password or ""),
            ssl_context=oci_registry.ssl_context(),
        ) as registry:
            result = await commit_container(
                ContainerdNode(node.containerd.layout.socket),
                container_id,
                CommitTarget(oci_registry.host, f"snapshots/{namespace}", "writer-1"),
                registry,
                comment=f"sandbox {namespace}/writer",
                workdir=tmp_path,
            )
            assert result.layer.entries > 0
            return result.image

    image = asyncio.run(commit())
    # The sandbox keeps running after the commit (it was frozen for the diff only).
    assert handle.pod()["status"]["phase"] == "Running"

    cluster.apply(
        {**_pull_secret(oci_registry), "metadata": {"name": "registry", "namespace": namespace}}
    )
    reader = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reader", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "imagePullSecrets": [{"name": "registry"}],
            "containers": [
                {
                    "name": "reader",
                    "image": image,
                    "imagePullPolicy": "Always",
                    "command": ["cat", "/var/tmp/agent-notes.txt"],
                }
            ],
        },
    }
    cluster.apply(reader)
    wait_for_object(
        api,
        ObjectRef("v1", "Pod", "reader", namespace),
        lambda p: p.get("status", {}).get("phase") == "Succeeded",
        timeout=180,
        what="the Pod from the snapshot to succeed",
    )
    logs = cluster.kubectl("-n", namespace, "logs", "reader")
    assert logs.stdout.strip() == "kept by the snapshot"


async def _run_snapshot_stack(
    kubeconfig: Path,
    node: Any,
    node_name: str,
    settings: RegistrySettings,
    workdir: Path,
    body: Callable[[], Awaitable[None]],
) -> None:
    """The SandboxSnapshot controller and the node agent (committing through the node's real
    containerd), both in-process with an admin client, while ``body`` runs."""
    options = ControllerOptions(
        extensions=True,
        snapshot_registry=settings.url,
        snapshot_registry_auth_file=settings.auth_file,
        snapshot_registry_ca=settings.ca_file,
    )
    async with ApiClient(load_kubeconfig(str(kubeconfig))) as api:
        manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
        snapshot_setup.setup(manager, options)
        agent = SnapshotAgent(
            manager.client,
            snapshots=manager.informer(SANDBOX_SNAPSHOTS),
            node_name=node_name,
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


def test_snapshot_ready_then_a_claim_from_it_sees_the_file_then_deletion_deletes_the_image(
    cluster: ClusterAccess,
    namespace: str,
    python_image: str,
    real_node_environment: object,
    oci_registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    node = real_node_environment.node  # type: ignore[attr-defined]
    api = cluster.api_client()
    manifest = sandbox_manifest("writer", image=python_image, command=["python3", "-c", WRITER])
    handle = SandboxHandle.create(api, namespace, manifest)
    handle.wait_condition("Ready")
    node_name = handle.pod()["spec"]["nodeName"]
    cluster.apply(
        {**_pull_secret(oci_registry), "metadata": {"name": "registry", "namespace": namespace}}
    )
    # The credentials file the controller and the agent get by mounting that Secret.
    auth_file = tmp_path / "registry-auth.json"
    auth_file.write_bytes(_dockerconfigjson(oci_registry))
    settings = RegistrySettings(
        url=oci_registry.url,
        auth_file=str(auth_file),
        ca_file=str(oci_registry.ca_file or ""),
    )
    reader = (
        "import pathlib, time; print(pathlib.Path('/var/tmp/agent-notes.txt').read_text(),"
        " flush=True); time.sleep(3600)"
    )
    template = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "tpl", "namespace": namespace},
        "spec": {
            "podTemplate": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": python_image,
                            "command": ["python3", "-c", reader],
                        }
                    ]
                }
            }
        },
    }
    pool = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "pool", "namespace": namespace},
        "spec": {"replicas": 0, "sandboxTemplateRef": {"name": "tpl"}},
    }
    snapshot = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxSnapshot",
        "metadata": {"name": "snap", "namespace": namespace},
        "spec": {"sandboxName": "writer"},
    }
    claim = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {
            "name": "fork",
            "namespace": namespace,
            "annotations": {
                ANNOTATION_SNAPSHOT: "snap",
                ANNOTATION_SNAPSHOT_PULL_SECRET: "registry",
            },
        },
        "spec": {"warmPoolRef": {"name": "pool"}},
    }
    snapshot_ref = ObjectRef(
        "extensions.agents.x-k8s.io/v1beta1", "SandboxSnapshot", "snap", namespace
    )

    async def scenario() -> None:
        for document in (template, pool, snapshot):
            await asyncio.to_thread(cluster.apply, document)
        ready = await asyncio.to_thread(
            wait_for_object,
            api,
            snapshot_ref,
            lambda s: (s.get("status") or {}).get("phase") in ("Ready", "Failed"),
            timeout=180,
            what="the SandboxSnapshot to finish",
        )
        status = ready["status"]
        assert status["phase"] == "Ready", status
        assert status["digest"].startswith("sha256:")
        assert status["image"].endswith(status["digest"])
        assert status["node"] == node_name
        # The sandbox keeps running after the commit.
        assert handle.pod()["status"]["phase"] == "Running"

        await asyncio.to_thread(cluster.apply, claim)
        await asyncio.to_thread(
            wait_for_object,
            api,
            ObjectRef("agents.x-k8s.io/v1beta1", "Sandbox", "fork", namespace),
            lambda s: any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (s.get("status") or {}).get("conditions") or []
            ),
            timeout=180,
            what="the Sandbox from the snapshot to be Ready",
        )
        logs = await asyncio.to_thread(cluster.kubectl, "-n", namespace, "logs", "fork")
        assert logs.stdout.strip() == "kept by the snapshot"

        _, repository, digest = split_image(status["image"])
        # The finalizer deletes the manifest first; kubectl waits for the object to go.
        await asyncio.to_thread(
            cluster.kubectl, "-n", namespace, "delete", "sandboxsnapshot", "snap", "--wait=true"
        )
        async with RegistryClient(
            oci_registry.url,
            credentials=Credentials(oci_registry.username or "", oci_registry.password or ""),
            ssl_context=oci_registry.ssl_context(),
        ) as registry:
            with pytest.raises(RegistryError) as gone:
                await registry.get_manifest(repository, digest)
        assert gone.value.status == 404

    asyncio.run(
        _run_snapshot_stack(cluster.kubeconfig, node, node_name, settings, tmp_path, scenario)
    )
