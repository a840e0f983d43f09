"""``pause-resume``: a suspend that keeps the state, and a create from a snapshot, to Ready.

What a user waits for, through the real controller (the core Sandbox controller, the extensions
with the SandboxSnapshot controller and its state keeper, as ``--extensions
--snapshot-registry`` runs them) and the node agent on the local cluster's real node, pushing to
the cluster's TLS registry. Unlike ``snapshots`` (the commit and push alone), every row here is
a round trip through the API server and the controllers.

For each case, ``--pause-repeats`` times, a Sandbox opted in with
``extensions.agents.x-k8s.io/snapshot-on-suspend``:

* ``N MiB files`` (``--pause-sizes``): it writes N MiB of random bytes under ``/var/tmp`` (mode
  ``Filesystem``);
* ``N MiB process`` (``--pause-memory-mib``; where the node runs containerd 2.3 and CRIU 4.2):
  a process holds N MiB of random bytes and prints a token and a counter (mode ``Memory``).

Rows, each min/median/max over the repetitions:

1. **pause**: from ``operatingMode: Suspended`` to the suspend's SandboxSnapshot Ready and the
   Pod gone (and, as a part of it, to the snapshot Ready);
2. **resume**: from ``operatingMode: Running`` to the Sandbox's Ready condition (the new Pod
   runs the snapshot's image, pulled with the registry's credentials); it must find the file at
   its size, or the same process counting on;
3. **create from the snapshot**: from creating a SandboxClaim annotated with the suspend's
   snapshot (``extensions.agents.x-k8s.io/snapshot``) to its Sandbox's Ready condition; the
   same check as the resume.

Needs root and the node's prerequisites, as ``snapshots`` does.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from benchlib import memory_snapshots
from benchlib.report import BenchResult
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.constants import ANNOTATION_SNAPSHOT
from kube_agent_sandbox.extensions.snapshot.agent import MemoryCommitter, kubelet_committer
from kube_agent_sandbox.extensions.snapshot.checkpoint import KubeletCheckpointer, ssl_context
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.cluster import RealNodeCluster, RealNodeClusterOptions
from kube_agent_sandbox.testing.node.prerequisites import missing_prerequisites
from kube_agent_sandbox.testing.node.realnode import RealNode
from kube_agent_sandbox.testing.node.workload import sandbox_manifest
from kube_agent_sandbox.testing.registry import RegistryOptions
from kube_agent_sandbox.testing.snapshot_stack import run_snapshot_stack
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

NAMESPACE = "bench-pause"
PULL_SECRET = "registry"
CRDS = Path(__file__).resolve().parents[2] / "manifests" / "crds"
EXT = "extensions.agents.x-k8s.io/v1beta1"
SANDBOX = "agents.x-k8s.io/v1beta1"
BLOB = "/var/tmp/bench-blob"
# Writes N MiB once; every later life of the container (a resume, a create from the snapshot)
# finds the file and prints its size instead.
FILES = (
    "import os, sys, time\n"
    f"p = '{BLOB}'\n"
    "if os.path.exists(p):\n"
    "    print('size', os.path.getsize(p), flush=True)\n"
    "else:\n"
    "    with open(p, 'wb') as out:\n"
    "        for _ in range(int(sys.argv[1])):\n"
    "            out.write(os.urandom(1 << 20))\n"
    "    print('written', flush=True)\n"
    "time.sleep(86400)\n"
)
E2B_PAUSE_SECONDS_PER_GIB = 4.0
E2B_RESUME_SECONDS = 1.0
"""E2B's published figures (its persistence guide), for memory snapshots of a VM."""


@dataclass(frozen=True)
class PauseSizes:
    """The scenario's sizes.

    Attributes:
        mib: Filesystem changes, in MiB, each a case.
        memory_mib: Memory a process holds, in MiB (0: no memory case).
        repeats: Suspend/resume/create rounds of each case.
        within: Seconds for each wait.
    """

    mib: tuple[int, ...] = (10,)
    memory_mib: int = 200
    repeats: int = 3
    within: float = 600.0


