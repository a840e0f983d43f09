"""A filesystem snapshot on the real node: a sandbox writes a file, its writable layer is
committed and pushed to the cluster's registry, and a new Pod started from the pushed image
(pulled by the node's containerd with the registry's credentials) finds the file."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from kube_agent_sandbox.extensions.snapshot.commit import CommitTarget, commit_container
from kube_agent_sandbox.extensions.snapshot.containerd import (
    ContainerdNode,
    container_id_from_status,
)
from kube_agent_sandbox.extensions.snapshot.registry import Credentials, RegistryClient
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.workload import SandboxHandle, sandbox_manifest
from kube_agent_sandbox.testing.registry import RunningRegistry
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

WRITER = (
    "import pathlib, time; pathlib.Path('/var/tmp/agent-notes.txt').write_text('kept by the"
    " snapshot'); pathlib.Path('/etc/hostname.bak').write_text('x'); time.sleep(3600)"
)


def _pull_secret(registry: RunningRegistry) -> dict[str, object]:
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    config = json.dumps({"auths": {registry.host: {"auth": auth}}}).encode()
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
