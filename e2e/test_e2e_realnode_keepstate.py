"""A suspend that keeps the state, on the real node.

Filesystem: a Sandbox opted in with ``snapshot-on-suspend: Filesystem`` writes a file outside
any volume, is suspended (its container is committed through the node's containerd and pushed
to the cluster's registry before the Pod goes), and the Pod of the resume, pulled from that
registry, finds the file.

Memory: a Sandbox opted in with ``snapshot-on-suspend: Memory`` runs a counter that prints a
random token drawn at its start; each suspend checkpoints it through the node's kubelet
(containerd 2.3 + CRIU, as the node agent's ServiceAccount) and the Pod of the resume, running
the checkpoint image, prints the same token with a higher count, twice in a row. The same
through the E2B gateway with ``--pause-keeps-memory`` and the unmodified ``e2b`` SDK:
``pause()`` then ``Sandbox.connect()``, and a background command keeps counting.

The core Sandbox controller must run in the same process as the state keeper (that is the rule
that keeps a suspend from waiting for nobody), and the deployed controller has no registry, so
it is scaled to zero while this test runs the core controller, the SandboxSnapshot controller,
the keeper and the node agent in-process (plus templates, warm pools and claims for the
gateway), as ``--extensions --snapshot-registry`` would.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2b import AsyncSandbox
from kubernetes import client

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.extensions.snapshot.agent import MemoryCommitter, kubelet_committer
from kube_agent_sandbox.extensions.snapshot.checkpoint import KubeletCheckpointer
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import create_key, start_gateway
from kube_agent_sandbox.testing.images.sandbox import sandbox_image
from kube_agent_sandbox.testing.node.cluster import CONTROLLER_DEPLOYMENT, CONTROLLER_NAMESPACE
from kube_agent_sandbox.testing.node.workload import sandbox_manifest
from kube_agent_sandbox.testing.registry import RunningRegistry
from kube_agent_sandbox.testing.snapshot_stack import run_snapshot_stack
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
REPO_ROOT = Path(__file__).resolve().parents[1]
ENVD_PORT = 49983


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


@dataclass
class Scene:
    """One Sandbox of this module on the real node, and the ways to watch it."""

    cluster: ClusterAccess
    namespace: str
    name: str
    settings: RegistrySettings

    def ref(self, kind: str = "Sandbox") -> ObjectRef:
        api_version = {"Sandbox": "agents.x-k8s.io/v1beta1", "Pod": "v1"}[kind]
        return ObjectRef(api_version, kind, self.name, self.namespace)

    async def wait(self, ref: ObjectRef, probe: Callable[[dict[str, Any]], bool], what: str) -> Any:
        api = self.cluster.api_client()
        return await asyncio.to_thread(wait_for_object, api, ref, probe, timeout=TIMEOUT, what=what)

    async def last_line(self) -> str:
        """The container's last line of output ("" while it is being created or pulled)."""
        done = await asyncio.to_thread(
            self.cluster.kubectl,
            "-n", self.namespace, "logs", self.name, "--tail=1",
            check=False,
        )  # fmt: skip
        return str(done.stdout).strip()

    async def until_logs(self, probe: Callable[[str], bool], what: str) -> str:
        """The last line of output once ``probe`` accepts it (within 90 s)."""
        for _ in range(90):
            out = await self.last_line()
            if probe(out):
                return out
            await asyncio.sleep(1)
        raise AssertionError(f"{what}: the last line of output is {await self.last_line()!r}")

    async def set_mode(self, mode: str) -> None:
        patch = json.dumps({"spec": {"operatingMode": mode}})
        await asyncio.to_thread(
            self.cluster.kubectl,
            "-n", self.namespace, "patch", "sandbox", self.name, "--type=merge", "-p", patch,
        )  # fmt: skip

    async def start(self, image: str, command: list[str], mode: str) -> Any:
        """Create the Sandbox opted in with ``mode``; its first Pod once it has an IP."""
        manifest = sandbox_manifest(self.name, image=image, command=command)
        manifest["metadata"]["namespace"] = self.namespace
        manifest["metadata"]["annotations"] = {
            k.ANNOTATION_SNAPSHOT_ON_SUSPEND: mode,
            k.ANNOTATION_SNAPSHOT_PULL_SECRET: "registry",
        }
        await asyncio.to_thread(self.cluster.apply, manifest)
        await self.wait(self.ref(), _ready, "the Sandbox Ready")
        return await self.wait(
            self.ref("Pod"), lambda p: bool(p.get("status", {}).get("podIP")), "its Pod"
        )

    async def suspend_saved(self, snapshot: str) -> Any:
        """Suspend; the suspend's SandboxSnapshot once it is Ready."""
        await self.set_mode("Suspended")
        done = await self.wait(
            ObjectRef(
                "extensions.agents.x-k8s.io/v1beta1", "SandboxSnapshot", snapshot, self.namespace
            ),
            lambda s: (s.get("status") or {}).get("phase") in ("Ready", "Failed"),
            "the suspend's SandboxSnapshot to finish",
        )
        assert done["status"]["phase"] == "Ready", done["status"]
        return done

    async def resume(self, first: Any) -> Any:
        """Resume; the new Pod once it runs."""

        def new_and_running(p: dict[str, Any]) -> bool:
            running = (p.get("status") or {}).get("phase") == "Running"
            return running and p["metadata"]["uid"] != first["metadata"]["uid"]

        await self.set_mode("Running")
        await self.wait(self.ref(), _ready, "the resumed Sandbox Ready")
        return await self.wait(self.ref("Pod"), new_and_running, "the Pod of the resume running")

    async def clean_up(self, *snapshots: str) -> None:
        """Leave nothing behind: the snapshots' finalizer needs this process's controller."""
        for kind, name in [("sandbox", self.name)] + [("sandboxsnapshot", s) for s in snapshots]:
            await asyncio.to_thread(
                self.cluster.kubectl, "-n", self.namespace, "delete", kind, name, "--wait=true"
            )