@dataclass(frozen=True)
class Case:
    """One kind of Sandbox state to keep.

    Attributes:
        label: How its rows start (``10 MiB files``).
        mode: The ``snapshot-on-suspend`` opt-in.
        program: The container's Python program.
        arg: Its one argument (the MiB).
    """

    label: str
    mode: str
    program: str
    arg: str

    @property
    def slug(self) -> str:
        """Object-name prefix of the case (``files-10``, ``memory-200``)."""
        kind = "files" if self.mode == k.MODE_FILESYSTEM else "memory"
        return f"{kind}-{self.arg}"


def cases(sizes: PauseSizes, *, memory: bool) -> list[Case]:
    """The cases to run: each filesystem size, then the process where the node can checkpoint."""
    found = [Case(f"{mib} MiB files", k.MODE_FILESYSTEM, FILES, str(mib)) for mib in sizes.mib]
    if memory and sizes.memory_mib:
        found.append(
            Case(
                f"{sizes.memory_mib} MiB process",
                k.MODE_MEMORY,
                memory_snapshots.HOLDER,
                str(sizes.memory_mib),
            )
        )
    return found


@dataclass
class Samples:
    """The seconds measured for one case, one list per row."""

    saved: list[float] = field(default_factory=list)
    pause: list[float] = field(default_factory=list)
    resume: list[float] = field(default_factory=list)
    create: list[float] = field(default_factory=list)


ROWS = (
    ("pause (Suspended -> snapshot Ready)", "saved"),
    ("pause (Suspended -> snapshot Ready, Pod gone)", "pause"),
    ("resume (Running -> Ready)", "resume"),
    ("create from the snapshot (claim -> Ready)", "create"),
)


def add_rows(result: BenchResult, label: str, samples: Samples) -> None:
    """Min, median and max rows of each measured list (none for an empty one)."""
    for row, attr in ROWS:
        values: list[float] = getattr(samples, attr)
        if not values:
            continue
        for stat, value in (
            ("min", min(values)),
            ("median", statistics.median(values)),
            ("max", max(values)),
        ):
            result.add(f"{label}: {row} {stat}", value, "s")


def check_output(case: Case, line: str, tick: tuple[str, int] | None) -> str | None:
    """Why the Sandbox's output after a resume or create is wrong (None: it kept the state).

    Args:
        case: The case.
        line: The container's last line of output.
        tick: For a memory case, ``(token, counter)`` from before the suspend.
    """
    if case.mode == k.MODE_FILESYSTEM:
        expected = f"size {int(case.arg) << 20}"
        return None if line == expected else f"printed {line!r}, not {expected!r}"
    words = line.split()
    if tick is None or len(words) != 3 or words[0] != "tick" or not words[2].isdigit():
        return f"printed {line!r}, not a tick"
    if words[1] != tick[0] or int(words[2]) <= tick[1]:
        return f"printed {line!r}, not token {tick[0]} past {tick[1]} (a cold start?)"
    return None


def _ready(obj: dict[str, Any]) -> bool:
    return any(
        cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in (obj.get("status") or {}).get("conditions") or []
    )


