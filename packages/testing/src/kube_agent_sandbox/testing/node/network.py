"""The real node's network: one Linux bridge, CNI's bridge plugin, addresses private to the host.

Pods get addresses from a small private range on a bridge that only this machine knows; no
route leads to other hosts and pod traffic is never masqueraded, so nothing leaves the machine.
The bridge's own address is the node's InternalIP: the kubelet serves on it, the apiserver
reaches the kubelet through it, and pods reach the apiserver through it (see ``apiproxy``).
The bridge is created by the harness before anything else so that address exists from the
start; CNI's bridge plugin then attaches pods to it.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_log = logging.getLogger(__name__)

# Kernel settings a node needs: forward pod traffic, and let iptables (kube-proxy's Service
# rules) see traffic between pods on the same bridge.
_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/bridge/bridge-nf-call-iptables": "1",
}


# Chains the kubelet creates (and never removes) in each table, in removal order.
_KUBELET_CHAINS = {
    "filter": ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY"),
    "nat": ("KUBE-KUBELET-CANARY",),
    "mangle": ("KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"),
}
_IPTABLES = ("iptables", "ip6tables")


def _chains(program: str, table: str) -> set[str]:
    try:
        result = subprocess.run(
            [program, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        return set()
    return {line.split()[1] for line in result.stdout.splitlines() if line.startswith("-N ")}


def kubelet_chains_present() -> set[tuple[str, str, str]]:
    """The kubelet's iptables chains that exist now, as (program, table, chain)."""
    return {
        (program, table, chain)
        for program in _IPTABLES
        for table, names in _KUBELET_CHAINS.items()
        for chain in names
        if chain in _chains(program, table)
    }


def remove_kubelet_chains(keep: set[tuple[str, str, str]]) -> None:
    """Remove the kubelet's chains except those in ``keep`` (present before the node started).

    Args:
        keep: Chains that existed before, as returned by :func:`kubelet_chains_present`.
    """
    for program, table, chain in sorted(kubelet_chains_present() - keep):
        if chain == "KUBE-FIREWALL":
            for builtin in ("INPUT", "OUTPUT"):
                subprocess.run(
                    [program, "-w", "-t", table, "-D", builtin, "-j", chain],
                    capture_output=True,
                    check=False,
                )
        subprocess.run([program, "-w", "-t", table, "-F", chain], capture_output=True, check=False)
        subprocess.run([program, "-w", "-t", table, "-X", chain], capture_output=True, check=False)


class NetworkError(RuntimeError):
    """The node network could not be set up."""


@dataclass(frozen=True)
class NodeNetwork:
    """Addresses and names of the node network."""

    bridge: str = "asb0"
    pod_cidr: str = "10.213.0.0/24"
    network_name: str = "agent-sandbox"

    def __post_init__(self) -> None:
        """Validate the pod range and the bridge name."""
        network = ipaddress.ip_network(self.pod_cidr, strict=True)
        if network.version != 4 or network.prefixlen > 28:
            raise NetworkError(f"pod CIDR {self.pod_cidr} must be IPv4 with at least 16 addresses")
        if not network.is_private:
            raise NetworkError(f"pod CIDR {self.pod_cidr} must be a private range")
        if not self.bridge or len(self.bridge) > 15 or "/" in self.bridge:
            raise NetworkError(f"invalid bridge name {self.bridge!r} (1-15 chars, no '/')")

    @property
    def gateway(self) -> str:
        """The bridge's address: pods' default gateway and the node's InternalIP."""
        return str(next(ipaddress.ip_network(self.pod_cidr).hosts()))

    @property
    def prefix_length(self) -> int:
        """Prefix length of the pod range."""
        return ipaddress.ip_network(self.pod_cidr).prefixlen

    def cni_config(self, *, ipam_data_dir: Path) -> dict[str, Any]:
        """The CNI network configuration list (bridge + host-local IPAM, no masquerade).

        Args:
            ipam_data_dir: Where host-local records its allocations (per node run).

        Returns:
            The ``.conflist`` document.
        """
        hosts = list(ipaddress.ip_network(self.pod_cidr).hosts())
        return {
            "cniVersion": "1.0.0",
            "name": self.network_name,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(ipam_data_dir),
                        "ranges": [
                            [
                                {
                                    "subnet": self.pod_cidr,
                                    "gateway": self.gateway,
                                    "rangeStart": str(hosts[min(9, len(hosts) - 1)]),
                                    "rangeEnd": str(hosts[-1]),
                                }
                            ]
                        ],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }

    def write_cni_config(self, conf_dir: Path, *, ipam_data_dir: Path) -> Path:
        """Write the configuration list where containerd's CRI plugin reads it.

        Args:
            conf_dir: containerd's CNI configuration folder.
            ipam_data_dir: Where host-local records its allocations.

        Returns:
            The written file.
        """
        conf_dir.mkdir(parents=True, exist_ok=True)
        ipam_data_dir.mkdir(parents=True, exist_ok=True)
        path = conf_dir / f"10-{self.network_name}.conflist"
        path.write_text(json.dumps(self.cni_config(ipam_data_dir=ipam_data_dir), indent=2))
        return path


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError as err:
        raise NetworkError("the `ip` command (iproute2) is not installed") from err
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


