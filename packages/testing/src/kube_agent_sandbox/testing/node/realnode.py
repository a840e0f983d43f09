"""A real node joined to the local control plane: the hook between the node and the cluster.

:class:`RealNode` stays one class in this module: its ``prepare``, ``start`` and ``stop``
share the private network, CA, processes and working directory of one node. What needs no
node's state lives apart: the check of the host's prerequisites (``prerequisites``) and the
clean-up after dead nodes (``leftovers``).

Use it in two steps around :class:`~kube_agent_sandbox.testing.cluster.LocalCluster`::

    node = RealNode(RealNodeOptions())
    node.prepare()                                   # network, containerd, images
    cluster = LocalCluster(LocalClusterOptions(nodes=0, apiserver_args=node.apiserver_args()))
    cluster.start()
    node.start(cluster)                              # kubelet, kube-proxy, storage, classes
    ...
    node.stop(); cluster.stop()

``prepare`` needs nothing from the cluster; ``apiserver_args`` tells the apiserver how to reach
and trust the kubelet and which address to advertise; ``start`` needs only the cluster's CA,
its apiserver URL and an admin kubeconfig (:class:`ControlPlane`).
"""

from __future__ import annotations

import atexit
import logging
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from kube_agent_sandbox.testing import pki, versions
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.images.catalog import BuiltImage, pause_image, python_image
from kube_agent_sandbox.testing.images.common import unmount_below
from kube_agent_sandbox.testing.node.apiproxy import TcpRelay
from kube_agent_sandbox.testing.node.containerd import (
    ALTERNATE_RUNTIME,
    DEFAULT_RUNTIME,
    Containerd,
    ContainerdLayout,
    ContainerdSettings,
    can_lower_oom_score_adj,
)
from kube_agent_sandbox.testing.node.kubelet import (
    KubeletSettings,
    kubelet_command,
    render_kubelet_config,
)
from kube_agent_sandbox.testing.node.kubeproxy import (
    KubeProxySettings,
    kube_proxy_cleanup_command,
    kube_proxy_command,
    render_kube_proxy_config,
)
from kube_agent_sandbox.testing.node.leftovers import (
    WORKDIR_PREFIX,
    remove_kubepods_cgroups,
    sweep_leftovers,
)
from kube_agent_sandbox.testing.node.lock import MachineLock
from kube_agent_sandbox.testing.node.network import HostNetworkSetup, NodeNetwork
from kube_agent_sandbox.testing.node.prerequisites import find_cni_bin_dir, missing_prerequisites
from kube_agent_sandbox.testing.node.storage import HostPathProvisioner
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor, wait_until
from kube_agent_sandbox.testing.registry import RunningRegistry
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_condition

_log = logging.getLogger(__name__)

#: RuntimeClass name -> containerd runtime handler.
RUNTIME_CLASSES = {DEFAULT_RUNTIME: DEFAULT_RUNTIME, ALTERNATE_RUNTIME: ALTERNATE_RUNTIME}


class RealNodeError(RuntimeError):
    """The real node cannot run here or failed to start."""


class ControlPlane(Protocol):
    """What the node needs from the cluster (``LocalCluster`` satisfies it)."""

    server: str
    ca: pki.CertificateAuthority | None
    access: ClusterAccess | None

    def kubeconfig_for(self, user: str, *, groups: Sequence[str] = (), path: Path) -> Path:
        """Write a client-certificate kubeconfig for ``user`` in ``groups``."""
        ...


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class RealNodeOptions:
    """How to run the real node."""

    #: Node name (also its hostname label).
    node_name: str = "agent-sandbox-node"
    #: Bridge and pod range.
    network: NodeNetwork = field(default_factory=NodeNetwork)
    #: Folder of kubelet and kube-proxy.
    bin_dir: Path = field(default_factory=versions.bin_dir)
    #: Work folder; a new short temporary one under /tmp when None (socket paths are short).
    workdir: Path | None = None
    #: Keep the work folder after stop.
    keep_workdir: bool = False
    #: Run kube-proxy (needed for Services: webhooks, in-cluster apiserver access).
    kube_proxy: bool = True
    #: Images imported into containerd besides the pause and Python images.
    extra_images: Sequence[BuiltImage] = ()
    #: Seconds for each component to become ready.
    start_timeout: float = 120.0
    #: Seconds to wait for another real node on this machine to stop.
    lock_timeout: float = 900.0
    #: Folder of a containerd 2.x (containerd, ctr, containerd-shim-runc-v2, and criu if the
    #: installed one is too old) to run instead of the installed containerd, with restore of
    #: checkpoint images on (``build --with-containerd2`` builds it); None: the installed one.
    containerd_bin_dir: Path | None = None
    #: Folder of a newer ``criu`` for that containerd (``build --with-criu`` builds it into
    #: ``versions.criu_bin_dir()``); None: the ``criu`` on PATH.
    criu_bin_dir: Path | None = None