@dataclass
class Bench:
    """The cluster, and the round trips of one case."""

    access: ClusterAccess
    image: str
    within: float

    def wait(self, ref: ObjectRef, probe: Callable[[dict[str, Any]], bool], what: str) -> Any:
        return wait_for_object(self.access.api_client(), ref, probe, timeout=self.within, what=what)

    def pod_gone(self, name: str) -> None:
        pods = client.CoreV1Api(self.access.api_client())
        deadline = time.monotonic() + self.within
        while True:
            try:
                pods.read_namespaced_pod(name, NAMESPACE)
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"Pod {name} still there after {self.within:.0f} s")
            time.sleep(0.05)

    def last_line(self, pod: str, accept: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + self.within
        while True:
            out = self.access.kubectl(
                "-n", NAMESPACE, "logs", pod, "--tail=1", check=False
            ).stdout.strip()
            if accept(out):
                return str(out)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: Pod {pod}'s last line is {out!r}")
            time.sleep(0.2)

    def set_mode(self, name: str, mode: str) -> None:
        patch = json.dumps({"spec": {"operatingMode": mode}})
        self.access.kubectl("-n", NAMESPACE, "patch", "sandbox", name, "--type=merge", "-p", patch)

    def template(self, case: Case) -> None:
        """The template and empty warm pool a claim from this case's snapshots names."""
        container = {
            "name": "main",
            "image": self.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-u", "-c", case.program, case.arg],
        }
        self.access.apply(
            {
                "apiVersion": EXT,
                "kind": "SandboxTemplate",
                "metadata": {"name": case.slug, "namespace": NAMESPACE},
                "spec": {"podTemplate": {"spec": {"containers": [container]}}},
            }
        )
        self.access.apply(
            {
                "apiVersion": EXT,
                "kind": "SandboxWarmPool",
                "metadata": {"name": case.slug, "namespace": NAMESPACE},
                "spec": {"replicas": 0, "sandboxTemplateRef": {"name": case.slug}},
            }
        )

    def round(self, case: Case, index: int, samples: Samples, failures: list[str]) -> None:
        """One suspend, resume and create from the snapshot of ``case``."""
        name = f"{case.slug}-{index}"
        manifest = sandbox_manifest(
            name, image=self.image, command=["python3", "-u", "-c", case.program, case.arg]
        )
        manifest["metadata"]["namespace"] = NAMESPACE
        # As a template's Pods (the claims') are: a memory snapshot restores only into a Pod
        # with the same mounts, and the ServiceAccount token is one.
        manifest["spec"]["podTemplate"]["spec"]["automountServiceAccountToken"] = False
        manifest["metadata"]["annotations"] = {
            k.ANNOTATION_SNAPSHOT_ON_SUSPEND: case.mode,
            k.ANNOTATION_SNAPSHOT_PULL_SECRET: PULL_SECRET,
        }
        self.access.apply(manifest)
        self.wait(ObjectRef(SANDBOX, "Sandbox", name, NAMESPACE), _ready, "Ready")
        tick: tuple[str, int] | None = None
        if case.mode == k.MODE_FILESYSTEM:
            self.last_line(name, lambda out: out == "written", "the files written")
        else:
            self.last_line(name, lambda out: out.startswith("tick "), "the process ticking")
            tick = memory_snapshots.last_tick(self.access, NAMESPACE, name)

        began = time.monotonic()
        self.set_mode(name, "Suspended")
        snapshot = f"{name}-suspend-2"  # generation 2: the suspend is the first spec change
        done = self.wait(
            ObjectRef(EXT, "SandboxSnapshot", snapshot, NAMESPACE),
            lambda s: (s.get("status") or {}).get("phase") in ("Ready", "Failed"),
            "the suspend's snapshot finished",
        )
        saved = time.monotonic() - began
        if done["status"]["phase"] != "Ready" or done["spec"].get("mode") != case.mode:
            failures.append(f"{name}: the suspend's snapshot {done['spec']} {done['status']}")
            return
        self.pod_gone(name)
        samples.saved.append(saved)
        samples.pause.append(time.monotonic() - began)

        began = time.monotonic()
        self.set_mode(name, "Running")
        self.wait(ObjectRef(SANDBOX, "Sandbox", name, NAMESPACE), _ready, "Ready after resume")
        samples.resume.append(time.monotonic() - began)
        self._check(case, name, tick, "resume", failures)

        claim = f"{name}-fork"
        try:
            began = time.monotonic()
            self.access.apply(self._claim(case, claim, snapshot))
            self.wait(ObjectRef(SANDBOX, "Sandbox", claim, NAMESPACE), _ready, "Ready from it")
            samples.create.append(time.monotonic() - began)
            self._check(case, claim, tick, "create from the snapshot", failures)
        finally:
            for kind, obj in (("sandboxclaim", claim), ("sandbox", name)):
                self.access.kubectl("-n", NAMESPACE, "delete", kind, obj, "--wait=false")

    @staticmethod
    def _claim(case: Case, name: str, snapshot: str) -> dict[str, Any]:
        """A claim of the case's (empty) warm pool that starts from ``snapshot``."""
        return {
            "apiVersion": EXT,
            "kind": "SandboxClaim",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "annotations": {
                    ANNOTATION_SNAPSHOT: snapshot,
                    k.ANNOTATION_SNAPSHOT_PULL_SECRET: PULL_SECRET,
                },
            },
            "spec": {"warmPoolRef": {"name": case.slug}},
        }

    def _check(
        self, case: Case, pod: str, tick: tuple[str, int] | None, what: str, failures: list[str]
    ) -> None:
        expected = "size " if case.mode == k.MODE_FILESYSTEM else "tick "
        try:
            line = self.last_line(pod, lambda out: out.startswith(expected), what)
        except TimeoutError as err:
            failures.append(f"{pod}: {err}")
            return
        problem = check_output(case, line, tick)
        if problem:
            failures.append(f"{pod} after the {what}: {problem}")


