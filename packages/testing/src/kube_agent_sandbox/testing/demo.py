"""The project's main job, end to end: a local cluster, the controller, a sandbox that runs.

It stays one module: it is one script (``python -m``), and its steps, environments and
``main`` read top to bottom in the order the demo runs them.

``python -m kube_agent_sandbox.testing.demo`` (``nox -s demo``) starts the local cluster with a
real node (kubelet + containerd), deploys the controller with
``kubectl apply -k manifests/overlays/extensions`` (core plus ``--extensions``), creates a
Sandbox, waits until it is Ready, runs Python code in it, writes to its volume, suspends and
resumes it, reads the data back, then fills a warm pool, claims a sandbox from it (printing the
claim-to-Ready time) and runs Python in the claimed pod; it prints how long each step took.
Where a real node cannot run (no root, missing packages), it says why and falls back to kwok's
simulated nodes with the controller running as a local process: the API-level steps still run,
the steps that need a real container are skipped.

To add a step, write a function ``(DemoContext) -> str`` (its return value is the detail printed
after the timing) and append a :class:`Step` to :data:`STEPS`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.images.catalog import BuiltImage
from kube_agent_sandbox.testing.node.cluster import (
    RealNodeCluster,
    RealNodeClusterOptions,
    deploy_controller,
)
from kube_agent_sandbox.testing.node.prerequisites import missing_prerequisites
from kube_agent_sandbox.testing.node.workload import (
    SandboxHandle,
    exec_in_pod,
    sandbox_manifest,
)
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ProcessSupervisor
from kube_agent_sandbox.testing.waiting import ObjectRef, condition_status, wait_for_object

_log = logging.getLogger(__name__)

REAL = "real"
KWOK = "kwok"
NAMESPACE = "demo"
SANDBOX = "demo-sandbox"
PYTHON_SNIPPET = (
    "import platform, socket, sys\n"
    "print(f'Hello from {socket.gethostname()}: Python {platform.python_version()} "
    "on {platform.machine()}')\n"
    "print(sum(i * i for i in range(1_000_000)))\n"
)
TEMPLATE = "demo-python"
POOL = "demo-pool"
POOL_SIZE = 2
CLAIM = "demo-claim"
EXTENSIONS_KUSTOMIZATION = "manifests/overlays/extensions"
# kwok pods run nothing, so any image name works there.
KWOK_IMAGE = "localhost/agent-sandbox/python:kwok-simulated"


@dataclass
class DemoContext:
    """What the steps share."""

    access: ClusterAccess
    mode: str
    image: str
    out: TextIO
    sandbox: SandboxHandle | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    claimed_pod: str | None = None

    @property
    def handle(self) -> SandboxHandle:
        """The demo Sandbox (created by the first step)."""
        if self.sandbox is None:
            raise RuntimeError("the sandbox has not been created yet")
        return self.sandbox


@dataclass(frozen=True)
class Step:
    """One timed step of the demo."""

    title: str
    run: Callable[[DemoContext], str]
    #: Modes the step runs in (steps that need a real container skip on kwok).
    modes: frozenset[str] = frozenset({REAL, KWOK})


def create_sandbox(ctx: DemoContext) -> str:
    """Create the namespace and a Sandbox (with a 64Mi volume on the real node)."""
    ctx.access.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    manifest = sandbox_manifest(
        SANDBOX,
        image=ctx.image,
        command=["python3", "-c", "import time; time.sleep(86400)"],
        volume_size="64Mi" if ctx.mode == REAL else None,
    )
    ctx.sandbox = SandboxHandle.create(ctx.access.api_client(), NAMESPACE, manifest)
    return f"sandbox {NAMESPACE}/{SANDBOX} created (image {ctx.image})"


def wait_ready(ctx: DemoContext) -> str:
    """Wait until the Sandbox's Ready condition is True."""
    sandbox = ctx.handle.wait_condition("Ready", timeout=180)
    status = sandbox.get("status") or {}
    return f"Ready on node {status.get('nodeName') or '?'}, pod IPs {status.get('podIPs')}"


def run_python(ctx: DemoContext) -> str:
    """Run a Python snippet in the sandbox through the exec API."""
    result = ctx.handle.exec(["python3", "-c", PYTHON_SNIPPET])
    if result.exit_code != 0:
        raise RuntimeError(f"python exited {result.exit_code}: {result.stderr}")
    return " | ".join(result.stdout.strip().splitlines())


