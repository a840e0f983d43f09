"""containerd as a child process of the test harness, with its own folders and socket.

The real node's container runtime is Debian's containerd (CRI plugin built in) with runc. It
never touches the system service's paths: root, state, socket, runc's state and the CNI
configuration all live under one work folder, so several runs never share state and one run's
leftovers are found and removed by path. Images come from OCI archives (``import_image``);
nothing is ever pulled.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kube_agent_sandbox.testing.images.catalog import BuiltImage
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor, wait_until

_log = logging.getLogger(__name__)

CRI_NAMESPACE = "k8s.io"
DEFAULT_RUNTIME = "runc"
# Second handler for RuntimeClass tests: the same runc under another name.
ALTERNATE_RUNTIME = "runc-alt"


class ContainerdError(RuntimeError):
    """containerd could not be started, configured or asked to do something."""


def _q(value: str | Path) -> str:
    """A TOML basic string (JSON's string escaping is valid TOML)."""
    return json.dumps(str(value))


@dataclass(frozen=True)
class ContainerdLayout:
    """Every path containerd uses, all below one work folder."""

    workdir: Path

    @property
    def root(self) -> Path:
        """Persistent data (content store, snapshots, metadata)."""
        return self.workdir / "root"

    @property
    def state(self) -> Path:
        """Runtime state (task bundles, mounts)."""
        return self.workdir / "state"

    @property
    def socket(self) -> Path:
        """The gRPC socket the kubelet and ctr talk to."""
        return self.workdir / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        """runc's state, so leftover containers can be found without containerd."""
        return self.workdir / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        """CNI network configuration read by the CRI plugin."""
        return self.workdir / "cni" / "net.d"

    @property
    def config_file(self) -> Path:
        """containerd's configuration file."""
        return self.workdir / "config.toml"

    @property
    def registry_hosts_dir(self) -> Path:
        """``<host>/hosts.toml`` per registry; the CRI plugin reads them at each pull."""
        return self.workdir / "certs.d"


@dataclass(frozen=True)
class ContainerdSettings:
    """What the node asks of containerd."""

    sandbox_image: str
    cni_bin_dir: Path = Path("/usr/lib/cni")
    runc_binary: str = "runc"
    # Clamp pods' oom_score_adj at containerd's own: needed where the harness lacks
    # CAP_SYS_RESOURCE (runc then cannot lower it to -998 for the pause container).
    restrict_oom_score_adj: bool = False
    # Runtime handler name -> runc binary (RuntimeClass.handler names one of these).
    runtime_handlers: Mapping[str, str] = field(
        default_factory=lambda: {DEFAULT_RUNTIME: "runc", ALTERNATE_RUNTIME: "runc"}
    )
    # A folder holding another containerd, ctr and containerd-shim-runc-v2 (e.g. a 2.x built
    # from its Go module) used instead of the installed ones; None: the installed ones. It is
    # put first on containerd's PATH, so the shim, runc and criu found there win too.
    bin_dir: Path | None = None
    # Let the CRI plugin restore a container whose image is a checkpoint image (containerd
    # 2.0 to 2.3 only; 2.4 removed it). Needs containerd 2.x (``bin_dir``) and CRIU.
    restore_via_create: bool = False
    # A folder holding a newer ``criu`` (``build --with-criu``); put on containerd's PATH right
    # after ``bin_dir``, so runc, started by the shim, checkpoints and restores with it.
    criu_dir: Path | None = None


def render_config(layout: ContainerdLayout, settings: ContainerdSettings) -> str:
    """containerd 1.6+ configuration (schema version 2) for the node.

    Args:
        layout: Where containerd keeps its files.
        settings: Sandbox image, runtime handlers and CNI plugin folder.

    Returns:
        The TOML text.

    Raises:
        ContainerdError: If the default runtime handler is not among the handlers.
    """
    if DEFAULT_RUNTIME not in settings.runtime_handlers:
        raise ContainerdError(f"the runtime handlers must include {DEFAULT_RUNTIME!r}")
    if settings.restore_via_create and settings.bin_dir is None:
        raise ContainerdError("restore_via_create needs containerd 2.x: set bin_dir")
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    lines = [
        "version = 2",
        f"root = {_q(layout.root)}",
        f"state = {_q(layout.state)}",
        "disabled_plugins = ["
        + ", ".join(
            _q(f"io.containerd.snapshotter.v1.{name}")
            for name in ("btrfs", "zfs", "aufs", "devmapper")
        )
        + "]",
        "",
        "[grpc]",
        f"  address = {_q(layout.socket)}",
        "[ttrpc]",
        f"  address = {_q(str(layout.socket) + '.ttrpc')}",
        "[debug]",
        '  level = "info"',
        '[plugins."io.containerd.internal.v1.opt"]',
        f"  path = {_q(layout.workdir / 'opt')}",
        cri,
        f"  sandbox_image = {_q(settings.sandbox_image)}",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "  enable_selinux = false",
        f"  restrict_oom_score_adj = {str(settings.restrict_oom_score_adj).lower()}",
        *(
            ["  enable_experimental_restore_via_create = true"]
            if settings.restore_via_create
            else []
        ),
        # No swap accounting or tmpfs quirks: keep CRI defaults otherwise.
        f"{cri[:-1]}.registry]",
        f"  config_path = {_q(layout.registry_hosts_dir)}",
        f"{cri[:-1]}.containerd]",
        '  snapshotter = "overlayfs"',
        f"  default_runtime_name = {_q(DEFAULT_RUNTIME)}",
    ]
    for handler, binary in sorted(settings.runtime_handlers.items()):
        base = f"{cri[:-1]}.containerd.runtimes.{_q(handler)}"
        lines += [
            f"{base}]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"{base}.options]",
            "  SystemdCgroup = false",
            f"  BinaryName = {_q(binary)}",
            f"  Root = {_q(layout.runc_root)}",
        ]
    if settings.bin_dir is not None:
        # containerd 2.x serves NRI on a machine-wide socket by default; the node needs none.
        lines += ['[plugins."io.containerd.nri.v1.nri"]', "  disable = true"]
    lines += [
        f"{cri[:-1]}.cni]",
        f"  bin_dir = {_q(settings.cni_bin_dir)}",
        f"  conf_dir = {_q(layout.cni_conf_dir)}",
        "  max_conf_num = 1",
        "",
    ]
    return "\n".join(lines)