def _memory_committer(access: ClusterAccess, node: RealNode, workdir: Path) -> MemoryCommitter:
    """The node agent's kubelet checkpoints, as its ServiceAccount."""
    token_file = workdir / "agent-token"
    token_file.write_text(memory_snapshots.agent_token(access, NAMESPACE))
    checkpointer = KubeletCheckpointer(
        memory_snapshots.kubelet_url(access, node.options.node_name),
        node=node.options.node_name,
        token_file=token_file,
        context=ssl_context("", insecure=True),
    )
    return kubelet_committer(checkpointer, node.workdir / "kubelet" / "checkpoints")


def run(sizes: PauseSizes, *, keep_workdir: bool = False) -> BenchResult:
    """Run the scenario on a fresh real-node cluster."""
    result = BenchResult(
        "pause-resume",
        params={
            "mib": list(sizes.mib),
            "memory_mib": sizes.memory_mib,
            "repeats": sizes.repeats,
            "within": sizes.within,
        },
    )
    reasons = missing_prerequisites()
    if reasons:
        result.error = "the real node is unavailable: " + "; ".join(reasons)
        return result
    node_options, no_memory = memory_snapshots.checkpoint_node_options()
    cluster = RealNodeCluster(
        RealNodeClusterOptions(crds=[CRDS], registry=RegistryOptions(), node=node_options)
    )
    try:
        access = cluster.start()
        registry = cluster.local.registry if cluster.local is not None else None
        image = cluster.node.python_image
        if registry is None or image is None or cluster.node.containerd is None:
            result.error = "the real-node cluster started without a registry, image or containerd"
            return result
        access.kubectl("create", "namespace", NAMESPACE)
        workdir = Path(access.kubeconfig).parent / "pause-resume"
        workdir.mkdir(exist_ok=True)
        auth_file = workdir / "registry-auth.json"
        auth_file.write_bytes(registry.dockerconfigjson())
        settings = RegistrySettings(
            url=registry.url, auth_file=str(auth_file), ca_file=str(registry.ca_file or "")
        )
        access.apply(registry.pull_secret(PULL_SECRET, NAMESPACE))
        memory = None if no_memory else _memory_committer(access, cluster.node, workdir)
        if no_memory:
            result.notes.append(no_memory)
        bench = Bench(access, image.reference, sizes.within)
        load_before = os.getloadavg()[0]

        async def body() -> None:
            for case in cases(sizes, memory=memory is not None):
                await asyncio.to_thread(bench.template, case)
                samples = Samples()
                for index in range(sizes.repeats):
                    try:
                        await asyncio.to_thread(bench.round, case, index, samples, result.failures)
                    except TimeoutError as err:  # the next round may still work: go on
                        result.failures.append(f"{case.label}, round {index + 1}: {err}")
                add_rows(result, case.label, samples)
                result.details.setdefault("samples", {})[case.label] = vars(samples)
            # The snapshots' finalizer needs this process's controller: delete them here.
            await asyncio.to_thread(
                access.kubectl,
                "-n", NAMESPACE, "delete", "sandboxsnapshots", "--all", "--wait=true",
            )  # fmt: skip

        asyncio.run(
            run_snapshot_stack(
                Path(access.kubeconfig),
                cluster.node,
                NAMESPACE,
                settings,
                workdir,
                body,
                memory=memory,
                claims=True,  # the creates from a snapshot are claims
            )
        )
        result.add("load average (1 min) before", load_before)
        result.add("load average (1 min) after", os.getloadavg()[0])
        _notes(result)
    finally:
        if not keep_workdir:
            cluster.stop()
    return result


def _notes(result: BenchResult) -> None:
    result.notes.append(
        f"{os.cpu_count()} CPUs; one real node; the controller, the extensions and the node "
        "agent run in the bench's process; the registry runs on the same machine over TLS with "
        "credentials, so a push and a pull measure the work, not a network"
    )
    result.notes.append(
        f"E2B (published, memory snapshots of a Firecracker VM): pause about "
        f"{E2B_PAUSE_SECONDS_PER_GIB:g} s per GiB of RAM, resume about {E2B_RESUME_SECONDS:g} s"
    )