def write_volume(ctx: DemoContext) -> str:
    """Write a token to the sandbox's persistent volume."""
    result = ctx.handle.exec(["sh", "-c", f"echo {ctx.token} > /data/token && sync"])
    if result.exit_code != 0:
        raise RuntimeError(f"write failed: {result.stderr}")
    return f"wrote {ctx.token} to /data/token"


def suspend(ctx: DemoContext) -> str:
    """Suspend: the controller deletes the pod, the volume stays."""
    ctx.handle.suspend(timeout=180)
    return "Suspended=True, pod deleted"


def resume(ctx: DemoContext) -> str:
    """Resume: a new pod starts on the same volume and becomes Ready."""
    ctx.handle.resume(timeout=180)
    return "Ready again with a new pod"


def read_volume(ctx: DemoContext) -> str:
    """Read the token back from the volume after the resume."""
    result = ctx.handle.exec(["cat", "/data/token"])
    found = result.stdout.strip()
    if found != ctx.token:
        raise RuntimeError(f"expected {ctx.token} on the volume, found {found!r}")
    return f"read {found} back: the data survived suspend/resume"


def delete_sandbox(ctx: DemoContext) -> str:
    """Delete the Sandbox and wait until it is gone."""
    ctx.handle.delete(timeout=180)
    return "deleted"


def fill_warm_pool(ctx: DemoContext) -> str:
    """Create a SandboxTemplate and a SandboxWarmPool, and wait until the pool is full."""
    container = {
        "name": "main",
        "image": ctx.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", "import time; time.sleep(86400)"],
    }
    template = {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_TEMPLATE,
        "metadata": {"name": TEMPLATE},
        "spec": {
            "podTemplate": {"spec": {"containers": [container], "terminationGracePeriodSeconds": 1}}
        },
    }
    pool = {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_WARM_POOL,
        "metadata": {"name": POOL},
        "spec": {"replicas": POOL_SIZE, "sandboxTemplateRef": {"name": TEMPLATE}},
    }
    ctx.access.apply([template, pool], namespace=NAMESPACE)
    wait_for_object(
        ctx.access.api_client(),
        ObjectRef(c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_WARM_POOL, POOL, NAMESPACE),
        lambda o: (o.get("status") or {}).get("readyReplicas") == POOL_SIZE,
        timeout=240,
        what=f"{POOL_SIZE} Ready members",
    )
    return f"warm pool {POOL} holds {POOL_SIZE} Ready sandboxes of template {TEMPLATE}"


def claim_from_pool(ctx: DemoContext) -> str:
    """Claim a sandbox from the warm pool and time it until the claim is Ready."""
    claim = {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_CLAIM,
        "metadata": {"name": CLAIM},
        "spec": {"warmPoolRef": {"name": POOL}},
    }
    sent = time.monotonic()
    ctx.access.apply(claim, namespace=NAMESPACE)
    ready = wait_for_object(
        ctx.access.api_client(),
        ObjectRef(c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_CLAIM, CLAIM, NAMESPACE),
        lambda o: condition_status(o, "Ready") == "True",
        timeout=120,
        what="Ready",
    )
    elapsed_ms = (time.monotonic() - sent) * 1000
    sandbox = ready["status"]["sandbox"]["name"]
    ctx.claimed_pod = sandbox
    served = "warm, from the pool" if sandbox.startswith(f"{POOL}-") else "cold"
    return f"claim-to-Ready {elapsed_ms:.0f} ms: got {sandbox} ({served})"


def run_in_claimed(ctx: DemoContext) -> str:
    """Run Python in the claimed sandbox's pod (the pool's container, already running)."""
    if ctx.claimed_pod is None:
        raise RuntimeError("no claimed sandbox")
    result = exec_in_pod(
        ctx.access.api_client(),
        NAMESPACE,
        ctx.claimed_pod,
        ["python3", "-c", "import socket; print('claimed sandbox', socket.gethostname())"],
    )
    if result.exit_code != 0:
        raise RuntimeError(f"python exited {result.exit_code}: {result.stderr}")
    return result.stdout.strip()