class RealNode:
    """kubelet + containerd + runc + CNI bridge (+ kube-proxy) registered to a control plane."""

    def __init__(self, options: RealNodeOptions | None = None) -> None:
        """Prepare (but do not start) the node.

        Args:
            options: How to run it; defaults when None.
        """
        self.options = options or RealNodeOptions()
        self.timings: dict[str, float] = {}
        self.workdir = Path()
        self.python_image: BuiltImage | None = None
        self.containerd: Containerd | None = None
        self._tmp = False
        self._lock = MachineLock()
        self._network = HostNetworkSetup(self.options.network)
        self._supervisor: ProcessSupervisor | None = None
        self._node_ca: pki.CertificateAuthority | None = None
        self._relay: TcpRelay | None = None
        self._provisioner: HostPathProvisioner | None = None
        self._kubelet: ManagedProcess | None = None
        self._kube_proxy: ManagedProcess | None = None
        self._prepared = False

    # -- paths -----------------------------------------------------------------------------

    @property
    def node_ip(self) -> str:
        """The node's InternalIP (the bridge address)."""
        return self.options.network.gateway

    def _path(self, *parts: str) -> Path:
        return self.workdir.joinpath(*parts)

    @property
    def log_dir(self) -> Path:
        """Folder of the node components' log files."""
        return self._path("logs")

    def log_files(self) -> dict[str, Path]:
        """Component name -> log file, for the components started so far."""
        if self._supervisor is None:
            return {}
        return {f"node/{p.name}": p.log_path for p in self._supervisor.processes}

    # -- phase 1: before the control plane ---------------------------------------------------

    def prepare(self) -> None:
        """Lock the machine's node slot, build images, set up the bridge, start containerd.

        Raises:
            RealNodeError: If a prerequisite is missing.
            NodeBusyError: If another real node keeps running on this machine.
        """
        reasons = missing_prerequisites(self.options.bin_dir)
        if reasons:
            raise RealNodeError("a real node cannot run here: " + "; ".join(reasons))
        self._lock.acquire(timeout=self.options.lock_timeout)
        # Runs before the supervisors' own exit hook (atexit is last-in, first-out), so
        # containers are removed while containerd still runs.
        atexit.register(self.stop)
        try:
            self._prepare_locked()
        except BaseException:
            self.stop()
            raise
        self._prepared = True

    def _prepare_locked(self) -> None:
        begin = time.monotonic()
        sweep_leftovers(self.options.bin_dir)
        self._network.remove_stale_bridge()
        if self.options.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir="/tmp"))
            self._tmp = True
        else:
            self.workdir = self.options.workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
        self._supervisor = ProcessSupervisor(self.log_dir)
        self._write_pki()

        started = time.monotonic()
        pause = pause_image()
        self.python_image = python_image()
        self.timings["images"] = time.monotonic() - started

        started = time.monotonic()
        self._network.setup()
        self._alternate_runc()
        cni_bin = find_cni_bin_dir()
        assert cni_bin is not None
        layout = ContainerdLayout(self._path("containerd"))
        self.options.network.write_cni_config(
            layout.cni_conf_dir, ipam_data_dir=self._path("cni", "ipam")
        )
        self.containerd = Containerd(
            layout,
            ContainerdSettings(
                sandbox_image=pause.reference,
                cni_bin_dir=cni_bin,
                restrict_oom_score_adj=not can_lower_oom_score_adj(),
                runtime_handlers={
                    DEFAULT_RUNTIME: shutil.which("runc") or "runc",
                    ALTERNATE_RUNTIME: str(self._path("bin", ALTERNATE_RUNTIME)),
                },
                bin_dir=self.options.containerd_bin_dir,
                restore_via_create=self.options.containerd_bin_dir is not None,
                criu_dir=self.options.criu_bin_dir,
            ),
            supervisor=self._supervisor,
        )
        self.containerd.start(timeout=self.options.start_timeout)
        self.timings["containerd"] = time.monotonic() - started

        started = time.monotonic()
        for image in (pause, self.python_image, *self.options.extra_images):
            self.containerd.import_image(image)
        self.timings["image-import"] = time.monotonic() - started
        self.timings["prepare"] = time.monotonic() - begin

    def _write_pki(self) -> None:
        folder = self._path("pki")
        folder.mkdir(parents=True, exist_ok=True)
        self._node_ca = pki.CertificateAuthority("agent-sandbox-node-ca")
        self._node_ca.key_pair.write(folder, "node-ca")
        self._node_ca.issue_serving(
            self.options.node_name,
            dns_names=[self.options.node_name],
            ip_addresses=[self.node_ip],
        ).write(folder, "kubelet-serving")
        # The apiserver's identity towards the kubelet (exec, logs, port-forward).
        self._node_ca.issue_client(
            "kube-apiserver-kubelet-client", groups=["system:masters"]
        ).write(folder, "apiserver-kubelet-client")

    def _alternate_runc(self) -> None:
        """The second runtime handler: runc behind a wrapper that records each call.

        The record proves which handler ran a pod (RuntimeClass tests read it).
        """
        folder = self._path("bin")
        folder.mkdir(parents=True, exist_ok=True)
        self.runtime_calls_file(ALTERNATE_RUNTIME).parent.mkdir(parents=True, exist_ok=True)
        runc = shutil.which("runc") or "runc"
        wrapper = folder / ALTERNATE_RUNTIME
        wrapper.write_text(
            "#!/bin/sh\n"
            f'echo "$*" >> {self.runtime_calls_file(ALTERNATE_RUNTIME)}\n'
            f'exec {runc} "$@"\n'
        )
        wrapper.chmod(0o755)

    def runtime_calls_file(self, handler: str) -> Path:
        """File where the wrapper of runtime ``handler`` records its command lines.

        Args:
            handler: A runtime handler name (only the alternate one records calls).

        Returns:
            The path (it may not exist before the first call).
        """
        return self._path("runtime-calls", f"{handler}.log")

    def apiserver_args(self) -> list[str]:
        """kube-apiserver flags that let it reach and trust this node's kubelet.

        Returns:
            The flags (``--name=value``); call after :meth:`prepare`.

        Raises:
            RealNodeError: If the node was not prepared.
        """
        if not self._prepared:
            raise RealNodeError("call prepare() before apiserver_args()")
        pki_dir = self._path("pki")
        return [
            # The `kubernetes` Service's endpoint: pods reach it through the relay.
            f"--advertise-address={self.node_ip}",
            # The harness turns the reconciler off for loopback-only clusters; a real node
            # needs the endpoint to exist. These flags replace the harness's of the same name
            # (LocalClusterOptions.apiserver_args merge by name).
            "--endpoint-reconciler-type=lease",
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={pki_dir / 'node-ca.crt'}",
            f"--kubelet-client-certificate={pki_dir / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki_dir / 'apiserver-kubelet-client.key'}",
        ]

    # -- phase 2: with the control plane -----------------------------------------------------

    def start(self, control_plane: ControlPlane) -> None:
        """Relay, kubelet, kube-proxy, RuntimeClasses, storage; wait until the Node is Ready.

        Args:
            control_plane: The running cluster (``LocalCluster``).

        Raises:
            RealNodeError: If the node was not prepared or the cluster is not running.
            ProcessFailedError: If a component exits or is not ready in time.
        """
        if not self._prepared or self.containerd is None or self._supervisor is None:
            raise RealNodeError("call prepare() before start()")
        access = control_plane.access
        if access is None or control_plane.ca is None:
            raise RealNodeError("the control plane is not running")
        begin = time.monotonic()
        try:
            apiserver_port = urlsplit(control_plane.server).port or 443
            self._relay = TcpRelay(
                self.node_ip, apiserver_port, target_host="127.0.0.1", target_port=apiserver_port
            )
            self._relay.start()
            self._start_kubelet(control_plane)
            if self.options.kube_proxy:
                self._start_kube_proxy(control_plane)
            api = access.api_client()
            wait_for_condition(
                api,
                ObjectRef("v1", "Node", self.options.node_name),
                "Ready",
                timeout=self.options.start_timeout,
            )
            self.timings["node-ready"] = time.monotonic() - begin
            self._create_runtime_classes(api)
            self._provisioner = HostPathProvisioner(
                api, node_name=self.options.node_name, base_dir=self._path("volumes")
            )
            self._provisioner.start()
            access.log_files.update(self.log_files())
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - begin
        _log.info("real node %s ready in %.1fs", self.options.node_name, self.timings["start"])

    def _start_kubelet(self, control_plane: ControlPlane) -> None:
        assert self._supervisor is not None
        assert self.containerd is not None
        name = self.options.node_name
        kubeconfig = control_plane.kubeconfig_for(
            f"system:node:{name}", groups=["system:nodes"], path=self._path("kubelet.kubeconfig")
        )
        pki_dir = self._path("pki")
        settings = KubeletSettings(
            node_name=name,
            node_ip=self.node_ip,
            port=_free_port(),
            healthz_port=_free_port(),
            runtime_endpoint=self.containerd.endpoint,
            root_dir=self._path("kubelet"),
            client_ca_file=pki_dir / "node-ca.crt",
            tls_cert_file=pki_dir / "kubelet-serving.crt",
            tls_key_file=pki_dir / "kubelet-serving.key",
            pod_cidr=self.options.network.pod_cidr,
        )
        settings.root_dir.mkdir(parents=True, exist_ok=True)
        config_file = self._path("kubelet-config.yaml")
        config_file.write_text(yaml.safe_dump(render_kubelet_config(settings), sort_keys=False))
        self._kubelet = self._supervisor.start(
            "kubelet",
            kubelet_command(
                self.options.bin_dir / "kubelet",
                config_file=config_file,
                kubeconfig=kubeconfig,
                settings=settings,
            ),
        )
        self._wait_healthz(self._kubelet, settings.healthz_port)

    def _start_kube_proxy(self, control_plane: ControlPlane) -> None:
        assert self._supervisor is not None
        kubeconfig = control_plane.kubeconfig_for(
            "system:kube-proxy", path=self._path("kube-proxy.kubeconfig")
        )
        settings = KubeProxySettings(
            node_name=self.options.node_name,
            kubeconfig=kubeconfig,
            cluster_cidr=self.options.network.pod_cidr,
            healthz_port=_free_port(),
            metrics_port=_free_port(),
        )
        config_file = self._path("kube-proxy-config.yaml")
        config_file.write_text(yaml.safe_dump(render_kube_proxy_config(settings), sort_keys=False))
        self._kube_proxy = self._supervisor.start(
            "kube-proxy",
            kube_proxy_command(self.options.bin_dir / "kube-proxy", config_file=config_file),
        )
        self._wait_healthz(self._kube_proxy, settings.healthz_port)

    def _wait_healthz(self, process: ManagedProcess, port: int) -> None:
        """Wait until ``process`` answers 200 on its plain-HTTP /healthz at ``port``."""

        def healthy() -> bool:
            url = f"http://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(response.status == 200)

        wait_until(
            healthy,
            timeout=self.options.start_timeout,
            what=f"{process.name} /healthz",
            process=process,
            interval=0.2,
        )

    def _create_runtime_classes(self, api: client.ApiClient) -> None:
        classes = dynamic.DynamicClient(api).resources.get(  # type: ignore[no-untyped-call]
            api_version="node.k8s.io/v1", kind="RuntimeClass"
        )
        for name, handler in RUNTIME_CLASSES.items():
            body: dict[str, Any] = {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": name},
                "handler": handler,
            }
            try:
                classes.create(body=body)
            except ApiException as err:
                if err.status != 409:
                    raise

    # -- use ---------------------------------------------------------------------------------

    def import_image(self, image: BuiltImage, *, also_as: Sequence[str] = ()) -> None:
        """Import another image into the node's containerd.

        Args:
            image: The OCI archive.
            also_as: More references for it (e.g. the name a manifest uses).

        Raises:
            RealNodeError: If the node was not prepared.
        """
        if self.containerd is None:
            raise RealNodeError("the node is not prepared")
        self.containerd.import_image(image, also_as=also_as)

    def trust_registry(self, registry: RunningRegistry) -> None:
        """Let the node's containerd pull from ``registry`` (its CA, or plain HTTP).

        Raises:
            RealNodeError: If the node was not prepared.
        """
        if self.containerd is None:
            raise RealNodeError("the node is not prepared")
        self.containerd.trust_registry(registry.host, url=registry.url, ca_file=registry.ca_file)

    # -- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything the node started and undo its changes to the machine."""
        if not self._lock.held:
            # Never started (or already stopped): the machine-wide state is not ours to touch.
            return
        steps: list[tuple[str, Callable[[], None]]] = [
            ("provisioner", self._stop_provisioner),
            ("relay", self._stop_relay),
            ("kube-proxy", self._stop_kube_proxy),
            ("kubelet", self._stop_kubelet),
            ("containerd", self._stop_containerd),
            ("mounts", self._unmount),
            ("network", self._network.teardown),
            ("cgroups", remove_kubepods_cgroups),
            ("workdir", self._remove_workdir),
        ]
        spent: dict[str, float] = {}
        for name, step in steps:
            started = time.monotonic()
            try:
                step()
            except Exception:  # keep undoing the rest whatever one step does
                _log.exception("stopping the real node: %s failed", name)
            spent[name] = time.monotonic() - started
        self.timings["stop"] = sum(spent.values())
        _log.info(
            "real node stopped in %.1fs (%s)",
            self.timings["stop"],
            ", ".join(f"{k} {v:.1f}s" for k, v in spent.items() if v >= 0.1),
        )
        self._provisioner = None
        self._relay = None
        self._kubelet = None
        self._kube_proxy = None
        self.containerd = None
        self._prepared = False
        self._lock.release()
        atexit.unregister(self.stop)

    def _stop_provisioner(self) -> None:
        if self._provisioner is not None:
            self._provisioner.stop()

    def _stop_relay(self) -> None:
        if self._relay is not None:
            self._relay.stop()

    def _stop_kubelet(self) -> None:
        if self._kubelet is not None:
            self._kubelet.stop(grace=10)

    def _stop_containerd(self) -> None:
        if self.containerd is not None:
            self.containerd.stop()
        if self._supervisor is not None:
            self._supervisor.stop_all()

    def _unmount(self) -> None:
        if self.workdir != Path():
            unmount_below(self.workdir)

    def _stop_kube_proxy(self) -> None:
        if self._kube_proxy is None:
            return
        self._kube_proxy.stop(grace=10)
        subprocess.run(
            kube_proxy_cleanup_command(self.options.bin_dir / "kube-proxy"),
            capture_output=True,
            timeout=60,
            check=False,
        )

    def _remove_workdir(self) -> None:
        if self._tmp and not self.options.keep_workdir and self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._tmp = False