def containerd_environment(
    bin_dir: Path | None, base: Mapping[str, str], criu_dir: Path | None = None
) -> dict[str, str] | None:
    """containerd's environment: ``bin_dir`` and ``criu_dir`` first on PATH, or None (inherit).

    The shim, runc and criu are found on containerd's PATH (the shim inherits it), so a
    folder with a newer shim and criu must come before the installed ones.

    Args:
        bin_dir: Folder of the containerd to run (None: the installed one).
        base: The environment to extend (normally ``os.environ``).
        criu_dir: Folder of the criu to use (None: the one on PATH).

    Returns:
        The full environment, or None to inherit the parent's unchanged.
    """
    first = [str(d) for d in (bin_dir, criu_dir) if d is not None]
    if not first:
        return None
    env = dict(base)
    rest = env.get("PATH") or os.defpath
    env["PATH"] = os.pathsep.join([*first, rest])
    return env


_CAP_SYS_RESOURCE = 24


def can_lower_oom_score_adj() -> bool:
    """Whether this process holds CAP_SYS_RESOURCE (needed to lower a child's oom_score_adj)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError):
        pass
    return False


class Containerd:
    """A running containerd owned by the harness."""

    def __init__(
        self,
        layout: ContainerdLayout,
        settings: ContainerdSettings,
        *,
        supervisor: ProcessSupervisor,
    ) -> None:
        """Prepare (but do not start) containerd.

        Args:
            layout: Where containerd keeps its files.
            settings: Sandbox image, runtime handlers, CNI plugin folder.
            supervisor: Starts and, at the latest at exit, stops the process.
        """
        self.layout = layout
        self.settings = settings
        self._supervisor = supervisor
        self._process: ManagedProcess | None = None

    @property
    def endpoint(self) -> str:
        """CRI endpoint URL for the kubelet."""
        return f"unix://{self.layout.socket}"

    @property
    def process(self) -> ManagedProcess | None:
        """The containerd process once started."""
        return self._process

    def start(self, *, timeout: float = 60.0) -> None:
        """Write the configuration, start containerd and wait until it answers.

        Args:
            timeout: Seconds to wait for the socket to answer.

        Raises:
            ContainerdError: If containerd or ctr is missing.
            ProcessFailedError: If containerd exits or does not answer in time.
        """
        binary = self._tool("containerd")
        if binary is None or self._tool("ctr") is None:
            raise ContainerdError(self._missing_tools_message())
        for path in (self.layout.root, self.layout.state, self.layout.cni_conf_dir):
            path.mkdir(parents=True, exist_ok=True)
        self.layout.config_file.write_text(render_config(self.layout, self.settings))
        self._process = self._supervisor.start(
            "containerd",
            [binary, "--config", str(self.layout.config_file)],
            env=containerd_environment(self.settings.bin_dir, os.environ, self.settings.criu_dir),
        )
        wait_until(
            lambda: self.ctr("version", check=False, timeout=5).returncode == 0,
            timeout=timeout,
            what="containerd to answer on its socket",
            process=self._process,
            interval=0.2,
        )

    def _tool(self, name: str) -> str | None:
        """``name`` from ``bin_dir`` when set, else from PATH (None when missing)."""
        if self.settings.bin_dir is None:
            return shutil.which(name)
        path = self.settings.bin_dir / name
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None

    def _missing_tools_message(self) -> str:
        if self.settings.bin_dir is None:
            return "containerd and ctr are not installed (apt-get install containerd)"
        return (
            f"{self.settings.bin_dir} lacks containerd or ctr "
            "(python -m kube_agent_sandbox.testing.build --with-containerd2)"
        )

    def ctr(
        self, *args: str, check: bool = True, timeout: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``ctr`` against this containerd in the CRI namespace.

        Args:
            *args: ctr arguments after the global flags.
            check: Raise on a non-zero exit.
            timeout: Seconds before ctr is killed.

        Returns:
            The finished process.

        Raises:
            ContainerdError: If ctr fails and ``check`` is set.
        """
        argv = [
            self._tool("ctr") or "ctr",
            "--address",
            str(self.layout.socket),
            "--namespace",
            CRI_NAMESPACE,
            *args,
        ]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise ContainerdError(
                f"ctr {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def import_image(self, image: BuiltImage, *, also_as: Sequence[str] = ()) -> None:
        """Import an OCI archive (unpacked for the CRI plugin) and tag it under more names.

        Args:
            image: The archive to import.
            also_as: More references for the same image (e.g. the name a manifest uses).
        """
        self.ctr("images", "import", str(image.archive), timeout=600)
        for reference in also_as:
            self.ctr("images", "rm", reference, check=False)
            self.ctr("images", "tag", image.reference, reference)

    def trust_registry(self, host: str, *, url: str, ca_file: Path | None) -> Path:
        """Let the CRI plugin pull from ``host`` over ``url`` (a CA for HTTPS, or plain HTTP).

        Args:
            host: ``<address>:<port>`` as image references name it.
            url: ``https://host`` or ``http://host``.
            ca_file: CA bundle that verifies the registry (None over plain HTTP).

        Returns:
            The ``hosts.toml`` written.
        """
        folder = self.layout.registry_hosts_dir / host
        folder.mkdir(parents=True, exist_ok=True)
        lines = [f"server = {_q(url)}", f"[host.{_q(url)}]", '  capabilities = ["pull", "resolve"]']
        if ca_file is not None:
            lines.append(f"  ca = {_q(ca_file)}")
        path = folder / "hosts.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def image_references(self) -> list[str]:
        """References of the images containerd holds in the CRI namespace."""
        out = self.ctr("images", "ls", "-q").stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def remove_all_containers(self) -> None:
        """Kill and delete every container this containerd's runc started.

        Works from runc's own state, so it also cleans up after a containerd that died.
        """
        runc_root = self.layout.runc_root / CRI_NAMESPACE
        if not runc_root.is_dir():
            return
        listing = subprocess.run(
            [self.settings.runc_binary, "--root", str(runc_root), "list", "-q"],
            capture_output=True,
            text=True,
            check=False,
        )
        for container_id in listing.stdout.split():
            subprocess.run(
                [
                    self.settings.runc_binary,
                    "--root",
                    str(runc_root),
                    "delete",
                    "--force",
                    container_id,
                ],
                capture_output=True,
                check=False,
            )

    def kill_leftover_shims(self) -> None:
        """SIGKILL the runtime shims that served this containerd (found by its socket path).

        Shims outlive containerd by design; they are identified by PID from ``/proc``, by the
        socket path of this instance on their command line, never by program name alone.
        """
        marker = str(self.layout.socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and b"containerd-shim" in cmdline:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    continue
                _log.info("killed leftover containerd shim %s", entry.name)

    def stop(self) -> None:
        """Remove every container, stop containerd and its shims."""
        self.remove_all_containers()
        if self._process is not None:
            self._process.stop(grace=10.0)
        self.kill_leftover_shims()