STEPS: list[Step] = [
    Step("create sandbox", create_sandbox),
    Step("sandbox ready", wait_ready),
    Step("run python in the sandbox", run_python, frozenset({REAL})),
    Step("write to its volume", write_volume, frozenset({REAL})),
    Step("suspend", suspend),
    Step("resume", resume),
    Step("read the volume back", read_volume, frozenset({REAL})),
    Step("delete sandbox", delete_sandbox),
    Step("fill a warm pool", fill_warm_pool),
    Step("claim a sandbox from the pool", claim_from_pool),
    Step("run python in the claimed sandbox", run_in_claimed, frozenset({REAL})),
]


class Reporter:
    """Prints each step with its duration and collects the timings."""

    def __init__(self, out: TextIO) -> None:
        """Write to ``out``.

        Args:
            out: Stream for the report.
        """
        self.out = out
        self.timings: list[tuple[str, float | None]] = []

    def line(self, text: str) -> None:
        """Print one line.

        Args:
            text: The line.
        """
        self.out.write(text + "\n")
        self.out.flush()

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[list[str]]:
        """Time a step; the body appends its detail text to the yielded list.

        Args:
            title: Step title.
        """
        detail: list[str] = []
        self.line(f"-> {title} ...")
        started = time.monotonic()
        yield detail
        elapsed = time.monotonic() - started
        self.timings.append((title, elapsed))
        self.line(f"   {elapsed:7.2f}s  {' '.join(detail)}")

    def skipped(self, title: str, why: str) -> None:
        """Record a skipped step.

        Args:
            title: Step title.
            why: Reason.
        """
        self.timings.append((title, None))
        self.line(f"-> {title}: skipped ({why})")

    def summary(self) -> None:
        """Print the timing table."""
        self.line("\nstep timings:")
        width = max((len(title) for title, _ in self.timings), default=10)
        for title, seconds in self.timings:
            shown = "skipped" if seconds is None else f"{seconds:7.2f}s"
            self.line(f"  {title:<{width}} {shown}")


def find_repo_root(start: Path) -> Path:
    """The repository root above ``start`` (the folder with ``manifests/kustomization.yaml``).

    Args:
        start: Where to start looking.

    Returns:
        The root.

    Raises:
        FileNotFoundError: If no parent holds the manifests.
    """
    for folder in [start, *start.parents]:
        if (folder / "manifests" / "kustomization.yaml").is_file():
            return folder
    raise FileNotFoundError(f"no manifests/kustomization.yaml above {start}")


@contextlib.contextmanager
def real_node_environment(repo: Path, report: Reporter) -> Iterator[tuple[ClusterAccess, str]]:
    """The real-node cluster with the controller deployed in it.

    Args:
        repo: Repository root.
        report: Where to print progress.

    Yields:
        The cluster access and the Python image reference.
    """
    cluster = RealNodeCluster(RealNodeClusterOptions(crds=[repo / "manifests" / "crds"]))
    try:
        with report.step("start cluster (control plane + real node)") as detail:
            access = cluster.start()
            image: BuiltImage | None = cluster.node.python_image
            assert image is not None
            detail.append(
                f"control plane {cluster.timings['control-plane']:.1f}s, node prepare "
                f"{cluster.timings['node-prepare']:.1f}s, node join "
                f"{cluster.timings['node-join']:.1f}s; KUBECONFIG={access.kubeconfig}"
            )
        with report.step(
            "deploy controller (image + kubectl apply -k manifests/overlays/extensions)"
        ) as detail:
            deployed = deploy_controller(
                access, cluster.node, repo_root=repo, kustomization=EXTENSIONS_KUSTOMIZATION
            )
            detail.append(
                ", ".join(f"{k} {v:.1f}s" for k, v in deployed.timings.items())
                + f"; image {deployed.manifest_image}"
            )
        yield access, image.reference
    finally:
        cluster.stop()


@contextlib.contextmanager
def kwok_environment(repo: Path, report: Reporter) -> Iterator[tuple[ClusterAccess, str]]:
    """The kwok cluster with the controller running as a local process.

    Args:
        repo: Repository root.
        report: Where to print progress.

    Yields:
        The cluster access and the (unused) image reference.
    """
    cluster = LocalCluster(LocalClusterOptions(nodes=1, crds=[repo / "manifests" / "crds"]))
    supervisor: ProcessSupervisor | None = None
    try:
        with report.step("start cluster (control plane + kwok node)") as detail:
            access = cluster.start()
            detail.append(f"KUBECONFIG={access.kubeconfig}")
        with report.step("start controller (local process)") as detail:
            binary = shutil.which("agent-sandbox-controller")
            if binary is None:
                raise RuntimeError("agent-sandbox-controller is not installed (uv sync)")
            supervisor = ProcessSupervisor(cluster.workdir / "logs")
            supervisor.start(
                "agent-sandbox-controller",
                [
                    binary,
                    f"--kubeconfig={access.kubeconfig}",
                    "--enable-webhook=false",
                    "--leader-elect=false",
                    "--extensions",
                    f"--metrics-bind-address=127.0.0.1:{free_port()}",
                    f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                ],
            )
            detail.append(f"logs in {cluster.workdir / 'logs'}")
        yield access, KWOK_IMAGE
    finally:
        if supervisor is not None:
            supervisor.stop_all()
        cluster.stop()


