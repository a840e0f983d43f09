"""The cluster the scale and latency benchmarks run on, and the controller under test.

:class:`BenchCluster` starts the project's :class:`~kube_agent_sandbox.testing.cluster.
LocalCluster` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) tuned for
load, adds kwok nodes with room for many pods, and runs ``agent-sandbox-controller`` as a
subprocess under its generated RBAC (a ServiceAccount bound to the ``agent-sandbox-controller``
ClusterRole). Every process runs in its own process group under a supervisor and is stopped by
PID on :meth:`BenchCluster.stop`, on Ctrl-C and at exit.

Tuning the harness does not offer as options is done here: the CRDs are installed with
``conversion.strategy: None`` (no webhook server in the benchmark), the API server gets
kwokctl's ``--disable-qps-limits`` flags, and kube-scheduler and kube-controller-manager are
restarted with high client QPS (their defaults, 50 and 20 requests/s, would make them the
bottleneck instead of the controller), and kwok with 64 pod stages in parallel instead of 4.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import shutil
import ssl
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from benchlib.promtext import Scrape
from kube_agent_sandbox.controller.runtime import ApiClient, ApiError, Resource, load_kubeconfig
from kube_agent_sandbox.testing.access import ClusterAccess, load_crds, load_manifests
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.controller_runner import ControllerRunner, Identity
from kube_agent_sandbox.testing.kwok import kwok_node
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "manifests" / "crds"
RBAC_FILE = REPO / "manifests" / "rbac" / "role.generated.yaml"
EXTENSIONS_RBAC_FILE = REPO / "manifests" / "rbac" / "extensions" / "role.generated.yaml"
EXTENSIONS_ROLE = "agent-sandbox-controller-extensions"
NAMESPACE = "bench"
CONTROLLER_NAMESPACE = "agent-sandbox-system"
NODES = Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
NAMESPACES = Resource(
    group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False
)
PODS_PER_NODE = 1000
APISERVER_LOAD_ARGS = (
    "--max-requests-inflight=0",
    "--max-mutating-requests-inflight=0",
    "--enable-priority-and-fairness=false",
)
COMPONENT_QPS_ARGS = ("--kube-api-qps=2000", "--kube-api-burst=2000")
KWOK_PARALLELISM = {
    "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
    "kind": "KwokConfiguration",
    # A configuration file is not defaulted by kwok: every option it would default is spelled
    # out with kwok's default value, except the pod stage parallelism (default 4).
    "options": {
        "podPlayStageParallelism": 64,
        "nodePlayStageParallelism": 8,
        "nodeLeaseParallelism": 4,
        "podsOnNodeSyncParallelism": 1,
        "nodeLeaseDurationSeconds": 40,
        "manageAllNodes": False,
        "enableDebuggingHandlers": True,
        "enableContentionProfiling": False,
        "enableProfilingHandler": True,
        "enablePodsOnNodeSyncListPager": True,
        "enablePodsOnNodeSyncStreamWatch": False,
    },
}
"""kwok plays 4 pod stages at a time by default: at ~1 s per write on a loaded API server that
caps pods turning Running at a few per second, far below what the controller does."""


class BenchCluster:
    """Local cluster + kwok nodes + the controller subprocess, always cleaned up.

    Args:
        nodes: Extra kwok nodes, each with room for ``PODS_PER_NODE`` pods.
        keep_workdir: Keep certificates, kubeconfigs and logs after stop.
    """

    def __init__(self, *, nodes: int, keep_workdir: bool = False) -> None:
        self.nodes = nodes
        self.keep_workdir = keep_workdir
        self.workdir = Path(tempfile.mkdtemp(prefix="agent-sandbox-bench-"))
        self.cluster: LocalCluster | None = None
        self.access: ClusterAccess | None = None
        self.runner: ControllerRunner | None = None
        self.identity: Identity | None = None
        self.controllers: list[ManagedProcess] = []
        self.metrics_url = ""
        self.timings: dict[str, float] = {}
        self.notes: list[str] = []

    # -- cluster ----------------------------------------------------------------------------
    def start(self) -> ClusterAccess:
        """Start the cluster, tune it, add nodes and the benchmark namespace.

        Returns:
            Admin access to the cluster.
        """
        began = time.monotonic()
        crds = self._crds_without_webhook()
        self.cluster = LocalCluster(
            LocalClusterOptions(
                nodes=1,
                crds=[crds],
                workdir=self.workdir / "cluster",
                keep_workdir=True,
                apiserver_args=APISERVER_LOAD_ARGS,
                start_timeout=120.0,
            )
        )
        self.access = self.cluster.start()
        self.timings["cluster_start_s"] = time.monotonic() - began
        for component in ("kube-scheduler", "kube-controller-manager"):
            self._restart_with(component, COMPONENT_QPS_ARGS)
        kwok_config = self.workdir / "kwok-parallelism.yaml"
        kwok_config.write_text(yaml.safe_dump(KWOK_PARALLELISM))
        self._restart_with("kwok", [f"--config={kwok_config}"], append_only=True)
        asyncio.run(self._add_nodes_and_namespace())
        self.timings["cluster_ready_s"] = time.monotonic() - began
        return self.access

    def _crds_without_webhook(self) -> Path:
        target = self.workdir / "crds"
        target.mkdir(parents=True, exist_ok=True)
        for crd in load_crds(CRD_DIR):
            crd["spec"]["conversion"] = {"strategy": "None"}
            (target / f"{crd['metadata']['name']}.yaml").write_text(yaml.safe_dump(crd))
        return target

    def _restart_with(
        self,
        name: str,
        extra: Sequence[str],
        *,
        append_only: bool = False,
        timeout: float = 60.0,
    ) -> None:
        """Restart a harness component with extra flags (read its argv from /proc).

        Flags named in ``extra`` replace the component's own unless ``append_only`` (for
        repeatable flags such as kwok's ``--config``).
        """
        assert self.cluster is not None
        assert self.cluster.supervisor is not None
        process = next(p for p in self.cluster.processes() if p.name == name)
        argv = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
        command = [a.decode() for a in argv if a]
        if command and Path(command[0]).name == "setpriv":  # the supervisor adds it again
            command = command[command.index("--") + 1 :]
        flags = set() if append_only else {f.split("=", 1)[0] for f in extra}
        command = [a for a in command if a.split("=", 1)[0] not in flags] + list(extra)
        self.cluster.supervisor.stop(name)
        restarted = self.cluster.supervisor.start(name, command)
        port = next((a.split("=", 1)[1] for a in command if a.startswith("--secure-port=")), "")
        if not port:  # kwok serves no health endpoint here: give it a moment, check it lives
            time.sleep(2)
            if not restarted.alive():
                raise RuntimeError(f"{name} exited after restart:\n{restarted.log_tail()}")
            return
        context = ssl.create_default_context(cafile=str(self.workdir / "cluster/pki/ca.crt"))
        _wait_http(f"https://127.0.0.1:{port}/healthz", restarted, context=context, timeout=timeout)

    async def _add_nodes_and_namespace(self) -> None:
        async with self.admin_client() as client:
            # The harness's own node keeps a lease held by the kwok that was just replaced; the
            # new kwok takes it over only when that lease expires (40 s), so pods bound there
            # meanwhile would wait. Keep the benchmark's pods off it.
            for node in (await client.list(NODES)).get("items") or ():
                await client.patch(
                    NODES, "", node["metadata"]["name"], {"spec": {"unschedulable": True}}
                )
            names = [f"bench-node-{i}" for i in range(self.nodes)]
            for name in names:
                node = kwok_node(name)
                capacity = dict(node["status"]["capacity"], pods=str(PODS_PER_NODE))
                node["status"]["capacity"] = node["status"]["allocatable"] = capacity
                await client.create(NODES, "", node)
            for ns in (NAMESPACE, CONTROLLER_NAMESPACE):
                try:
                    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                    await client.create(NAMESPACES, "", body)
                except ApiError as err:
                    if not err.already_exists:
                        raise
            deadline = time.monotonic() + 120
            while True:
                listed = await client.list(NODES)
                ready = {
                    n["metadata"]["name"]
                    for n in listed.get("items", [])
                    if any(
                        c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (n.get("status") or {}).get("conditions") or []
                    )
                }
                if all(name in ready for name in names):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"kwok nodes not Ready: {sorted(set(names) - ready)}")
                await asyncio.sleep(0.5)

    def admin_client(self, *, connections: int = 100) -> ApiClient:
        """An async API client with the admin kubeconfig (create it inside the event loop)."""
        assert self.access is not None
        return ApiClient(
            load_kubeconfig(str(self.access.kubeconfig)),
            max_connections=connections,
            request_timeout=120.0,
        )

    # -- controller -------------------------------------------------------------------------
    def start_controller(
        self, *, workers: int, extra_args: Sequence[str] = (), extensions: bool = False
    ) -> ManagedProcess:
        """Run ``agent-sandbox-controller`` as its ServiceAccount and wait until it is ready.

        Args:
            workers: ``--sandbox-concurrent-workers``.
            extra_args: More controller flags.
            extensions: Run with ``--extensions``, also bound to the extensions ClusterRole.

        Returns:
            The controller process (its PID is the Python interpreter's).
        """
        assert self.access is not None
        if self.runner is None:
            self.runner = ControllerRunner(self.access, self.workdir / "controller")
            roles = ["agent-sandbox-controller"]
            rbac = load_manifests(RBAC_FILE)
            if extensions:
                roles.append(EXTENSIONS_ROLE)
                rbac += load_manifests(EXTENSIONS_RBAC_FILE)
            self.identity = self.runner.identity(
                "agent-sandbox-controller",
                namespace=CONTROLLER_NAMESPACE,
                cluster_roles=roles,
                rbac=rbac,
            )
        assert self.identity is not None
        metrics_port, health_port = free_port(), free_port()
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        argv = [
            controller_executable(),
            "--leader-elect=false",
            "--enable-webhook=false",
            "--kubeconfig={kubeconfig}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            f"--sandbox-concurrent-workers={workers}",
            *(["--extensions"] if extensions else []),
            *extra_args,
        ]
        name = f"controller-{len(self.controllers) + 1}"
        began = time.monotonic()
        process = self.runner.start_command(argv, identity=self.identity, name=name)
        self.controllers.append(process)
        _wait_http(f"http://127.0.0.1:{health_port}/readyz", process, timeout=120)
        self.timings[f"{name}_ready_s"] = time.monotonic() - began
        log.info("%s running (pid %d), metrics at %s", name, process.pid, self.metrics_url)
        return process

    def start_command(self, command: str) -> ManagedProcess:
        """Run another controller from a command line, with the admin kubeconfig.

        ``{kubeconfig}``, ``{metrics_port}`` and ``{health_port}`` in the command are replaced
        by the admin kubeconfig's path and two free local ports; ``KUBECONFIG`` is set too. When
        the command names ``{health_port}``, the controller counts as started once
        ``http://127.0.0.1:<health_port>/readyz`` answers 200; otherwise after 5 s alive. Its
        ``/metrics`` is read only when the command names ``{metrics_port}``.

        Args:
            command: The command line (split like a shell would, without running one).

        Returns:
            The process (run ``exec`` in a wrapper script, so RSS and CPU are the controller's).

        Raises:
            ValueError: If the command is empty.
        """
        assert self.access is not None
        argv = shlex.split(command)
        if not argv:
            raise ValueError("--controller-cmd is empty")
        if self.runner is None:
            self.runner = ControllerRunner(self.access, self.workdir / "controller")
        metrics_port, health_port = free_port(), free_port()
        argv = [
            a.replace("{metrics_port}", str(metrics_port)).replace(
                "{health_port}", str(health_port)
            )
            for a in argv
        ]
        self.metrics_url = (
            f"http://127.0.0.1:{metrics_port}/metrics" if "{metrics_port}" in command else ""
        )
        admin = Identity(namespace="", name="admin", kubeconfig=self.access.kubeconfig)
        name = f"controller-{len(self.controllers) + 1}"
        began = time.monotonic()
        process = self.runner.start_command(argv, identity=admin, name=name)
        self.controllers.append(process)
        if "{health_port}" in command:
            _wait_http(f"http://127.0.0.1:{health_port}/readyz", process, timeout=120)
        else:
            time.sleep(5)
            if not process.alive():
                raise RuntimeError(f"{name} exited at start:\n{process.log_tail()}")
        self.timings[f"{name}_ready_s"] = time.monotonic() - began
        log.info("%s running (pid %d): %s", name, process.pid, command)
        return process

    # -- cluster facts ----------------------------------------------------------------------
    def apiserver_metrics(self) -> Scrape:
        """kube-apiserver's own ``/metrics``, read with the admin credentials."""
        assert self.access is not None
        return Scrape(self.access.kubectl("get", "--raw", "/metrics").stdout)

    def kubernetes_version(self) -> str:
        """kube-apiserver's ``gitVersion``."""
        assert self.access is not None
        try:
            raw = self.access.kubectl("get", "--raw", "/version").stdout
            return str(json.loads(raw).get("gitVersion") or "unknown")
        except Exception as err:  # a fact for the report, not worth failing a run over
            log.warning("cannot read the Kubernetes version: %s", err)
            return "unknown"

    def process_pids(self) -> dict[str, int]:
        """PID of every cluster component and of the controllers started, by name."""
        pids = {p.name: p.pid for p in self.cluster.processes()} if self.cluster else {}
        for process in self.controllers:
            if process.alive():
                pids["controller"] = process.pid
        return pids

    def restart_apiserver(self, *, timeout: float = 600.0) -> None:
        """Restart kube-apiserver with its own flags (every watch ends; counters restart).

        Args:
            timeout: Seconds for ``/healthz`` to answer 200 again (with thousands of objects
                on a loaded machine its caches take minutes to fill).
        """
        self._restart_with("kube-apiserver", [], timeout=timeout)

    @staticmethod
    def stop_controller(process: ManagedProcess) -> int | None:
        """Stop a controller with SIGTERM (KILL after 30 s); returns its exit status."""
        process.stop(grace=30.0)
        return process.returncode

    # -- teardown ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the controller(s) and the cluster; remove the work directory unless kept."""
        try:
            if self.runner is not None:
                try:
                    self.runner.close()
                except Exception:  # a failing controller must not strand the cluster
                    log.exception("stopping the controller failed")
                self.runner = None
        finally:
            if self.cluster is not None:
                self.cluster.stop()
                self.cluster = None
            if self.keep_workdir:
                log.info("kept work directory %s", self.workdir)
            else:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> BenchCluster:
        """Start the cluster (stopping it again if starting fails)."""
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop everything."""
        self.stop()


def controller_executable() -> str:
    """The ``agent-sandbox-controller`` console script of this environment."""
    beside = Path(sys.executable).parent / "agent-sandbox-controller"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("agent-sandbox-controller")
    if found is None:
        raise FileNotFoundError("agent-sandbox-controller is not installed (uv sync)")
    return found


def _wait_http(
    url: str,
    process: ManagedProcess,
    *,
    context: ssl.SSLContext | None = None,
    timeout: float = 60.0,
) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(
                f"{process.name} exited ({process.returncode}) before {url} answered:\n"
                f"{process.log_tail()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=5, context=context) as response:
                if response.status == 200:
                    return
        except Exception as err:  # not up yet
            last = err
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s ({last})")


def _error_lines(process: ManagedProcess) -> list[str]:
    try:
        lines = process.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [ln for ln in lines if '"level":"error"' in ln or " ERROR " in ln]


def controller_log_errors(process: ManagedProcess) -> tuple[int, list[str]]:
    """Count error-level lines in a controller's log; return the count and the first few."""
    errors = _error_lines(process)
    return len(errors), errors[:5]


def controller_log_error_classes(process: ManagedProcess) -> dict[str, int]:
    """The controller log's error-level lines counted by :func:`error_classes`."""
    return error_classes(_error_lines(process))


def error_classes(lines: list[str]) -> dict[str, int]:
    """Error lines counted by the ``errorClass`` the controller logs with a reconcile error.

    ``transient`` (an API error that can heal, a timeout, a lost connection: retried with
    backoff), ``permanent`` or ``programming``; a line without the field (another logger,
    or a plain-text format) counts as ``unclassified``.
    """
    counts: dict[str, int] = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        found = record.get("errorClass") if isinstance(record, dict) else None
        kind = found if isinstance(found, str) and found else "unclassified"
        counts[kind] = counts.get(kind, 0) + 1
    return counts
