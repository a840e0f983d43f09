"""Stopping the local cluster leaves no process behind, however it is stopped.

Each test starts ``python -m kube_agent_sandbox.testing.cluster`` in a subprocess, records the
component processes it started (its direct children), ends it with SIGTERM, SIGINT (Ctrl-C) or
SIGKILL, and checks that every component process is gone and (except after SIGKILL, where no
code can run) that etcd's data directory on /dev/shm is removed.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.plugin import unavailable

pytestmark = pytest.mark.integration

COMPONENTS = {"etcd", "kube-apiserver", "kube-controller", "kube-scheduler", "kwok"}


def _children(pid: int) -> dict[int, str]:
    """Direct children of ``pid``: pid -> command name (from /proc)."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ..."; comm may contain spaces, so split after the last ")".
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            found[int(entry.name)] = comm
    return found


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def _group_members(pgid: int) -> set[int]:
    """Running (non-zombie) processes of process group ``pgid``.

    Zombies are excluded: a container's PID 1 may never reap orphans, and a zombie no longer
    runs or holds anything but its process-table entry.
    """
    members: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.add(int(entry.name))
    return members


def _etcd_data_dir(pid: int) -> Path | None:
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    for arg in args:
        if arg.startswith(b"--data-dir="):
            return Path(arg.split(b"=", 1)[1].decode())
    return None


def _start_cluster(workdir: Path) -> subprocess.Popen[str]:
    if not (versions.bin_dir() / "kube-apiserver").exists():
        unavailable("cluster binaries missing: run nox -s testenv")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kube_agent_sandbox.testing.cluster",
            "--nodes=1",
            f"--workdir={workdir}",
            f"--crds={workdir / 'no-crds'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = proc.stdout
    threading.Thread(target=lambda: [lines.put(x) for x in stdout], daemon=True).start()
    output: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        output.append(line)
        if line.startswith("stop with Ctrl-C or kill"):
            assert line.split()[-1] == str(proc.pid)
            return proc
    proc.kill()
    proc.wait()
    pytest.fail("the cluster did not start:\n" + "".join(output[-40:]))


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name
)
def test_no_process_is_left_behind(tmp_path: Path, sig: signal.Signals) -> None:
    """Every component exits and its process group is empty after the runner is signalled."""
    (tmp_path / "no-crds").mkdir()
    proc = _start_cluster(tmp_path)
    children = _children(proc.pid)
    data_dir: Path | None = None
    try:
        assert set(children.values()) == COMPONENTS
        for pid in children:
            assert os.getpgid(pid) == pid, "each component leads its own process group"
        etcd_pid = next(p for p, name in children.items() if name == "etcd")
        data_dir = _etcd_data_dir(etcd_pid)
        assert data_dir is not None
        assert data_dir.is_dir()
        proc.send_signal(sig)
        proc.wait(timeout=90)
        survivors = {pid: name for pid, name in children.items() if _running(pid)}
        deadline = time.monotonic() + 10  # SIGKILL: the kernel's parent-death signal is async
        while survivors and time.monotonic() < deadline:
            time.sleep(0.1)
            survivors = {pid: name for pid, name in survivors.items() if _running(pid)}
        assert survivors == {}
        for pid in children:
            assert _group_members(pid) == set(), "nothing of the component's group runs"
        if sig != signal.SIGKILL:
            assert not data_dir.exists()
    finally:
        for pid in children:
            if _running(pid):
                os.killpg(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if sig == signal.SIGKILL and data_dir is not None and data_dir.exists():
            shutil.rmtree(data_dir)
