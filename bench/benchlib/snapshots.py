"""``snapshots``: how long a filesystem snapshot and a start from it take, on the real node.

For each size (``--snapshot-sizes``, MiB; 10 and 500 by default), on the local cluster's real
node (containerd, runc, the cluster's TLS registry with credentials, as the e2e suite runs it):

1. a Pod of the node's Python image writes that many MiB of random bytes (incompressible: the
   worst case for the layer's gzip) under ``/var/tmp`` and stays running;
2. **snapshot**: :func:`~kube_agent_sandbox.extensions.snapshot.commit.commit_container`
   commits its writable layer and pushes it, exactly as the node agent does for a
   SandboxSnapshot (freeze, layer, thaw, push); rows: the whole commit, the part the container
   was frozen, the layer's bytes;
3. **start from it**: a new Pod of the pushed image (``imagePullPolicy: Always``, pulled with
   the registry's credentials) until its container runs and finds the file at its size: what a
   resume or a create from the snapshot adds over a cold start;
4. the same Pod from the base image (already on the node), for the cold start it is compared
   with.

E2B publishes "about 4 seconds per 1 GB of RAM to pause, about 1 second to resume" for its
memory snapshots (Firecracker); the rows above are filesystem snapshots. Where the node can run
containerd 2.3 and CRIU 4.2 (built by ``scripts/setup.sh``), the node runs them and
``memory_snapshots`` adds the rows of a process holding 200 MiB; otherwise a note says what is
missing.

Needs what the e2e suite needs (root, the node's prerequisites: ``nox -s testenv`` builds
them); it does not run a controller.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import memory_snapshots
from benchlib.report import BenchResult
from kube_agent_sandbox.extensions.snapshot.commit import CommitTarget, commit_container
from kube_agent_sandbox.extensions.snapshot.containerd import (
    ContainerdNode,
    container_id_from_status,
)
from kube_agent_sandbox.extensions.snapshot.registry import Credentials, RegistryClient
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.cluster import RealNodeCluster, RealNodeClusterOptions
from kube_agent_sandbox.testing.node.prerequisites import missing_prerequisites
from kube_agent_sandbox.testing.registry import RegistryOptions, RunningRegistry
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

log = logging.getLogger(__name__)

NAMESPACE = "bench-snapshots"
PULL_SECRET = "snapshot-registry"
BLOB = "/var/tmp/bench-blob"
E2B_PAUSE_SECONDS_PER_GIB = 4.0
E2B_RESUME_SECONDS = 1.0
"""E2B's published figures (its persistence guide), for memory snapshots of a VM."""

WRITER = (
    "import os, sys, time\n"
    "size = int(sys.argv[1]) << 20\n"
    f"with open('{BLOB}', 'wb') as out:\n"
    "    for _ in range(size >> 20):\n"
    "        out.write(os.urandom(1 << 20))\n"
    "print('written', flush=True)\n"
    "time.sleep(86400)\n"
)
READER = (
    "import os, time\n"
    f"print('size', os.path.getsize('{BLOB}') if os.path.exists('{BLOB}') else -1, flush=True)\n"
    "time.sleep(86400)\n"
)


@dataclass(frozen=True)
class SnapshotSizes:
    """The scenario's sizes.

    Attributes:
        mib: Filesystem changes to snapshot, in MiB.
        within: Seconds for each wait.
        memory_mib: Memory a checkpointed process holds, in MiB.
    """

    mib: tuple[int, ...] = (10, 500)
    within: float = 600.0
    memory_mib: int = 200


def parse_sizes(text: str, *, flag: str = "--snapshot-sizes") -> tuple[int, ...]:
    """``10,500`` -> ``(10, 500)``; ``flag`` names the option in the error.

    Raises:
        ValueError: Not positive whole MiB.
    """
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(size < 1 for size in sizes):
        raise ValueError(f"{flag} {text!r}: positive MiB, e.g. 10,500")
    return sizes


def _pod(name: str, image: str, code: str, *args: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "imagePullSecrets": [{"name": PULL_SECRET}],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python3", "-c", code, *args],
                }
            ],
        },
    }


def _running(access: ClusterAccess, name: str, within: float) -> dict[str, Any]:
    def running(pod: dict[str, Any]) -> bool:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and "running" in (statuses[0].get("state") or {})

    return wait_for_object(
        access.api_client(),
        ObjectRef("v1", "Pod", name, NAMESPACE),
        running,
        timeout=within,
        what=f"Pod {name} running",
    )


def _log_line(access: ClusterAccess, name: str, prefix: str, within: float) -> str:
    deadline = time.monotonic() + within
    while True:
        out = access.kubectl("-n", NAMESPACE, "logs", name, check=False).stdout
        for line in out.splitlines():
            if line.startswith(prefix):
                return line
        if time.monotonic() > deadline:
            raise TimeoutError(f"Pod {name} printed no {prefix!r} line within {within:.0f} s")
        time.sleep(0.2)