def _ready(s: dict[str, Any]) -> bool:
    return any(
        cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in (s.get("status") or {}).get("conditions") or []
    )


def _scene(
    cluster: ClusterAccess, namespace: str, name: str, registry: RunningRegistry, tmp_path: Path
) -> Scene:
    return Scene(cluster, namespace, name, _registry(cluster, namespace, registry, tmp_path))


def _registry(
    cluster: ClusterAccess, namespace: str, registry: RunningRegistry, tmp_path: Path
) -> RegistrySettings:
    """The registry's credentials for the keeper (a file) and for the Pods (a Secret)."""
    auth_file = tmp_path / "registry-auth.json"
    auth_file.write_bytes(registry.dockerconfigjson())
    settings = RegistrySettings(
        url=registry.url, auth_file=str(auth_file), ca_file=str(registry.ca_file or "")
    )
    cluster.apply(registry.pull_secret("registry", namespace))
    return settings


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
    scene = _scene(cluster, namespace, NAME, oci_registry, tmp_path)

    async def scenario() -> None:
        first = await scene.start(python_image, ["python3", "-c", PROGRAM], k.MODE_FILESYSTEM)
        await scene.until_logs(lambda out: out == "fresh", "the first life's output")
        snapshot = await scene.suspend_saved(SNAP)
        resumed = await scene.resume(first)
        assert resumed["spec"]["containers"][0]["image"] == snapshot["status"]["image"]
        await scene.until_logs(lambda out: out == "kept across the suspend", "the file found")
        await scene.clean_up(SNAP)

    asyncio.run(
        run_snapshot_stack(cluster.kubeconfig, node, namespace, scene.settings, tmp_path, scenario)
    )


# A random token drawn once at the start, and a counter, five times a second: a cold start
# prints a new token from 0, a restored process its own token past where it was.
COUNTER = (
    "import itertools, secrets, time\n"
    "token = secrets.token_hex(4)\n"
    "for i in itertools.count():\n"
    "    print(token, i, flush=True); time.sleep(0.2)\n"
)


@pytest.fixture
def memory(
    real_node_environment: Any, kubelet_checkpointer: KubeletCheckpointer
) -> MemoryCommitter:
    """The node agent's memory committer on the real node's kubelet."""
    checkpoints = real_node_environment.node.workdir / "kubelet" / "checkpoints"
    return kubelet_committer(kubelet_checkpointer, checkpoints)


