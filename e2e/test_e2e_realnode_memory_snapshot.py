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
import json
import time
from pathlib import Path

import pytest

from kube_agent_sandbox.controller import rbac
from kube_agent_sandbox.extensions.snapshot import rbacgen
from kube_agent_sandbox.extensions.snapshot.checkpoint import (
    KubeletCheckpointer,
    checkpoint_container,
    ssl_context,
)
from kube_agent_sandbox.extensions.snapshot.commit import CommitResult, CommitTarget
from kube_agent_sandbox.extensions.snapshot.registry import Credentials, RegistryClient
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.plugin import unavailable
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


def _agent_token(cluster: ClusterAccess, namespace: str, tmp_path: Path) -> Path:
    """A token of a ServiceAccount bound only to the node agent's generated ClusterRole."""
    role = f"snapshotter-{namespace}"
    rules = [r.to_dict() for r in rbac.normalize_rules(rbacgen.RBAC_RULES)]
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": rules,
        }
    )
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "snapshotter", "namespace": namespace},
        }
    )
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "snapshotter", "namespace": namespace}],
        }
    )
    token = cluster.kubectl("-n", namespace, "create", "token", "snapshotter").stdout.strip()
    path = tmp_path / "token"
    path.write_text(token)
    return path


def test_a_process_counter_keeps_counting_in_a_pod_from_its_memory_snapshot(
    cluster: ClusterAccess,
    namespace: str,
    python_image: str,
    real_node_environment: object,
    oci_registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    node = real_node_environment.node  # type: ignore[attr-defined]
    if node.options.criu_bin_dir is None:
        unavailable("the node runs without containerd 2.3 and CRIU: AGENT_SANDBOX_E2E_CHECKPOINT=1")
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
    node_obj = cluster.kubectl("get", "node", node.options.node_name, "-o", "json").stdout
    status = json.loads(node_obj)["status"]
    address = next(a["address"] for a in status["addresses"] if a["type"] == "InternalIP")
    port = status["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    checkpointer = KubeletCheckpointer(
        f"https://{address}:{port}",
        node=node.options.node_name,
        token_file=_agent_token(cluster, namespace, tmp_path),
        context=ssl_context("", insecure=True),
    )

    async def snapshot() -> CommitResult:
        async with RegistryClient(
            oci_registry.url,
            credentials=Credentials(oci_registry.username or "", oci_registry.password or ""),
            ssl_context=oci_registry.ssl_context(),
        ) as registry:
            return await checkpoint_container(
                checkpointer,
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
