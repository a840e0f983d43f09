"""The local test cluster: a real control plane plus kwok nodes, all on 127.0.0.1.

:class:`LocalCluster` stays one class in this module: its ``start``, ``stop`` and ``restart``
share the private PKI, ports, data directory and processes of one cluster. What needs none of
that state lives in modules of its own, imported from there: the options (``clusteroptions``),
the context-manager base (``lifecycle``), the prerequisites check (``prerequisites``), kwok's
stages and Nodes (``kwok``), the audit policy (``audit``), etcd's compaction and stale data
directories (``etcd``), and free ports and readiness probes (``probes``).

:class:`LocalCluster` runs etcd (data on /dev/shm, no fsync), kube-apiserver (TLS,
client-certificate authentication, Node+RBAC authorization, service-account tokens),
kube-controller-manager (garbage collection, namespace deletion, service accounts),
kube-scheduler and kwok (simulated nodes whose pods become Running and Ready) from the binaries
that ``kube_agent_sandbox.testing.build`` compiled. CRDs are installed before the controller
manager starts, because its garbage collector discovers new resources only every 30 seconds.

``python -m kube_agent_sandbox.testing.cluster`` starts one for manual use and waits.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import signal
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kube_agent_sandbox.testing import pki, versions
from kube_agent_sandbox.testing.access import ClusterAccess, load_crds
from kube_agent_sandbox.testing.audit import AUDIT_POLICY
from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.etcd import ETCD_PREFIX, compact_etcd, remove_stale_etcd_dirs
from kube_agent_sandbox.testing.flags import merge_flags
from kube_agent_sandbox.testing.kubeconfig import write_kubeconfig
from kube_agent_sandbox.testing.kwok import (
    KWOK_NODE_ANNOTATION,
    apiserver_kubelet_flags,
    kwok_log_crd_files,
    kwok_log_server_flags,
    kwok_node,
    kwok_stage_files,
    kwok_stage_root,
)
from kube_agent_sandbox.testing.lifecycle import ClusterLifecycle
from kube_agent_sandbox.testing.prerequisites import check_binaries
from kube_agent_sandbox.testing.probes import free_port, http_ok, https_ok
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor, wait_until
from kube_agent_sandbox.testing.registry import RunningRegistry, start_registry
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_condition, wait_for_object

_log = logging.getLogger(__name__)

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class LocalCluster(ClusterLifecycle):
    """The whole local cluster as a context manager: ``with LocalCluster(opts) as access:``."""

    def __init__(self, options: LocalClusterOptions | None = None) -> None:
        """Prepare (but do not start) a cluster.

        Args:
            options: How to run it; defaults when None.
        """
        self.options = options or LocalClusterOptions()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.workdir = Path()
        self.supervisor: ProcessSupervisor | None = None
        self.access: ClusterAccess | None = None
        self.server = ""
        self.ca: pki.CertificateAuthority | None = None
        self.timings: dict[str, float] = {}
        self._etcd_url = ""
        self._etcd_data: Path | None = None
        self._admin_tls: ssl.SSLContext | None = None
        #: How to wait until each restartable component is ready again (by process name).
        self._readiness: dict[str, Callable[[ManagedProcess], None]] = {}
        #: The apiserver's audit log (JSON lines): every request of a service account of
        #: ``AUDITED_NAMESPACE``, at Metadata level (the RBAC audit test reads it).
        self.audit_log: Path | None = None
        #: The OCI registry, when ``options.registry`` asked for one.
        self.registry: RunningRegistry | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ClusterAccess:
        """Start every component, wait until each is ready, and return the cluster's access.

        Returns:
            Access to the running cluster (admin kubeconfig, client, kubectl, log files).

        Raises:
            PrerequisiteError: If binaries or kwok stages are missing.
            ProcessFailedError: If a component exits or is not ready in time.
        """
        opts = self.options
        names = ["etcd", "kube-apiserver", "kubectl"]
        if not opts.control_plane_only:
            names += ["kube-controller-manager", "kube-scheduler", "kwok"]
        check_binaries(opts.bin_dir, names)
        stage_files: list[Path] = []
        crd_sources = list(opts.crds)
        if not opts.control_plane_only and opts.nodes > 0:
            stage_root = opts.kwok_stage_root or kwok_stage_root()
            stage_files = kwok_stage_files(stage_root)
            if opts.pod_logs:
                # before kwok starts: it watches these for its log rules
                crd_sources += kwok_log_crd_files(stage_root)
        crds = [doc for source in crd_sources for doc in load_crds(source)]

        if opts.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="agent-sandbox-cluster-")
            self.workdir = Path(self._tmp.name)
        else:
            self.workdir = opts.workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
        self.supervisor = ProcessSupervisor(self.workdir / "logs")
        self._readiness = {}
        atexit.register(self.stop)
        started = time.monotonic()
        try:
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            if opts.registry is not None:
                self._timed("registry", self._start_registry)
            access = ClusterAccess(
                self.workdir / "admin.kubeconfig",
                provider="local",
                bin_dir=opts.bin_dir,
                log_files={p.name: p.log_path for p in self.supervisor.processes},
            )
            self.access = access
            if crds:
                self._timed("crds", lambda: access.install_crds(crds))
            if not opts.control_plane_only:
                self._start_controller_manager()
                self._start_scheduler()
                if opts.nodes > 0:
                    self._start_kwok(stage_files)
                access.log_files = {p.name: p.log_path for p in self.supervisor.processes}
                # Register the nodes first, so kwok readies them while the controller
                # manager's service-account controllers catch up.
                node_names = self._create_nodes() if opts.nodes > 0 else []
                self._timed("default-serviceaccount", self._wait_default_service_account)
                self._timed("nodes-ready", lambda: self._wait_nodes_ready(node_names))
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - started
        _log.info(
            "local cluster ready in %.1fs at %s (kubeconfig %s; %s)",
            self.timings["total"],
            self.server,
            access.kubeconfig,
            ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items() if k != "total"),
        )
        return access

    def stop(self) -> None:
        """Stop every component (reverse order) and remove the temporary work directory."""
        atexit.unregister(self.stop)
        try:
            if self.access is not None:
                self.access.close()
            if self.supervisor is not None:
                self.supervisor.stop_all()
        finally:
            if self._etcd_data is not None:
                shutil.rmtree(self._etcd_data, ignore_errors=True)
                self._etcd_data = None
            if self._tmp is not None and not self.options.keep_workdir:
                self._tmp.cleanup()
                self._tmp = None

    def restart(self, component: str, *, grace: float = 10.0) -> None:
        """Stop one component and start it again; return when it is ready.

        The component keeps its command line, hence its ports, certificates and (for etcd) its
        data, so objects survive and every kubeconfig written for this cluster keeps working.
        Readiness is kube-apiserver's ``/readyz``, etcd's ``/health`` (then ``/readyz`` of the
        apiserver, which has to reconnect), and ``/healthz`` for the controller manager and the
        scheduler. kwok has no health endpoint here and cannot be restarted.

        Call it from the thread that started the cluster (normally the main thread, not an
        ``asyncio.to_thread`` worker): the kernel kills a child when the thread that started it
        ends (see :class:`~kube_agent_sandbox.testing.processes.ProcessSupervisor`).

        Args:
            component: Process name: ``etcd``, ``kube-apiserver``, ``kube-controller-manager``
                or ``kube-scheduler``.
            grace: Seconds between TERM and KILL when stopping it.

        Raises:
            RuntimeError: If the cluster is not started.
            ValueError: If the component is not running in this cluster or cannot be restarted.
            ProcessFailedError: If it exits or is not ready in time after the restart.
        """
        if self.supervisor is None:
            raise RuntimeError("the cluster is not started")
        running = [p.name for p in self.supervisor.processes]
        if component not in running or component not in self._readiness:
            restartable = [name for name in running if name in self._readiness]
            raise ValueError(
                f"cannot restart {component!r}; restartable components of this cluster: "
                f"{', '.join(restartable) or 'none'}"
            )
        begin = time.monotonic()
        process = self.supervisor.restart(component, grace=grace)
        self._readiness[component](process)
        if component == "etcd" and "kube-apiserver" in running:
            [apiserver] = [p for p in self.supervisor.processes if p.name == "kube-apiserver"]
            self._wait_apiserver_ready(apiserver)
        _log.info("restarted %s in %.1fs", component, time.monotonic() - begin)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (what ``etcdctl compact`` does).

        Watches and lists from an older resourceVersion are then refused with 410 Gone once
        the API server's watch cache no longer holds them (at once after an API server
        restart), so clients must relist.

        Returns:
            The revision compacted to.

        Raises:
            RuntimeError: If the cluster is not started.
        """
        if not self._etcd_url:
            raise RuntimeError("the cluster is not started")
        return compact_etcd(self._etcd_url)

    def pids(self) -> list[int]:
        """Process ids of the running components."""
        return [p.pid for p in self.supervisor.processes] if self.supervisor else []

    def processes(self) -> list[ManagedProcess]:
        """The running components, in start order."""
        return self.supervisor.processes if self.supervisor else []

    def kubeconfig_for(self, user: str, *, groups: Sequence[str] = (), path: Path) -> Path:
        """Write a kubeconfig for ``user`` (in ``groups``) authenticated by a client certificate.

        Args:
            user: User name (certificate CN).
            groups: Groups (certificate O).
            path: Where to write it.

        Returns:
            ``path``.

        Raises:
            RuntimeError: If the cluster is not started.
        """
        if self.ca is None:
            raise RuntimeError("the cluster is not started")
        pair = self.ca.issue_client(user, groups=groups)
        return write_kubeconfig(
            path,
            server=self.server,
            ca_pem=self.ca.key_pair.cert_pem,
            user=user,
            client_cert_pem=pair.cert_pem,
            client_key_pem=pair.key_pem,
        )

    # -- components ------------------------------------------------------------------------

    def _timed(self, name: str, action: Any) -> None:
        begin = time.monotonic()
        action()
        self.timings[name] = time.monotonic() - begin

    def _path(self, name: str) -> Path:
        return self.workdir / name

    def _write_pki(self) -> None:
        pki_dir = self._path("pki")
        pki_dir.mkdir(exist_ok=True)
        self.ca = pki.CertificateAuthority()
        self.ca.key_pair.write(pki_dir, "ca")
        serving = self.ca.issue_serving(
            "kube-apiserver",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", SERVICE_IP],
        )
        serving.write(pki_dir, "apiserver")
        localhost = self.ca.issue_serving(
            "localhost", dns_names=["localhost"], ip_addresses=["127.0.0.1"]
        )
        localhost.write(pki_dir, "localhost")
        sa_key = pki_dir / "sa.key"
        sa_key.touch(mode=0o600)
        sa_key.write_bytes(pki.service_account_key())

    def _tls_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self._path("pki/ca.crt")))
        return context

    def _etcd_data_dir(self) -> Path:
        shm = Path("/dev/shm")
        if not (shm.is_dir() and os.access(shm, os.W_OK)):
            return self._path("etcd-data")
        remove_stale_etcd_dirs(shm)
        return Path(tempfile.mkdtemp(prefix=f"{ETCD_PREFIX}{os.getpid()}-", dir=shm))

    def _start_etcd(self) -> None:
        assert self.supervisor is not None
        port, peer = free_port(), free_port()
        data_dir = self._etcd_data_dir()
        self._etcd_url = f"http://127.0.0.1:{port}"
        begin = time.monotonic()
        process = self.supervisor.start(
            "etcd",
            [
                str(self.options.bin_dir / "etcd"),
                f"--data-dir={data_dir}",
                f"--listen-client-urls={self._etcd_url}",
                f"--advertise-client-urls={self._etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
                "--quota-backend-bytes=4294967296",
            ],
        )
        self._etcd_data = data_dir
        self._readiness["etcd"] = self._wait_etcd_ready
        self._wait_etcd_ready(process)
        self.timings["etcd"] = time.monotonic() - begin

    def _wait_etcd_ready(self, process: ManagedProcess) -> None:
        wait_until(
            lambda: http_ok(f"{self._etcd_url}/health"),
            timeout=self.options.start_timeout,
            what="etcd /health",
            process=process,
        )

    def _start_apiserver(self) -> None:
        assert self.supervisor is not None
        assert self.ca is not None
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        p = self._path("pki")
        begin = time.monotonic()
        # options.apiserver_args replace these flags by name (flags.merge_flags), so the
        # command line names each flag once; the real-node mode relies on that.
        harness_flags = [
            "--advertise-address=127.0.0.1",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self._path('apiserver-certs')}",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            f"--etcd-servers={self._etcd_url}",
            "--authorization-mode=Node,RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={p / 'sa.key'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            "--allow-privileged=true",
            # The "kubernetes" Service cannot point at a loopback address; nothing in the
            # cluster needs it to (kwok pods run nothing).
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            *self._audit_flags(),
            *(apiserver_kubelet_flags(p / "ca.crt") if self._serves_pod_logs() else []),
        ]
        process = self.supervisor.start(
            "kube-apiserver",
            [
                str(self.options.bin_dir / "kube-apiserver"),
                *merge_flags(harness_flags, self.options.apiserver_args),
            ],
        )
        admin = self.ca.issue_client("admin", groups=["system:masters"])
        write_kubeconfig(
            self._path("admin.kubeconfig"),
            server=self.server,
            ca_pem=self.ca.key_pair.cert_pem,
            user="admin",
            client_cert_pem=admin.cert_pem,
            client_key_pem=admin.key_pem,
        )
        context = self._tls_context()
        context.load_cert_chain(*admin.write(p, "admin"))
        self._admin_tls = context
        self._readiness["kube-apiserver"] = self._wait_apiserver_ready
        self._wait_apiserver_ready(process)
        self.timings["kube-apiserver"] = time.monotonic() - begin

    def _serves_pod_logs(self) -> bool:
        opts = self.options
        return opts.pod_logs and not opts.control_plane_only and opts.nodes > 0

    def _audit_flags(self) -> list[str]:
        """Audit the requests of ``AUDITED_NAMESPACE``'s service accounts at Metadata level."""
        policy = self._path("audit-policy.yaml")
        policy.write_text(AUDIT_POLICY)
        self.audit_log = self._path("logs") / "audit.jsonl"
        self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
        ]

    def _wait_apiserver_ready(self, process: ManagedProcess) -> None:
        context = self._admin_tls
        assert context is not None
        wait_until(
            lambda: https_ok(f"{self.server}/readyz", context),
            timeout=self.options.start_timeout,
            what="kube-apiserver /readyz",
            process=process,
        )

    def _component_kubeconfig(self, name: str, user: str, groups: Sequence[str] = ()) -> Path:
        return self.kubeconfig_for(user, groups=groups, path=self._path(f"{name}.kubeconfig"))

    def _start_secure_component(self, name: str, user: str, extra_args: Sequence[str]) -> None:
        """Start a component serving /healthz over TLS on a free port, without leader election."""
        assert self.supervisor is not None
        kubeconfig = self._component_kubeconfig(name, user)
        port = free_port()
        p = self._path("pki")
        process = self.supervisor.start(
            name,
            [
                str(self.options.bin_dir / name),
                f"--kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={p / 'localhost.crt'}",
                f"--tls-private-key-file={p / 'localhost.key'}",
                "--leader-elect=false",
                *extra_args,
            ],
        )
        self._wait_healthz(process, port)

    def _start_controller_manager(self) -> None:
        p = self._path("pki")
        self._start_secure_component(
            "kube-controller-manager",
            "system:kube-controller-manager",
            [
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={p / 'sa.key'}",
                f"--root-ca-file={p / 'ca.crt'}",
                f"--cluster-signing-cert-file={p / 'ca.crt'}",
                f"--cluster-signing-key-file={p / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*",
                "--concurrent-gc-syncs=20",
            ],
        )

    def _start_scheduler(self) -> None:
        self._start_secure_component("kube-scheduler", "system:kube-scheduler", [])

    def _wait_healthz(self, process: ManagedProcess, port: int) -> None:
        begin = time.monotonic()
        self._healthz_ready(process, port)
        self.timings[process.name] = time.monotonic() - begin
        self._readiness[process.name] = lambda restarted: self._healthz_ready(restarted, port)

    def _healthz_ready(self, process: ManagedProcess, port: int) -> None:
        context = self._tls_context()
        wait_until(
            lambda: https_ok(f"https://127.0.0.1:{port}/healthz", context),
            timeout=self.options.start_timeout,
            what=f"{process.name} /healthz",
            process=process,
        )

    def _start_registry(self) -> None:
        assert self.supervisor is not None
        assert self.options.registry is not None
        self.registry, _ = start_registry(
            self.options.registry,
            supervisor=self.supervisor,
            workdir=self._path("registry"),
            ca=self.ca,
            bin_dir=self.options.bin_dir,
            timeout=self.options.start_timeout,
        )

    def _start_kwok(self, stage_files: Sequence[Path]) -> None:
        assert self.supervisor is not None
        # kwok plays the kubelet of every fake node; it needs wide rights, like a node agent.
        kubeconfig = self._component_kubeconfig("kwok", "kwok", ["system:masters"])
        p = self._path("pki")
        log_server = (
            kwok_log_server_flags(free_port(), p / "localhost.crt", p / "localhost.key")
            if self._serves_pod_logs()
            else []
        )
        self.supervisor.start(
            "kwok",
            [
                str(self.options.bin_dir / "kwok"),
                f"--kubeconfig={kubeconfig}",
                *[f"--config={f}" for f in stage_files],
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                "--node-lease-duration-seconds=40",
                f"--cidr={POD_CIDR}",
                "--node-ip=127.0.0.1",
                *log_server,
            ],
        )

    def _wait_default_service_account(self) -> None:
        assert self.access is not None
        ref = ObjectRef("v1", "ServiceAccount", "default", "default")
        wait_for_object(
            self.access.api_client(),
            ref,
            lambda _: True,
            timeout=self.options.start_timeout,
            what="created by kube-controller-manager",
        )

    def _create_nodes(self) -> list[str]:
        assert self.access is not None
        nodes = self.access.dynamic().resources.get(api_version="v1", kind="Node")
        names = [f"kwok-node-{i}" for i in range(self.options.nodes)]
        for name in names:
            nodes.create(body=kwok_node(name))
        return names

    def _wait_nodes_ready(self, names: Sequence[str]) -> None:
        assert self.access is not None
        for name in names:
            wait_for_condition(
                self.access.api_client(),
                ObjectRef("v1", "Node", name),
                "Ready",
                timeout=self.options.start_timeout,
            )


