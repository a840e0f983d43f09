"""What a real node needs on this machine, and the check that lists what is missing.

Kept apart from :mod:`~kube_agent_sandbox.testing.node.realnode` because callers that only ask
whether a real node can run here (the cluster providers, the demo, the conformance runner) need
none of the node itself.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kube_agent_sandbox.testing import versions

#: Programs the real node needs on the host, with the Debian package that provides each.
HOST_PROGRAMS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "runc": "runc",
    "ip": "iproute2",
    "iptables": "iptables",
    "iptables-restore": "iptables",
    "debootstrap": "debootstrap",
}
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))


def find_cni_bin_dir() -> Path | None:
    """The folder holding the CNI plugins the node uses, if any."""
    for folder in CNI_BIN_DIRS:
        if all((folder / plugin).is_file() for plugin in CNI_PLUGINS):
            return folder
    return None


def missing_prerequisites(bin_dir: Path | None = None) -> list[str]:
    """Everything missing for a real node on this machine, as readable reasons.

    Args:
        bin_dir: Folder of the built Kubernetes binaries (the pinned one when None).

    Returns:
        One line per missing thing; empty when the node can start.
    """
    reasons: list[str] = []
    if os.geteuid() != 0:
        reasons.append("a real node needs root (containers, bridges, iptables, cgroups)")
    for program, package in HOST_PROGRAMS.items():
        if shutil.which(program) is None:
            reasons.append(f"{program} not found (apt-get install {package})")
    if find_cni_bin_dir() is None:
        reasons.append(
            f"CNI plugins {', '.join(CNI_PLUGINS)} not found in "
            f"{' or '.join(map(str, CNI_BIN_DIRS))} (apt-get install containernetworking-plugins)"
        )
    if shutil.which("go") is None:
        reasons.append("go not found (it compiles the pod sandbox image)")
    folder = bin_dir or versions.bin_dir()
    for name in versions.NODE_BINARIES:
        if not os.access(folder / name, os.X_OK):
            reasons.append(
                f"{folder / name} missing (python -m kube_agent_sandbox.testing.build --with-node)"
            )
    if not Path("/proc/sys/net/bridge").is_dir():
        reasons.append("the kernel lacks bridge netfilter (/proc/sys/net/bridge)")
    return reasons
