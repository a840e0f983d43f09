"""The ``snapshots`` scenario's memory rows: a process holding N MiB, checkpointed and restored.

On a node with containerd 2.3 and CRIU 4.2 (``scripts/setup.sh`` builds both into the test
cache), a Pod of the node's Python image fills a bytearray of N MiB (200 by default) with random
bytes (every page touched, nothing for a compressor to save) and prints a token drawn at its
start and a counter. :func:`~kube_agent_sandbox.extensions.snapshot.checkpoint.checkpoint_container`
has the node's kubelet checkpoint it, as the node agent's ServiceAccount (bound only to its
generated ClusterRole), and pushes the archive to the cluster's TLS registry; then a Pod of
that checkpoint image is timed from create to Running (pull and restore) and must print the
same token with a higher counter.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from benchlib.report import BenchResult
from kube_agent_sandbox.controller import rbac
from kube_agent_sandbox.extensions.snapshot import rbacgen
from kube_agent_sandbox.extensions.snapshot.checkpoint import (
    KubeletCheckpointer,
    checkpoint_container,
    ssl_context,
)
from kube_agent_sandbox.extensions.snapshot.commit import CommitResult, CommitTarget
from kube_agent_sandbox.extensions.snapshot.registry import Credentials, RegistryClient
from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.realnode import RealNodeOptions
from kube_agent_sandbox.testing.registry import RunningRegistry

HOLDER = (
    "import os, secrets, sys, time\n"
    "held = bytearray(os.urandom(int(sys.argv[1]) << 20))\n"
    "token = secrets.token_hex(4)\n"
    "i = 0\n"
    "while True:\n"
    "    print('tick', token, i, flush=True)\n"
    "    i += 1\n"
    "    time.sleep(0.2)\n"
)
AGENT = "bench-snapshotter"


def checkpoint_node_options() -> tuple[RealNodeOptions, str | None]:
    """The node's options for memory rows, and why there are none (None: they can run)."""
    containerd, criu = versions.containerd2_bin_dir(), versions.criu_bin_dir()
    missing = [str(p) for p in (containerd / "containerd", criu / "criu") if not p.is_file()]
    if missing:
        return RealNodeOptions(), (
            f"memory rows not measured: {', '.join(missing)} missing (build --with-containerd2 "
            "--with-criu, as scripts/setup.sh does)"
        )
    return RealNodeOptions(containerd_bin_dir=containerd, criu_bin_dir=criu), None


def last_tick(access: ClusterAccess, namespace: str, pod: str) -> tuple[str, int] | None:
    """The token and counter of the Pod's last ``tick`` line (None before the first)."""
    out = access.kubectl("-n", namespace, "logs", pod, "--tail=1", check=False).stdout.split()
    if len(out) != 3 or out[0] != "tick":
        return None
    return out[1], int(out[2])


def _wait_tick(access: ClusterAccess, namespace: str, pod: str, within: float) -> tuple[str, int]:
    deadline = time.monotonic() + within
    while (tick := last_tick(access, namespace, pod)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Pod {pod} printed no tick within {within:.0f} s")
        time.sleep(0.2)
    return tick


def agent_token(access: ClusterAccess, namespace: str) -> str:
    """A token of a ServiceAccount bound only to the node agent's generated ClusterRole."""
    rules = [r.to_dict() for r in rbac.normalize_rules(rbacgen.RBAC_RULES)]
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT}
    access.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": AGENT},
            "rules": rules,
        }
    )
    account = {"name": AGENT, "namespace": namespace}
    access.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": account})
    access.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": AGENT},
            "roleRef": role,
            "subjects": [{"kind": "ServiceAccount", "name": AGENT, "namespace": namespace}],
        }
    )
    return access.kubectl("-n", namespace, "create", "token", AGENT).stdout.strip()


def kubelet_url(access: ClusterAccess, node_name: str) -> str:
    """The node's kubelet API address."""
    status = json.loads(access.kubectl("get", "node", node_name, "-o", "json").stdout)["status"]
    address = next(a["address"] for a in status["addresses"] if a["type"] == "InternalIP")
    return f"https://{address}:{status['daemonEndpoints']['kubeletEndpoint']['Port']}"


def measure_memory(
    access: ClusterAccess,
    node: Any,
    registry: RunningRegistry,
    pod_manifest: Any,
    namespace: str,
    mib: int,
    result: BenchResult,
    *,
    within: float,
    workdir: Path,
) -> None:
    """The memory rows of one process size; ``pod_manifest(name, code, *args)`` makes a Pod."""
    holder = f"holder-{mib}"
    access.apply(pod_manifest(holder, HOLDER, str(mib)))
    token, before = _wait_tick(access, namespace, holder, within)
    token_file = workdir / "agent-token"
    token_file.write_text(agent_token(access, namespace))
    checkpointer = KubeletCheckpointer(
        kubelet_url(access, node.options.node_name),
        node=node.options.node_name,
        token_file=token_file,
        context=ssl_context("", insecure=True),
    )

    async def snapshot() -> tuple[float, CommitResult]:
        async with RegistryClient(
            registry.url,
            credentials=Credentials(registry.username or "", registry.password or ""),
            ssl_context=registry.ssl_context(),
        ) as client:
            began = time.monotonic()
            done = await checkpoint_container(
                checkpointer,
                node.workdir / "kubelet" / "checkpoints",
                namespace=namespace,
                pod=holder,
                container="main",
                source_image="",
                target=CommitTarget(registry.host, f"bench/{namespace}", f"mem-{mib}"),
                registry=client,
            )
            return time.monotonic() - began, done

    seconds, done = asyncio.run(snapshot())
    result.add(f"{mib} MiB process: checkpoint (kubelet + CRIU)", done.frozen_seconds, "s")
    result.add(f"{mib} MiB process: snapshot (checkpoint + push)", seconds, "s")
    result.add(f"{mib} MiB process: archive", done.layer.size / (1 << 20), "MiB")
    restored = f"restored-mem-{mib}"
    pod = pod_manifest(restored, "")
    container = pod["spec"]["containers"][0]
    container.pop("command")
    container.update(image=done.image, imagePullPolicy="Always")
    began = time.monotonic()
    access.apply(pod)
    again = _wait_tick(access, namespace, restored, within)
    result.add(
        f"{mib} MiB process: restore (pull + restore, to its first tick)",
        time.monotonic() - began,
        "s",
    )
    if again[0] != token or again[1] <= before:
        result.failures.append(
            f"{mib} MiB process: the restored Pod printed {again}, not {token} past {before}"
        )
    result.details.setdefault("memory_images", {})[str(mib)] = done.image
    for name in (holder, restored):
        access.kubectl("-n", namespace, "delete", "pod", name, "--wait=false", check=False)