def main(argv: Sequence[str] | None = None) -> int:
    """Start the local cluster, print how to use and stop it, and wait until interrupted.

    Args:
        argv: Command-line arguments (``sys.argv[1:]`` when None).

    Returns:
        Process exit status.
    """
    parser = argparse.ArgumentParser(description="Run the local test cluster until stopped.")
    parser.add_argument("--nodes", type=int, default=2, help="number of kwok nodes (default 2)")
    parser.add_argument(
        "--crds",
        type=Path,
        action="append",
        default=None,
        help="CRD file or directory to install (default: manifests/crds when it exists)",
    )
    parser.add_argument("--workdir", type=Path, help="keep certificates, kubeconfig, logs here")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    crds = args.crds
    if crds is None:
        default = Path.cwd() / "manifests" / "crds"
        crds = [default] if any(default.glob("*.yaml")) else []
    cluster = LocalCluster(
        LocalClusterOptions(
            nodes=args.nodes, crds=crds, workdir=args.workdir, keep_workdir=bool(args.workdir)
        )
    )
    stop_requested = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop_requested
        del signum, frame
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGHUP, request_stop)
    try:
        access = cluster.start()
        out = sys.stdout
        out.write(
            f"local cluster ready in {cluster.timings['total']:.1f}s (Kubernetes "
            f"{versions.KUBERNETES_VERSION}, etcd {versions.ETCD_VERSION}, kwok "
            f"{versions.KWOK_VERSION})\n"
            f"export KUBECONFIG={access.kubeconfig}\n"
            f"kubectl: {access.bin_dir / 'kubectl' if access.bin_dir else 'kubectl'}\n"
            f"logs: {cluster.workdir / 'logs'}\n"
            f"stop with Ctrl-C or kill {os.getpid()}\n"
        )
        out.flush()
        while not stop_requested:
            for process in cluster.processes():
                if not process.alive():
                    sys.stderr.write(
                        f"{process.name} exited ({process.returncode}):\n{process.log_tail()}\n"
                    )
                    return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
