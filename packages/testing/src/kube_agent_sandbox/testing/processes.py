"""Child processes of the local cluster that are always stopped.

Each component (etcd, kube-apiserver, ...) runs in its own process group with its output in a
log file. A :class:`ProcessSupervisor` stops its children in reverse start order, TERM first and
KILL after a grace period. Stopping happens on ``stop()``, at interpreter exit (``atexit``), on
SIGTERM/SIGHUP (the handler cleans up, then lets the signal take its default course) and, when
``setpriv`` is available, even when the Python parent is killed outright (``PR_SET_PDEATHSIG``).
Ctrl-C raises ``KeyboardInterrupt`` as usual; the ``finally`` blocks and ``atexit`` clean up.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

_log = logging.getLogger(__name__)

_SUPERVISORS: weakref.WeakSet[ProcessSupervisor] = weakref.WeakSet()
_HANDLERS_INSTALLED = False
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class ProcessFailedError(RuntimeError):
    """A managed process exited or did not become ready in time."""


class ManagedProcess:
    """One child process in its own process group, with its output in a log file."""

    def __init__(
        self,
        name: str,
        popen: subprocess.Popen[bytes],
        log_path: Path,
        *,
        argv: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Wrap a started process.

        Args:
            name: Short component name used in messages and log file names.
            popen: The started process (leader of its own process group).
            log_path: File that receives the process's stdout and stderr.
            argv: The command as given to the supervisor (without any ``setpriv`` wrapper).
            env: The environment it was started with (None: the parent's).
            cwd: The working directory it was started in (None: the parent's).
        """
        self.name = name
        self.log_path = log_path
        self.argv: tuple[str, ...] = tuple(argv)
        self.env: dict[str, str] | None = None if env is None else dict(env)
        self.cwd = cwd
        self._popen = popen

    @property
    def pid(self) -> int:
        """Process id (also the process group id)."""
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """Exit status, or None while the process runs."""
        return self._popen.poll()

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self._popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to exit and return its status.

        Args:
            timeout: Seconds to wait; forever when None.

        Returns:
            The exit status.

        Raises:
            subprocess.TimeoutExpired: If it is still running after ``timeout`` seconds.
        """
        return self._popen.wait(timeout=timeout)

    def log_tail(self, lines: int = 50) -> str:
        """The last ``lines`` lines of the process's log file."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, grace: float = 10.0) -> None:
        """Send TERM to the process group, then KILL after ``grace`` seconds.

        Args:
            grace: Seconds to wait for a clean exit before sending KILL.
        """
        if self._signal_group(signal.SIGTERM):
            try:
                self._popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _log.warning("%s (pid %d) ignored SIGTERM; sending SIGKILL", self.name, self.pid)
        # Kill what is left of the group: the leader if it hung, or any stray grandchild.
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=grace)

    def _signal_group(self, sig: signal.Signals) -> bool:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            self._popen.poll()
            return False
        return True


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    process: ManagedProcess | None = None,
    interval: float = 0.1,
) -> None:
    """Call ``check`` until it returns True; fail early if ``process`` exits.

    Used for start-up readiness of components only (health endpoints); tests wait on watched
    conditions instead.

    Args:
        check: Returns True when the awaited state is reached; exceptions count as "not yet".
        timeout: Seconds before giving up.
        what: Description for the error message.
        process: The process being waited on, if any.
        interval: Seconds between checks.

    Raises:
        ProcessFailedError: If the process exits or the timeout expires.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            if check():
                return
        except Exception as err:  # readiness probes fail in many ways until ready
            last_error = err
        if process is not None and not process.alive():
            raise ProcessFailedError(
                f"{process.name} exited with status {process.returncode} while waiting for "
                f"{what}; last log lines:\n{process.log_tail()}"
            )
        if time.monotonic() > deadline:
            tail = f"; last log lines:\n{process.log_tail()}" if process is not None else ""
            raise ProcessFailedError(
                f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})"
                + tail
            )
        time.sleep(interval)


class ProcessSupervisor:
    """Starts child processes and guarantees that they are stopped."""

    def __init__(self, log_dir: Path, *, die_with_parent: bool = True) -> None:
        """Create a supervisor that writes ``<name>.log`` files into ``log_dir``.

        Args:
            log_dir: Directory for the log files (created if missing).
            die_with_parent: Ask the kernel to KILL each child when the thread that started it
                exits (``setpriv --pdeathsig``), so even ``kill -9`` of Python leaves nothing
                behind. Start processes from a long-lived thread when this is on.
        """
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._die_with_parent = die_with_parent
        self._processes: list[ManagedProcess] = []
        self._lock = threading.Lock()
        _SUPERVISORS.add(self)
        _install_handlers()

    @property
    def processes(self) -> list[ManagedProcess]:
        """Started processes, in start order."""
        with self._lock:
            return list(self._processes)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ManagedProcess:
        """Start ``argv`` in a new session (own process group), logging to ``<name>.log``.

        Args:
            name: Component name (unique within this supervisor).
            argv: Program and arguments.
            env: Full environment for the child; the parent's environment when None.
            cwd: Working directory of the child.

        Returns:
            The started process.

        Raises:
            ValueError: If the name is already used or argv is empty.
            FileNotFoundError: If the program does not exist.
        """
        if not argv:
            raise ValueError("argv must not be empty")
        with self._lock:
            if any(p.name == name for p in self._processes):
                raise ValueError(f"a process named {name!r} was already started")
        process = self._spawn(name, argv, env=env, cwd=cwd)
        with self._lock:
            self._processes.append(process)
        return process

    def restart(self, name: str, *, grace: float = 10.0) -> ManagedProcess:
        """Stop one process and start it again with the same command, environment and folder.

        The new process keeps the old one's place in the stop order and appends to the same
        log file. Readiness is the caller's business.

        Args:
            name: Name given to :meth:`start`.
            grace: Seconds between TERM and KILL when stopping the old process.

        Returns:
            The new process.

        Raises:
            KeyError: If no process has that name.
            ProcessFailedError: If the supervisor was stopped while restarting.
        """
        with self._lock:
            found = [p for p in self._processes if p.name == name]
        if not found:
            raise KeyError(name)
        old = found[0]
        old.stop(grace=grace)
        new = self._spawn(name, old.argv, env=old.env, cwd=old.cwd)
        with self._lock:
            if old in self._processes:
                self._processes[self._processes.index(old)] = new
                return new
        # stop_all() ran meanwhile: the new process must not outlive the supervisor.
        new.stop(grace=grace)
        raise ProcessFailedError(f"{name} was not restarted: its supervisor stopped meanwhile")

    def _spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None,
        cwd: Path | None,
    ) -> ManagedProcess:
        command = list(argv)
        setpriv = shutil.which("setpriv")
        if self._die_with_parent and setpriv is not None:
            command = [setpriv, "--pdeathsig", "KILL", "--", *command]
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log_file:
            popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=None if env is None else dict(env),
                cwd=cwd,
                start_new_session=True,
            )
        _log.debug("started %s (pid %d): %s", name, popen.pid, " ".join(argv))
        return ManagedProcess(name, popen, log_path, argv=argv, env=env, cwd=cwd)

    def stop(self, name: str, *, grace: float = 10.0) -> None:
        """Stop one process by name and forget it.

        Args:
            name: Name given to :meth:`start`.
            grace: Seconds between TERM and KILL.

        Raises:
            KeyError: If no process has that name.
        """
        with self._lock:
            found = [p for p in self._processes if p.name == name]
            if not found:
                raise KeyError(name)
            self._processes.remove(found[0])
        found[0].stop(grace=grace)

    def stop_all(self, *, grace: float = 10.0) -> None:
        """Stop every process, most recently started first. Safe to call more than once.

        Args:
            grace: Seconds between TERM and KILL, per process.
        """
        with _interrupts_deferred():
            while True:
                with self._lock:
                    if not self._processes:
                        return
                    process = self._processes.pop()
                try:
                    process.stop(grace=grace)
                except Exception:  # keep stopping the others whatever happens to one
                    _log.exception("stopping %s (pid %d) failed", process.name, process.pid)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold back Ctrl-C while stopping, so a second Ctrl-C cannot strand processes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received and callable(previous):
        previous(signal.SIGINT, None)


def stop_all_supervisors() -> None:
    """Stop the processes of every live supervisor (atexit and signal handlers call this)."""
    for supervisor in list(_SUPERVISORS):
        supervisor.stop_all(grace=5.0)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    del frame
    stop_all_supervisors()
    # Let the signal do what it would have done without us (normally: terminate).
    signal.signal(signum, _PREVIOUS.get(signum, signal.SIG_DFL))
    os.kill(os.getpid(), signum)


_PREVIOUS: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}


def _install_handlers() -> None:
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(stop_all_supervisors)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _HANDLED_SIGNALS:
        previous = signal.getsignal(sig)
        # Only take over signals nobody else handles; a custom handler stays in charge.
        if previous in (signal.SIG_DFL, None):
            _PREVIOUS[sig] = previous
            signal.signal(sig, _on_signal)