def test_a_suspend_with_memory_keeps_the_process_counting_after_the_resume(
    memory: MemoryCommitter,
    deployed_controller_stopped: None,
    cluster: ClusterAccess,
    namespace: str,
    python_image: str,
    real_node_environment: Any,
    oci_registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    node = real_node_environment.node
    name = "counter"
    scene = _scene(cluster, namespace, name, oci_registry, tmp_path)

    def counting(out: str) -> bool:
        return len(out.split()) == 2 and out.split()[1].isdigit()

    async def scenario() -> None:
        pod = await scene.start(python_image, ["python3", "-u", "-c", COUNTER], k.MODE_MEMORY)
        token, count = (await scene.until_logs(counting, "the counter counting")).split()
        # Twice: the second checkpoint is of a process that was itself restored. Each suspend
        # and resume is two generations: the snapshots are -suspend-2 and -suspend-4.
        for generation in (2, 4):
            snapshot = await scene.suspend_saved(f"{name}-suspend-{generation}")
            assert snapshot["spec"]["mode"] == k.MODE_MEMORY
            started = time.monotonic()
            pod = await scene.resume(pod)
            print(f"resume {generation // 2} to Running: {time.monotonic() - started:.2f}s")
            assert pod["spec"]["containers"][0]["image"] == snapshot["status"]["image"]
            await asyncio.sleep(1.0)
            after = (await scene.until_logs(counting, "the restored counter counting")).split()
            # The same process, restored (a cold start would draw a new token and count from
            # 0), counting on past where it was when suspended.
            assert after[0] == token
            assert int(after[1]) > int(count)
            count = after[1]
        await scene.clean_up(f"{name}-suspend-2", f"{name}-suspend-4")

    asyncio.run(
        run_snapshot_stack(
            cluster.kubeconfig, node, namespace, scene.settings, tmp_path, scenario, memory=memory
        )
    )


def test_the_gateway_pause_keeps_the_memory_and_connect_restores_the_process(
    memory: MemoryCommitter,
    deployed_controller_stopped: None,
    controller_runner: ControllerRunner,
    cluster: ClusterAccess,
    namespace: str,
    real_node_environment: Any,
    oci_registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    """The unmodified ``e2b`` SDK through a gateway with ``--pause-keeps-memory``: a process
    started with ``commands.run(background=True)`` keeps counting after ``pause()`` and
    ``Sandbox.connect()`` (sandboxd and its child restored from the checkpoint)."""
    node = real_node_environment.node
    image = sandbox_image(REPO_ROOT)
    node.import_image(image)
    settings = _registry(cluster, namespace, oci_registry, tmp_path)
    container = {
        "name": "sandbox",
        "image": image.reference,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "envd", "containerPort": ENVD_PORT}],
        "readinessProbe": {"tcpSocket": {"port": ENVD_PORT}, "periodSeconds": 1},
    }
    template = {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_TEMPLATE,
        "metadata": {
            "name": "counting",
            "annotations": {k.ANNOTATION_SNAPSHOT_PULL_SECRET: "registry"},
        },
        "spec": {
            "podTemplate": {"spec": {"containers": [container], "terminationGracePeriodSeconds": 1}}
        },
    }
    cluster.apply([template], namespace=namespace)
    key = create_key(cluster.kubeconfig, namespace, gateway_namespace=namespace)
    _, url = start_gateway(
        controller_runner,
        namespace=namespace,
        workdir=tmp_path,
        watch_namespace=namespace,
        extra_args=["--pause-keeps-memory"],
    )
    api = client.CustomObjectsApi(cluster.api_client())

    def sandbox_of(sandbox_id: str) -> dict[str, Any]:
        claim = api.get_namespaced_custom_object(
            c.EXTENSIONS_GROUP, c.V1BETA1, namespace, "sandboxclaims", sandbox_id
        )
        name = claim["status"]["sandbox"]["name"]  # type: ignore[index]
        found = api.get_namespaced_custom_object(c.GROUP, c.V1BETA1, namespace, "sandboxes", name)
        assert isinstance(found, dict)
        return found

    async def last_line(sbx: AsyncSandbox) -> list[str]:
        return str((await sbx.commands.run("tail -n 1 /tmp/counter.log")).stdout).split()

    async def scenario() -> None:
        sbx = await AsyncSandbox.create(
            template="counting", timeout=600, api_url=url, sandbox_url=url, api_key=key
        )
        await sbx.files.write("/tmp/counter.py", COUNTER)
        # As root: CRIU reads each process's rlimits with prlimit(2), which a process of
        # another user allows only to a CRIU with CAP_SYS_RESOURCE (not so in every CI
        # container); such a node fails the checkpoint and the pause keeps the files.
        await sbx.commands.run(
            "python3 -u /tmp/counter.py > /tmp/counter.log 2>&1", background=True, user="root"
        )
        await asyncio.sleep(1.5)
        token, count = await last_line(sbx)
        await sbx.pause()

        def saved_with_memory() -> k.SuspendProgress | None:
            annotations = sandbox_of(sbx.sandbox_id)["metadata"].get("annotations") or {}
            progress = k.SuspendProgress.parse(annotations.get(k.ANNOTATION_SUSPEND_SNAPSHOT))
            return (
                progress if progress and progress.phase in (k.PHASE_SAVED, k.PHASE_FAILED) else None
            )

        deadline = time.monotonic() + TIMEOUT
        while (progress := await asyncio.to_thread(saved_with_memory)) is None:
            assert time.monotonic() < deadline, "the pause's snapshot did not finish"
            await asyncio.sleep(1)
        assert (progress.phase, progress.mode) == (k.PHASE_SAVED, k.MODE_MEMORY), progress
        started = time.monotonic()
        resumed = await AsyncSandbox.connect(
            sbx.sandbox_id, api_url=url, sandbox_url=url, api_key=key
        )
        print(f"connect (resume from memory): {time.monotonic() - started:.2f}s")
        await asyncio.sleep(1.0)
        after = await last_line(resumed)
        assert after[0] == token  # the same process: a cold start would have no counter at all
        assert int(after[1]) > int(count)
        await resumed.kill()
        # The snapshots' finalizer needs this process's controller.
        await asyncio.to_thread(
            cluster.kubectl,
            "-n", namespace, "delete", "sandboxsnapshots", "--all", "--wait=true",
        )  # fmt: skip

    asyncio.run(
        run_snapshot_stack(
            cluster.kubeconfig,
            node,
            namespace,
            settings,
            tmp_path,
            scenario,
            memory=memory,
            claims=True,
        )
    )
