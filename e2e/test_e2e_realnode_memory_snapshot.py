"""A memory snapshot on the real node: a process counter keeps counting in a new Pod.

A sandbox prints a random token (drawn once at its start) and a counter, five times a second.
The node agent's memory path (:func:`checkpoint_container`) has the node's kubelet checkpoint
it, as a ServiceAccount bound only to the node agent's generated ClusterRole (so the one grant,
create on ``nodes/checkpoint``, is what lets it), and pushes the archive to the cluster's
registry as a checkpoint image; the sandbox keeps running. A new Pod whose image is that
checkpoint image, pulled with the registry's credentials, is restored by containerd 2.3 with
CRIU: it prints the same token and a counter past the one at the checkpoint (a cold start
would print a new token from 0).

Needs the node started with containerd 2.3 and CRIU 4.2 (``scripts/setup.sh`` builds both;
the e2e fixture uses them when ``AGENT_SANDBOX_E2E_CHECKPOINT=1``, as ``nox -s e2e`` sets);
skipped otherwise, failed under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from kube_agent_sandbox.extensions.snapshot.checkpoint import (
    KubeletCheckpointer,
    checkpoint_container,
)
from kube_agent_sandbox.extensions.snapshot.commit import CommitResult, CommitTarget
from kube_agent_sandbox.extensions.snapshot.registry import Credentials, RegistryClient
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.registry import RunningRegistry
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

COUNTER = (
    "import secrets, time\n"
    "token = secrets.token_hex(4)\n"
    "i = 0\n"
    "while True:\n"
    "    print(token, i, flush=True)\n"
    "    i += 1\n"
    "    time.sleep(0.2)\n"
)


def _last_line(cluster: ClusterAccess, namespace: str, pod: str) -> tuple[str, int]:
    lines = cluster.kubectl("-n", namespace, "logs", pod, "--tail=1").stdout.split()
    return lines[0], int(lines[1])


def test_a_process_counter_keeps_counting_in_a_pod_from_its_memory_snapshot(
    cluster: ClusterAccess,
    namespace: str,
    python_image: str,
    real_node_environment: object,
    kubelet_checkpointer: KubeletCheckpointer,
    oci_registry: RunningRegistry,
) -> None:
    node = real_node_environment.node  # type: ignore[attr-defined]
    api = cluster.api_client()
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "counter", "namespace": namespace},
            "spec": {
                "containers": [
                    {
                        "name": "counter",
                        "image": python_image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-u", "-c", COUNTER],
                    }
                ]
            },
        }
    )
    wait_for_object(
        api,
        ObjectRef("v1", "Pod", "counter", namespace),
        lambda p: p.get("status", {}).get("phase") == "Running",
        timeout=120,
        what="the counter running",
    )
    time.sleep(1.0)

    async def snapshot() -> CommitResult:
        async with RegistryClient(
            oci_registry.url,
            credentials=Credentials(oci_registry.username or "", oci_registry.password or ""),
            ssl_context=oci_registry.ssl_context(),
        ) as registry:
            return await checkpoint_container(
                kubelet_checkpointer,
                node.workdir / "kubelet" / "checkpoints",
                namespace=namespace,
                pod="counter",
                container="counter",
                source_image=python_image,
                target=CommitTarget(oci_registry.host, f"snapshots/{namespace}", "counter-mem"),
                registry=registry,
            )

    token, before = _last_line(cluster, namespace, "counter")
    result = asyncio.run(snapshot())
    print(f"checkpoint: {result.frozen_seconds:.2f}s, {result.layer.size} bytes")
    # The source keeps running and counting; the node keeps no archive.
    assert _last_line(cluster, namespace, "counter")[0] == token
    assert list((node.workdir / "kubelet" / "checkpoints").glob("*.tar")) == []

    cluster.kubectl(
        "-n",
        namespace,
        "create",
        "secret",
        "docker-registry",
        "registry",
        f"--docker-server={oci_registry.host}",
        f"--docker-username={oci_registry.username}",
        f"--docker-password={oci_registry.password}",
    )
    started = time.monotonic()
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "restored", "namespace": namespace},
            "spec": {
                "imagePullSecrets": [{"name": "registry"}],
                "containers": [
                    {"name": "counter", "image": result.image, "imagePullPolicy": "Always"}
                ],
            },
        }
    )
    wait_for_object(
        api,
        ObjectRef("v1", "Pod", "restored", namespace),
        lambda p: p.get("status", {}).get("phase") == "Running",
        timeout=180,
        what="the Pod from the memory snapshot running",
    )
    print(f"restore to Running: {time.monotonic() - started:.2f}s")
    time.sleep(1.0)
    restored_token, after = _last_line(cluster, namespace, "restored")
    assert restored_token == token  # the same process, not a cold start
    assert after > before  # continued from the checkpoint, taken after `before` was printed
