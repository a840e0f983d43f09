"""Processes the daemon starts: spawn, output fan-out, stdin, signals, PTYs.

Each process runs in its own session (so a kill reaches its children too) as the request's
user. Its output is read as it comes (no line buffering) and published as proto3-JSON
``ProcessEvent`` dicts to every subscriber: the ``Start`` stream that created it and any number
of ``Connect`` streams attached later. A subscriber sees events from the moment it subscribes;
the ``end`` event is published only after the output pipes are drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import struct
import subprocess
import termios
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kube_agent_sandbox.sandboxd.connect_codec import b64encode
from kube_agent_sandbox.sandboxd.users import User

logger = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
# After the main process exits, how long to wait for grandchildren still holding its pipes.
DRAIN_GRACE_SECONDS = 0.5
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# How Go's os.ProcessState.String() names signals (envd reports that text as `status`).
_GO_SIGNAL_TEXT = {
    signal.SIGHUP: "hangup",
    signal.SIGINT: "interrupt",
    signal.SIGQUIT: "quit",
    signal.SIGILL: "illegal instruction",
    signal.SIGTRAP: "trace/breakpoint trap",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "floating point exception",
    signal.SIGKILL: "killed",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGUSR2: "user defined signal 2",
    signal.SIGPIPE: "broken pipe",
    signal.SIGALRM: "alarm clock",
    signal.SIGTERM: "terminated",
}

Event = dict[str, Any]


class ProcessError(Exception):
    """A process operation failed; ``kind`` says how (``not_found``, ``invalid``, ``failed``)."""

    def __init__(self, kind: str, message: str) -> None:
        """Create the error.

        Args:
            kind: ``not_found``, ``invalid`` or ``failed``.
            message: Human-readable text.
        """
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ProcessSpec:
    """What to start.

    Attributes:
        cmd: The executable.
        args: Its arguments.
        envs: Environment variables of the request (reported by ``List``).
        cwd: The resolved working directory.
        env: The full environment of the process.
        user: Who runs it.
        tag: Optional caller-chosen name.
        stdin: Whether stdin is a pipe the caller can write to (else ``/dev/null``).
        pty: ``(cols, rows)`` for a pseudo-terminal, or None for pipes.
    """

    cmd: str
    args: list[str]
    envs: dict[str, str]
    cwd: str
    env: dict[str, str]
    user: User
    tag: str | None = None
    stdin: bool = False
    pty: tuple[int, int] | None = None


def exit_description(returncode: int) -> tuple[int, bool, str]:
    """``(exit_code, exited, status)`` the way envd reports a finished process (Go semantics)."""
    if returncode >= 0:
        return returncode, True, f"exit status {returncode}"
    signum = -returncode
    try:
        text = _GO_SIGNAL_TEXT.get(signal.Signals(signum), f"signal {signum}")
    except ValueError:
        text = f"signal {signum}"
    return -1, False, f"signal: {text}"


@dataclass(eq=False)
class ManagedProcess:
    """One running process and its subscribers."""

    spec: ProcessSpec
    pid: int = 0
    subscribers: set[asyncio.Queue[Event]] = field(default_factory=set)
    finished: bool = False
    _proc: asyncio.subprocess.Process | None = None
    _pty_master: int | None = None
    _stdin_open: bool = False

    def subscribe(self) -> asyncio.Queue[Event]:
        """A queue receiving every event from now on (the last one is ``end``)."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event]) -> None:
        """Stop delivering events to ``queue``."""
        self.subscribers.discard(queue)

    def publish(self, event: Event) -> None:
        """Deliver an event to every subscriber."""
        for queue in list(self.subscribers):
            queue.put_nowait(event)

    def info(self) -> dict[str, Any]:
        """The process as a proto3-JSON ``ProcessInfo``."""
        config: dict[str, Any] = {"cmd": self.spec.cmd, "cwd": self.spec.cwd}
        if self.spec.args:
            config["args"] = list(self.spec.args)
        if self.spec.envs:
            config["envs"] = dict(self.spec.envs)
        result: dict[str, Any] = {"config": config, "pid": self.pid}
        if self.spec.tag is not None:
            result["tag"] = self.spec.tag
        return result

    async def write_input(self, data: bytes) -> None:
        """Write to the process's stdin (or its terminal).

        Raises:
            ProcessError: stdin is not open for this process.
        """
        if self._pty_master is not None:
            await asyncio.to_thread(_write_all, self._pty_master, data)
            return
        if self._proc is None or self._proc.stdin is None or not self._stdin_open:
            raise ProcessError("invalid", f"stdin of process {self.pid} is not open")
        try:
            self._proc.stdin.write(data)
            await self._proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ProcessError("failed", f"stdin of process {self.pid} is closed") from exc

    async def close_stdin(self) -> None:
        """Send EOF to the process's stdin (a terminal gets ^D).

        Raises:
            ProcessError: stdin was never open.
        """
        if self._pty_master is not None:
            await asyncio.to_thread(_write_all, self._pty_master, b"\x04")
            return
        if self._proc is None or self._proc.stdin is None:
            raise ProcessError("invalid", f"process {self.pid} was started without stdin")
        if self._stdin_open:
            self._stdin_open = False
            self._proc.stdin.close()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await self._proc.stdin.wait_closed()

    def send_signal(self, signum: int) -> None:
        """Signal the process's whole session (its children too)."""
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)
        except PermissionError as exc:
            raise ProcessError("failed", f"cannot signal process {self.pid}: {exc}") from exc

    def resize(self, cols: int, rows: int) -> None:
        """Resize the process's terminal.

        Raises:
            ProcessError: the process has no terminal.
        """
        if self._pty_master is None:
            raise ProcessError("invalid", f"process {self.pid} has no terminal")
        _set_winsize(self._pty_master, cols, rows)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _set_winsize(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _make_controlling_terminal() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError):
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class ProcessManager:
    """All processes the daemon started and still runs."""

    def __init__(self) -> None:
        """Create an empty manager."""
        self._processes: dict[int, ManagedProcess] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.listeners: list[Callable[[], None]] = []

    @property
    def running(self) -> int:
        """How many started processes have not finished yet."""
        return len(self._processes)

    def running_processes(self) -> list[ManagedProcess]:
        """The running processes, oldest first."""
        return list(self._processes.values())

    def find(self, *, pid: int | None = None, tag: str | None = None) -> ManagedProcess:
        """The running process with this pid or tag.

        Raises:
            ProcessError: ``not_found``.
        """
        if pid is not None:
            found = self._processes.get(pid)
            if found is not None:
                return found
            raise ProcessError("not_found", f"process with pid {pid} not found")
        for process in self._processes.values():
            if tag is not None and process.spec.tag == tag:
                return process
        raise ProcessError("not_found", f"process with tag {tag!r} not found")

    async def start(self, spec: ProcessSpec) -> tuple[ManagedProcess, asyncio.Queue[Event]]:
        """Start a process; returns it with a subscription opened before any output.

        Raises:
            ProcessError: ``invalid`` (bad cwd) or ``failed`` (could not execute).
        """
        if not await asyncio.to_thread(os.path.isdir, spec.cwd):
            raise ProcessError("invalid", f"cwd '{spec.cwd}' does not exist")
        managed = ManagedProcess(spec=spec)
        queue = managed.subscribe()
        identity: dict[str, Any] = {}
        if spec.user.switch:
            identity = {"user": spec.user.uid, "group": spec.user.gid}
            with contextlib.suppress(KeyError, OSError):
                identity["extra_groups"] = os.getgrouplist(spec.user.name, spec.user.gid)
        try:
            if spec.pty is not None:
                await self._spawn_pty(managed, identity)
            else:
                await self._spawn_pipes(managed, identity)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise ProcessError("failed", f"failed to start {spec.cmd!r}: {exc}") from exc
        self._processes[managed.pid] = managed
        managed.publish({"start": {"pid": managed.pid}})
        self._notify()
        return managed, queue

    async def _spawn_pipes(self, managed: ManagedProcess, identity: dict[str, Any]) -> None:
        spec = managed.spec
        proc = await asyncio.create_subprocess_exec(
            spec.cmd,
            *spec.args,
            stdin=asyncio.subprocess.PIPE if spec.stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=spec.cwd,
            env=spec.env,
            start_new_session=True,
            **identity,
        )
        managed._proc = proc
        managed._stdin_open = spec.stdin
        managed.pid = proc.pid
        assert proc.stdout is not None
        assert proc.stderr is not None
        readers = [
            asyncio.create_task(self._pump(managed, proc.stdout, "stdout")),
            asyncio.create_task(self._pump(managed, proc.stderr, "stderr")),
        ]
        self._track(self._supervise(managed, proc, readers))

    async def _spawn_pty(self, managed: ManagedProcess, identity: dict[str, Any]) -> None:
        spec = managed.spec
        assert spec.pty is not None
        master, slave = os.openpty()
        try:
            _set_winsize(slave, *spec.pty)
            env = dict(spec.env)
            env.setdefault("TERM", "xterm-256color")
            proc = await asyncio.create_subprocess_exec(
                spec.cmd,
                *spec.args,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=spec.cwd,
                env=env,
                start_new_session=True,
                preexec_fn=_make_controlling_terminal,
                **identity,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        managed._proc = proc
        managed._pty_master = master
        managed.pid = proc.pid
        os.set_blocking(master, False)
        reader = asyncio.create_task(self._pump_pty(managed, master))
        self._track(self._supervise(managed, proc, [reader]))

    def _track(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pump(managed: ManagedProcess, stream: asyncio.StreamReader, name: str) -> None:
        while True:
            chunk = await stream.read(READ_CHUNK)
            if not chunk:
                return
            managed.publish({"data": {name: b64encode(chunk)}})

    @staticmethod
    async def _pump_pty(managed: ManagedProcess, master: int) -> None:
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(master, readable.set)
        try:
            while True:
                await readable.wait()
                readable.clear()
                try:
                    chunk = os.read(master, READ_CHUNK)
                except BlockingIOError:
                    continue
                except OSError:  # EIO: the terminal's last user went away
                    return
                if not chunk:
                    return
                managed.publish({"data": {"pty": b64encode(chunk)}})
        finally:
            loop.remove_reader(master)

    async def _supervise(
        self,
        managed: ManagedProcess,
        proc: asyncio.subprocess.Process,
        readers: list[asyncio.Task[None]],
    ) -> None:
        returncode = await proc.wait()
        _done, pending = await asyncio.wait(readers, timeout=DRAIN_GRACE_SECONDS)
        for task in pending:
            task.cancel()
        if managed._pty_master is not None:
            with contextlib.suppress(OSError):
                os.close(managed._pty_master)
            managed._pty_master = None
        exit_code, exited, status = exit_description(returncode)
        end: dict[str, Any] = {"status": status}
        if exited:
            end["exited"] = True
        if exit_code:
            end["exitCode"] = exit_code
            end["error"] = status
        managed.finished = True
        self._processes.pop(managed.pid, None)
        managed.publish({"end": end})
        logger.info("process %d (%s) ended: %s", managed.pid, managed.spec.cmd, status)
        self._notify()

    def _notify(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                logger.exception("process listener failed")

    async def shutdown(self) -> None:
        """Kill every process (daemon exit)."""
        for process in self.running_processes():
            with contextlib.suppress(ProcessError):
                process.send_signal(signal.SIGKILL)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2)


def build_env(
    *,
    user: User,
    init_env: dict[str, str],
    request_env: dict[str, str],
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a process: the daemon's, the user's identity, /init's, the request's."""
    env = {
        key: value
        for key, value in (os.environ if base is None else base).items()
        if not key.startswith("SANDBOXD_")
    }
    env.setdefault("PATH", DEFAULT_PATH)
    env["HOME"] = user.home
    env["USER"] = user.name
    env["LOGNAME"] = user.name
    env.update(init_env)
    env.update(request_env)
    return env