def run_steps(ctx: DemoContext, report: Reporter, steps: Sequence[Step] = STEPS) -> None:
    """Run every step that applies to the mode, timing each.

    Args:
        ctx: Shared state.
        report: Where to print.
        steps: The steps, in order.
    """
    for step in steps:
        if ctx.mode not in step.modes:
            report.skipped(step.title, "kwok pods have no containers")
            continue
        with report.step(step.title) as detail:
            detail.append(step.run(ctx))


def choose_mode(requested: str, report: Reporter) -> str:
    """Resolve ``auto`` to ``real`` when a real node can run here, else ``kwok``.

    Args:
        requested: ``auto``, ``real`` or ``kwok``.
        report: Where to explain the choice.

    Returns:
        ``real`` or ``kwok``.

    Raises:
        SystemExit: If ``real`` was requested but cannot run.
    """
    if requested == KWOK:
        return KWOK
    reasons = missing_prerequisites()
    if not reasons:
        return REAL
    if requested == REAL:
        raise SystemExit("a real node cannot run here: " + "; ".join(reasons))
    report.line("a real node cannot run here, so the demo uses kwok's simulated nodes:")
    for reason in reasons:
        report.line(f"  - {reason}")
    return KWOK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo.

    Args:
        argv: Command-line arguments (``sys.argv[1:]`` when None).

    Returns:
        Process exit status.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--mode",
        choices=("auto", REAL, KWOK),
        default="auto",
        help="real node, kwok nodes, or the real node where it can run (default)",
    )
    parser.add_argument("--repo", type=Path, default=None, help="repository root (default: cwd)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the cluster running until Ctrl-C at the end"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log the harness's steps")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
    )
    report = Reporter(sys.stdout)
    repo = find_repo_root(args.repo or Path.cwd())
    report.line(
        f"agent-sandbox demo: Kubernetes {versions.KUBERNETES_VERSION}, binaries in "
        f"{versions.bin_dir()}"
    )
    mode = choose_mode(args.mode, report)
    if mode == REAL and args.mode == "auto":
        report.line("mode: real node (kubelet + containerd + runc)")
    elif mode == KWOK:
        report.line("mode: kwok simulated nodes (no containers run)")
    status, started_steps = run_demo(mode, repo, report, keep=args.keep)
    if status != 0 and mode == REAL and args.mode == "auto" and not started_steps:
        report.line("the real node did not start (see above); falling back to kwok nodes")
        status, _ = run_demo(KWOK, repo, Reporter(sys.stdout), keep=args.keep)
    return status


def run_demo(mode: str, repo: Path, report: Reporter, *, keep: bool) -> tuple[int, bool]:
    """Start the environment of ``mode`` and run the steps.

    Args:
        mode: ``real`` or ``kwok``.
        repo: Repository root.
        report: Where to print.
        keep: Wait for Ctrl-C before tearing down.

    Returns:
        Exit status, and whether the environment came up (the steps began).
    """
    environment = real_node_environment if mode == REAL else kwok_environment
    started = time.monotonic()
    steps_began = False
    try:
        with environment(repo, report) as (access, image):
            steps_began = True
            ctx = DemoContext(access=access, mode=mode, image=image, out=report.out)
            run_steps(ctx, report)
            report.summary()
            report.line(f"total {time.monotonic() - started:.1f}s")
            if keep:
                report.line(f"cluster kept: export KUBECONFIG={access.kubeconfig}; Ctrl-C stops")
                with contextlib.suppress(KeyboardInterrupt):
                    signal.pause()
    except Exception as err:
        report.summary()
        report.line(f"demo failed: {type(err).__name__}: {err}")
        return 1, steps_began
    return 0, steps_began


if __name__ == "__main__":
    raise SystemExit(main())
