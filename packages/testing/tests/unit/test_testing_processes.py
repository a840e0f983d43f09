"""Supervised processes: own process groups, logs, TERM then KILL, reverse order, no strays."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from kube_agent_sandbox.testing.processes import (
    ProcessFailedError,
    ProcessSupervisor,
    wait_until,
)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_process_runs_in_its_own_group_and_logs_to_a_file(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    process = supervisor.start(
        "hello", _python("print('hello out'); import sys; sys.stderr.write('err\\n')")
    )
    assert process.wait(30) == 0
    assert process.log_path == tmp_path / "hello.log"
    assert process.log_tail().splitlines() == ["hello out", "err"]
    supervisor.stop_all()


def test_each_process_leads_a_new_process_group(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    process = supervisor.start("sleeper", ["sleep", "60"])
    try:
        assert os.getpgid(process.pid) == process.pid
        assert os.getpgid(process.pid) != os.getpgid(0)
    finally:
        supervisor.stop_all()
    assert not _running(process.pid)


def test_stop_kills_the_whole_group_including_grandchildren(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    process = supervisor.start(
        "parent", ["sh", "-c", "sleep 60 & echo $! > grandchild.pid; wait"], cwd=tmp_path
    )
    pid_file = tmp_path / "grandchild.pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", timeout=30,
               what="grandchild pid", process=process)  # fmt: skip
    grandchild = int(pid_file.read_text())
    assert _running(grandchild)
    supervisor.stop_all()
    assert not process.alive()
    wait_until(lambda: not _running(grandchild), timeout=10, what="grandchild gone")


def test_a_process_ignoring_term_is_killed(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    code = (
        "import signal, time, pathlib\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "pathlib.Path('ready').touch()\n"
        "time.sleep(60)\n"
    )
    process = supervisor.start("stubborn", _python(code), cwd=tmp_path)
    wait_until((tmp_path / "ready").exists, timeout=30, what="ready", process=process)
    process.stop(grace=0.5)
    assert process.returncode == -signal.SIGKILL


def test_stop_all_stops_in_reverse_start_order(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    code = (
        "import signal, sys, time, pathlib\n"
        "name = sys.argv[1]\n"
        "def bye(*_):\n"
        "    with open('order', 'a') as f: f.write(name + '\\n')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "pathlib.Path(name).touch()\n"
        "time.sleep(60)\n"
    )
    for name in ("first", "second", "third"):
        process = supervisor.start(name, [*_python(code), name], cwd=tmp_path)
        wait_until((tmp_path / name).exists, timeout=30, what=name, process=process)
    supervisor.stop_all()
    assert (tmp_path / "order").read_text().split() == ["third", "second", "first"]
    supervisor.stop_all()  # idempotent
    assert supervisor.processes == []


def test_stop_by_name(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    a = supervisor.start("a", ["sleep", "60"])
    b = supervisor.start("b", ["sleep", "60"])
    supervisor.stop("a")
    assert not a.alive()
    assert b.alive()
    assert [p.name for p in supervisor.processes] == ["b"]
    with pytest.raises(KeyError):
        supervisor.stop("a")
    supervisor.stop_all()


def test_names_are_unique_and_argv_not_empty(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    supervisor.start("x", ["sleep", "60"])
    try:
        with pytest.raises(ValueError, match="already started"):
            supervisor.start("x", ["sleep", "60"])
        with pytest.raises(ValueError, match="argv must not be empty"):
            supervisor.start("y", [])
    finally:
        supervisor.stop_all()


def test_missing_program_raises(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path, die_with_parent=False)
    with pytest.raises(FileNotFoundError):
        supervisor.start("ghost", [str(tmp_path / "no-such-binary")])


def test_wait_until_fails_fast_when_the_process_exits(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    process = supervisor.start("crash", _python("print('about to fail'); raise SystemExit(3)"))
    with pytest.raises(ProcessFailedError, match=r"crash exited with status 3[\s\S]*about to fail"):
        wait_until(lambda: False, timeout=60, what="never", process=process)


def test_wait_until_times_out_with_the_last_error() -> None:
    def check() -> bool:
        raise ConnectionRefusedError("not yet")

    with pytest.raises(ProcessFailedError, match=r"timed out .* waiting for thing .*not yet"):
        wait_until(check, timeout=0.2, what="thing", interval=0.05)


def test_wait_until_returns_when_the_check_passes() -> None:
    calls: list[int] = []

    def check() -> bool:
        calls.append(1)
        return len(calls) == 3

    wait_until(check, timeout=30, what="third call", interval=0.01)
    assert len(calls) == 3


def test_child_dies_with_its_parent(tmp_path: Path) -> None:
    """Parent-death signal: SIGKILL of the supervising Python kills the children too."""
    code = (
        "import sys, time, pathlib\n"
        "from kube_agent_sandbox.testing.processes import ProcessSupervisor\n"
        "p = ProcessSupervisor(pathlib.Path(sys.argv[1])).start('s', ['sleep', '60'])\n"
        "pathlib.Path(sys.argv[1], 'pid').write_text(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    supervisor = ProcessSupervisor(tmp_path / "outer")
    outer = supervisor.start("outer", [*_python(code), str(tmp_path)])
    pid_file = tmp_path / "pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text() != "", timeout=30,
               what="child pid", process=outer)  # fmt: skip
    child = int(pid_file.read_text())
    assert _running(child)
    os.kill(outer.pid, signal.SIGKILL)
    outer.wait(10)
    wait_until(lambda: not _running(child), timeout=10, what="child killed with its parent")
    supervisor.stop_all()


def test_restart_reruns_the_same_command_in_the_same_place(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path / "logs")
    first = supervisor.start("first", ["sleep", "60"])
    code = "import os, sys; print(sys.argv[1], os.getcwd(), os.environ['MARK'], flush=True)"
    env = {**os.environ, "MARK": "m1"}
    old = supervisor.start("echo", [*_python(code), "arg"], env=env, cwd=tmp_path)
    last = supervisor.start("last", ["sleep", "60"])
    try:
        assert old.wait(30) == 0
        new = supervisor.restart("echo")
        assert new.wait(30) == 0
        assert new.pid != old.pid
        assert new.argv == old.argv == (*_python(code), "arg")
        assert new.log_path == old.log_path
        line = f"arg {tmp_path} m1"
        assert new.log_tail().splitlines() == [line, line]  # appended, same cwd and env
        assert [p.name for p in supervisor.processes] == ["first", "echo", "last"]
        assert supervisor.processes[1] is new
        assert first.alive()
        assert last.alive()
    finally:
        supervisor.stop_all()


def test_restart_stops_the_running_process_first(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    old = supervisor.start("sleeper", ["sleep", "60"])
    try:
        new = supervisor.restart("sleeper", grace=5)
        assert not _running(old.pid)
        assert new.alive()
        assert [p.pid for p in supervisor.processes] == [new.pid]
    finally:
        supervisor.stop_all()
    assert not _running(new.pid)


def test_restart_of_an_unknown_name_raises(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path)
    with pytest.raises(KeyError):
        supervisor.restart("nothing")
    supervisor.start("a", ["sleep", "60"])
    supervisor.stop("a")
    with pytest.raises(KeyError):
        supervisor.restart("a")
    assert supervisor.processes == []