@dataclass
class HostNetworkSetup:
    """Creates the bridge and kernel settings on the host, and undoes exactly that."""

    network: NodeNetwork
    _saved_sysctls: dict[str, str] = field(default_factory=dict)
    _created_bridge: bool = False
    _netns_before: set[str] = field(default_factory=set)
    _chains_before: set[tuple[str, str, str]] | None = None

    def bridge_exists(self) -> bool:
        """Whether the bridge interface exists."""
        return _ip("link", "show", self.network.bridge, check=False).returncode == 0

    def remove_stale_bridge(self) -> bool:
        """Delete a bridge left by a run that died (call only while holding the machine lock).

        Returns:
            Whether a stale bridge was removed.
        """
        if not self.bridge_exists():
            return False
        _log.warning("removing network interface %s left by an earlier run", self.network.bridge)
        _ip("link", "delete", self.network.bridge)
        return True

    def setup(self) -> None:
        """Create the bridge with the gateway address and set the node's kernel settings.

        Raises:
            NetworkError: If the bridge exists already (another node runs) or a step fails.
        """
        if self.bridge_exists():
            raise NetworkError(
                f"network interface {self.network.bridge} exists already: another real node "
                "runs on this machine, or a previous run did not clean up "
                f"(`ip link del {self.network.bridge}` removes it)"
            )
        self._netns_before = _netns_names()
        self._chains_before = kubelet_chains_present()
        _ip("link", "add", self.network.bridge, "type", "bridge")
        self._created_bridge = True
        _ip(
            "addr",
            "add",
            f"{self.network.gateway}/{self.network.prefix_length}",
            "dev",
            self.network.bridge,
        )
        _ip("link", "set", self.network.bridge, "up")
        for key, value in _SYSCTLS.items():
            path = Path("/proc/sys") / key
            try:
                old = path.read_text().strip()
                if old != value:
                    path.write_text(value)
                    self._saved_sysctls[key] = old
            except OSError as err:
                raise NetworkError(f"cannot set {key.replace('/', '.')}={value}: {err}") from err

    def teardown(self) -> None:
        """Remove the bridge, pod network namespaces, kubelet chains; restore sysctls."""
        if self._chains_before is not None:
            remove_kubelet_chains(self._chains_before)
            self._chains_before = None
        for name in sorted(_netns_names() - self._netns_before):
            if name.startswith("cni-"):
                _ip("netns", "delete", name, check=False)
        if self._created_bridge:
            _ip("link", "delete", self.network.bridge, check=False)
            self._created_bridge = False
        for key, old in self._saved_sysctls.items():
            try:
                (Path("/proc/sys") / key).write_text(old)
            except OSError:
                _log.warning("could not restore %s=%s", key, old)
        self._saved_sysctls.clear()


def _netns_names() -> set[str]:
    folder = Path("/var/run/netns")
    try:
        return {entry.name for entry in folder.iterdir()}
    except OSError:
        return set()