def _start_seconds(
    access: ClusterAccess, name: str, image: str, within: float, *, pull: bool
) -> float:
    """Seconds from creating a reader Pod of ``image`` to its container running."""
    pod = _pod(name, image, READER)
    if pull:
        pod["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    began = time.monotonic()
    access.apply(pod)
    _running(access, name, within)
    return time.monotonic() - began


async def _commit(
    node_socket: Path, container_id: str, registry: RunningRegistry, tag: str, workdir: Path
) -> tuple[float, Any]:
    async with RegistryClient(
        registry.url,
        credentials=Credentials(registry.username or "", registry.password or ""),
        ssl_context=registry.ssl_context(),
    ) as client:
        began = time.monotonic()
        result = await commit_container(
            ContainerdNode(node_socket),
            container_id,
            CommitTarget(registry.host, f"bench/{NAMESPACE}", tag),
            client,
            comment="bench snapshots",
            workdir=workdir,
        )
        return time.monotonic() - began, result


def measure_size(
    access: ClusterAccess,
    socket: Path,
    registry: RunningRegistry,
    base_image: str,
    mib: int,
    result: BenchResult,
    *,
    within: float,
    workdir: Path,
) -> None:
    """The rows of one size (see the module's docstring)."""
    writer = f"writer-{mib}"
    access.apply(_pod(writer, base_image, WRITER, str(mib)))
    pod = _running(access, writer, within)
    _log_line(access, writer, "written", within)
    container_id = container_id_from_status(pod["status"]["containerStatuses"][0]["containerID"])
    seconds, commit = asyncio.run(_commit(socket, container_id, registry, f"mib-{mib}", workdir))
    result.add(f"{mib} MiB: snapshot (commit + push)", seconds, "s")
    result.add(f"{mib} MiB: container frozen", commit.frozen_seconds, "s")
    result.add(f"{mib} MiB: layer", commit.layer.size / (1 << 20), "MiB")
    restored = _start_seconds(access, f"restored-{mib}", commit.image, within, pull=True)
    line = _log_line(access, f"restored-{mib}", "size", within)
    if line != f"size {mib << 20}":
        result.failures.append(f"{mib} MiB: the Pod from the snapshot saw {line!r}")
    cold = _start_seconds(access, f"cold-{mib}", base_image, within, pull=False)
    result.add(f"{mib} MiB: start from the snapshot (pull + run)", restored, "s")
    result.add(f"{mib} MiB: start from the base image (cached)", cold, "s")
    result.details.setdefault("images", {})[str(mib)] = commit.image
    for name in (writer, f"restored-{mib}", f"cold-{mib}"):
        access.kubectl("-n", NAMESPACE, "delete", "pod", name, "--wait=false", check=False)


def run(sizes: SnapshotSizes, *, keep_workdir: bool = False) -> BenchResult:
    """Run the snapshot scenario on a fresh real-node cluster."""
    result = BenchResult("snapshots", params={"mib": list(sizes.mib), "within": sizes.within})
    reasons = missing_prerequisites()
    if reasons:
        result.error = "the real node is unavailable: " + "; ".join(reasons)
        return result
    node_options, no_memory = memory_snapshots.checkpoint_node_options()
    cluster = RealNodeCluster(RealNodeClusterOptions(registry=RegistryOptions(), node=node_options))
    try:
        access = cluster.start()
        registry = cluster.local.registry if cluster.local is not None else None
        image = cluster.node.python_image
        containerd = cluster.node.containerd
        if registry is None or image is None or containerd is None:
            result.error = "the real-node cluster started without a registry, image or containerd"
            return result
        access.kubectl("create", "namespace", NAMESPACE)
        access.apply(registry.pull_secret(PULL_SECRET, NAMESPACE))
        workdir = Path(access.kubeconfig).parent / "snapshot-layers"
        workdir.mkdir(exist_ok=True)
        load_before = os.getloadavg()[0]
        for mib in sizes.mib:
            measure_size(
                access,
                containerd.layout.socket,
                registry,
                image.reference,
                mib,
                result,
                within=sizes.within,
                workdir=workdir,
            )
        if no_memory is None:
            memory_snapshots.measure_memory(
                access,
                cluster.node,
                registry,
                lambda name, code, *args: _pod(name, image.reference, code, *args),
                NAMESPACE,
                sizes.memory_mib,
                result,
                within=sizes.within,
                workdir=workdir,
            )
        else:
            result.notes.append(no_memory)
        result.add("load average (1 min) before", load_before)
        result.add("load average (1 min) after", os.getloadavg()[0])
        _notes(result, sizes.mib)
    finally:
        if not keep_workdir:
            cluster.stop()
    return result


def _notes(result: BenchResult, mib: Sequence[int]) -> None:
    result.notes.append(
        f"{os.cpu_count()} CPUs; random bytes (incompressible) under {BLOB}; the registry runs "
        "on the same machine over TLS with credentials, so the push and pull measure the "
        "commit's and the node's work, not a network"
    )
    result.notes.append(
        f"E2B (published, memory snapshots of a Firecracker VM): pause about "
        f"{E2B_PAUSE_SECONDS_PER_GIB:g} s per GiB of RAM, resume about {E2B_RESUME_SECONDS:g} s. "
        "A filesystem snapshot here costs time by the bytes written, not by memory size; a "
        "start from it is a cold start plus the pull of the new layer"
    )
    result.notes.append(
        "memory rows: the archive is every page the process touched, uncompressed; the node runs "
        "containerd 2.3.7 and CRIU 4.2.1 for the whole scenario when they are built"
    )
