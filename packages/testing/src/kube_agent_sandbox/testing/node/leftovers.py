"""Cleaning up after real nodes: containers, shims, mounts, iptables rules and pod cgroups.

:func:`sweep_leftovers` runs before a node starts (a node whose harness died left them behind);
:func:`remove_kubepods_cgroups` runs when a node stops. Neither needs a running node's state,
so they live apart from :mod:`~kube_agent_sandbox.testing.node.realnode`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from kube_agent_sandbox.testing.images.common import unmount_below
from kube_agent_sandbox.testing.node.containerd import (
    Containerd,
    ContainerdLayout,
    ContainerdSettings,
)
from kube_agent_sandbox.testing.node.kubeproxy import kube_proxy_cleanup_command
from kube_agent_sandbox.testing.processes import ProcessSupervisor

WORKDIR_PREFIX = "asb-node-"


def sweep_leftovers(bin_dir: Path, *, tmp_root: Path = Path("/tmp")) -> None:
    """Clean up after real nodes whose harness died without stopping them.

    Called with the machine lock held, so no other node is running: containers still running
    from an earlier work folder are killed (through runc's state there), their shims too, its
    mounts released, and kube-proxy's iptables rules removed. The folders themselves stay (they
    hold the dead run's logs).

    Args:
        bin_dir: Folder of kube-proxy (for ``--cleanup``).
        tmp_root: Where temporary work folders are created.
    """
    swept = False
    for folder in sorted(tmp_root.glob(f"{WORKDIR_PREFIX}*")):
        layout = ContainerdLayout(folder / "containerd")
        if not layout.runc_root.is_dir():
            continue
        stale = Containerd(
            layout,
            ContainerdSettings(sandbox_image="unused:0"),
            supervisor=ProcessSupervisor(folder / "sweep-logs", die_with_parent=False),
        )
        stale.remove_all_containers()
        stale.kill_leftover_shims()
        unmount_below(folder)
        swept = True
    kube_proxy = bin_dir / "kube-proxy"
    if swept and os.access(kube_proxy, os.X_OK):
        subprocess.run(
            kube_proxy_cleanup_command(kube_proxy), capture_output=True, timeout=60, check=False
        )


def remove_kubepods_cgroups() -> None:
    """Remove the (now empty) pod cgroups the kubelet created in every v1 hierarchy."""
    root = Path("/sys/fs/cgroup")
    with contextlib.suppress(OSError):
        for hierarchy in root.iterdir():
            top = hierarchy / "kubepods"
            if not top.is_dir():
                continue
            for folder in sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            ):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
