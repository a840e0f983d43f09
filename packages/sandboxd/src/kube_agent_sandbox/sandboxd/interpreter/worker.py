"""A Python context: one persistent ``python3 -u driver.py`` process that keeps the user's globals.

The server talks to the worker over pipes (see ``driver.py``): commands on the child's stdin,
events on an extra pipe, user output on the child's stdout and stderr, streamed as it comes. One
execution runs at a time. An execution that outlives its timeout, or whose client went away, is
interrupted (SIGINT to the worker's process group); a worker that ignores the interrupt, or dies,
is killed and started again (the globals are lost, as after a Jupyter kernel restart).
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import contextlib
import logging
import os
import secrets
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kube_agent_sandbox.sandboxd.interpreter import events
from kube_agent_sandbox.sandboxd.interpreter.driver import SYNC_END, SYNC_START
from kube_agent_sandbox.sandboxd.interpreter.pipes import RunAs, open_reader, spawn
from kube_agent_sandbox.sandboxd.interpreter.protocol import (
    FrameError,
    SyncSplitter,
    encode_frame,
    read_frame,
)

logger = logging.getLogger(__name__)

DRIVER = Path(__file__).with_name("driver.py")
START_TIMEOUT_SECONDS = 30.0
INTERRUPT_GRACE_SECONDS = 2.0
SYNC_GRACE_SECONDS = 2.0
CLOSE_WAIT_SECONDS = 5.0
PUMP_DRAIN_SECONDS = 1.0
READ_CHUNK = 64 * 1024
QUEUE_ITEMS = 256  # of at most READ_CHUNK bytes each


class WorkerError(Exception):
    """The worker could not be started."""


class RuntimeMissingError(WorkerError):
    """The sandbox lacks the runtime a language needs (e.g. Node.js for JavaScript)."""


def installed(executable: str) -> bool:
    """Whether ``executable`` (a name on PATH or a path) can be run."""
    return shutil.which(executable) is not None


@dataclass(frozen=True)
class WorkerSettings:
    """How worker processes are started.

    Attributes:
        python: The interpreter to run the driver with.
        node: The Node.js executable of JavaScript and TypeScript contexts.
        env: Extra environment for every worker (on top of the server's).
        run_as: The account workers (and shells) run as; None keeps the server's.
        rscript: The ``Rscript`` executable of R contexts.
    """

    python: str = sys.executable
    env: Mapping[str, str] | None = None
    run_as: RunAs | None = None
    node: str = "node"
    rscript: str = "Rscript"


class _Process:
    """One running driver process and the pumps that read its pipes into a queue.

    Queue items: ``("stdout"|"stderr", (epoch, text))`` where ``epoch`` is the last sync number
    seen on that stream before the text; ``("sync", (stream, seq))``; ``("event", message)``;
    ``("exit", None)`` when the event pipe closed.
    """

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        readers: tuple[asyncio.StreamReader, asyncio.StreamReader, asyncio.StreamReader],
        token: str,
        markers: tuple[bytes, bytes] = (SYNC_START, SYNC_END),
    ) -> None:
        self.proc = proc
        self.token = token
        self.markers = markers
        # Bounded: a client that reads slowly slows the worker down (its writes block) instead
        # of the server buffering the worker's output without limit.
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(QUEUE_ITEMS)
        self.last_seq = 0  # the number of the last event the server consumed
        self.base_env_sent = False
        self.events_closed = False  # set before ("exit", None) is queued
        stdout, stderr, events_reader = readers
        self.tasks = [
            asyncio.create_task(self._pump_output("stdout", stdout)),
            asyncio.create_task(self._pump_output("stderr", stderr)),
            asyncio.create_task(self._pump_events(events_reader)),
        ]

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and not self.events_closed

    async def _pump_output(self, name: str, reader: asyncio.StreamReader) -> None:
        splitter = SyncSplitter(self.token, *self.markers)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        epoch = 0
        while True:
            chunk = await reader.read(READ_CHUNK)
            parts: list[bytes | int] = splitter.feed(chunk) if chunk else [splitter.flush()]
            for part in parts:
                if isinstance(part, int):
                    tail = decoder.decode(b"", final=True)
                    if tail:
                        await self.queue.put((name, (epoch, tail)))
                    epoch = part
                    await self.queue.put(("sync", (name, part)))
                    continue
                text = decoder.decode(part, final=not chunk)
                if text:
                    await self.queue.put((name, (epoch, text)))
            if not chunk:
                return

    async def _pump_events(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                message = await read_frame(reader)
                if message is None:
                    break
                await self.queue.put(("event", message))
        except FrameError as exc:
            # Not our driver's output any more (user code wrote to the event pipe?): the
            # protocol cannot recover, so the worker goes and the execution reports its exit.
            logger.error("worker %s sent a bad frame, killing it: %s", self.proc.pid, exc)
            self.signal_group(signal.SIGKILL)
        self.events_closed = True
        await self.queue.put(("exit", None))

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(encode_frame(message))

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    async def kill(self) -> None:
        """Kills the process group; a consumer waiting on the queue then gets ``exit``."""
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await self.proc.wait()
        # Let the pumps read to the end (the dead worker's pipes close), but not for long: a
        # grandchild may hold stdout open, or a full queue nobody drains may block a pump.
        await asyncio.wait(self.tasks, timeout=PUMP_DRAIN_SECONDS)
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if not self.events_closed:
            self.events_closed = True
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(("exit", None))
        if self.proc.stdin is not None:
            self.proc.stdin.close()


Argv = Callable[[int, str], list[str]]


async def _spawn(
    settings: WorkerSettings,
    cwd: str,
    argv: Argv,
    markers: tuple[bytes, bytes] = (SYNC_START, SYNC_END),
) -> tuple[_Process, dict[str, Any]]:
    read_fd, write_fd = os.pipe()
    token = secrets.token_hex(8)
    env = dict(os.environ)
    env.setdefault("MPLBACKEND", "Agg")
    if settings.run_as is not None:
        settings.run_as.apply_env(env)
        # The user's pipe: a driver that cannot write to an inherited descriptor (R) opens
        # /dev/fd/N again, which the kernel allows the pipe's owner only.
        os.fchown(write_fd, settings.run_as.uid, settings.run_as.gid)
    if settings.env:
        env.update(settings.env)
    try:
        command = argv(write_fd, token)
        proc, stdout, stderr = await spawn(
            command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            pass_fds=(write_fd,),
            run_as=settings.run_as,
        )
    except OSError as exc:
        os.close(read_fd)
        raise WorkerError(f"cannot start {command[0]}: {exc}") from exc
    finally:
        os.close(write_fd)
    process = _Process(proc, (stdout, stderr, await open_reader(read_fd)), token, markers)
    try:
        ready = await asyncio.wait_for(_wait_ready(process), START_TIMEOUT_SECONDS)
    except (TimeoutError, WorkerError):
        await process.kill()
        raise
    return process, ready


async def _wait_ready(process: _Process) -> dict[str, Any]:
    output: list[str] = []
    while True:
        kind, payload = await process.queue.get()
        if kind == "event" and payload.get("t") == "ready":
            process.last_seq = int(payload.get("seq", 0))
            return dict(payload)
        if kind in ("stdout", "stderr"):
            output.append(payload[1])
        elif kind == "exit":
            await process.proc.wait()
            raise WorkerError(
                f"worker exited with code {process.proc.returncode} before it was ready: "
                + "".join(output)[-2000:]
            )


class PythonWorker:
    """A persistent Python interpreter for one context.

    ``base_env`` (the sandbox's global env vars) is set in each new process on its first
    execution; ``env`` of an execution applies to that execution only.

    Args:
        cwd: The working directory of the worker.
        settings: How to start worker processes.
    """

    runtime = "Python"  # names the process in error messages
    # The bytes that open and close the driver's sync markers in its output.
    markers: tuple[bytes, bytes] = (SYNC_START, SYNC_END)

    def __init__(self, *, cwd: str, settings: WorkerSettings | None = None) -> None:
        self.cwd = cwd
        self.settings = settings or WorkerSettings()
        self.execution_count = 0
        self.base_env: dict[str, str] = {}
        self._process: _Process | None = None
        self._lock = asyncio.Lock()
        self._recovery: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The worker's process id, or None before start."""
        return self._process.proc.pid if self._process else None

    def missing_runtime(self) -> RuntimeMissingError | None:
        """The error to raise when the language's executable is not installed; None when it is.

        The Python driver runs on sandboxd's own interpreter, which is always there; other
        languages override this (their runtime is optional in an image).
        """
        return None

    async def start(self) -> None:
        """Starts the worker process and waits until the driver is ready.

        Raises:
            RuntimeMissingError: The language's executable is not installed.
            WorkerError: The process could not start or died before it was ready.
            TimeoutError: The driver did not report ready in time.
        """
        missing = self.missing_runtime()
        if missing is not None:
            raise missing
        self._process, _ = await _spawn(self.settings, self.cwd, self.argv, self.markers)
        self.execution_count = 0

    def argv(self, event_fd: int, token: str) -> list[str]:
        """Returns the command line of a worker process.

        Args:
            event_fd: The descriptor (inherited by the child) the driver writes events to.
            token: The random token of the driver's sync markers.

        Returns:
            The command line.
        """
        return [self.settings.python, "-u", str(DRIVER), str(event_fd), token]

    async def restart(self) -> None:
        """Kills the worker at once (a running execution ends with an error) and starts a new one.

        Raises:
            WorkerError: The new worker could not be started.
        """
        killed = self._process
        if killed is not None:
            await killed.kill()
        async with self._lock:
            if self._process is None or self._process is killed or not self._process.alive:
                await self._restart_locked()

    async def _restart_locked(self) -> None:
        if self._process is not None:
            await self._process.kill()
            self._process = None
        if self._closed:
            raise WorkerError("the context was removed")
        await self.start()

    async def close(self) -> None:
        """Kills the worker at once; a running execution ends with an error."""
        self._closed = True
        process = self._process
        if process is not None:
            await process.kill()
        try:
            await asyncio.wait_for(self._lock.acquire(), CLOSE_WAIT_SECONDS)
        except TimeoutError:
            # An execution iterator nobody reads or closes holds the lock; the process is gone.
            logger.warning("closing a context whose execution was abandoned unclosed")
            return
        try:
            if self._process is not None:
                await self._process.kill()
                self._process = None
        finally:
            self._lock.release()

    async def execute(
        self,
        code: str,
        *,
        env: Mapping[str, str] | None = None,
        time_limit: float | None = None,
    ) -> AsyncIterator[events.Event]:
        """Runs one cell and yields its events as they happen.

        Closing the iterator early (the client went away) interrupts the cell in the background.

        Args:
            code: The cell's source.
            env: Environment variables set for this execution only.
            time_limit: Seconds after which the cell is interrupted and an error reported.

        Yields:
            ``number_of_executions``, ``stdout``/``stderr``, ``result`` and ``error`` events.
        """
        await self._lock.acquire()
        handed_off = False
        finished = False
        try:
            if self._process is None or not self._process.alive:
                await self._restart_locked()
            process = self._process
            assert process is not None
            while not process.queue.empty():  # output of background threads between cells
                process.queue.get_nowait()
            if not process.alive:  # it died just now (its exit was among the drained items)
                await self._restart_locked()
                process = self._process
                assert process is not None
            command: dict[str, Any] = {"op": "execute", "code": code, "env": dict(env or {})}
            if self.base_env and not process.base_env_sent:
                command["base_env"] = self.base_env  # kept by the process from now on
                process.base_env_sent = True
            process.send(command)
            async for event in self._collect(process, time_limit):
                yield event
            finished = True
        finally:
            if finished:
                self._lock.release()
            else:
                handed_off = True
                task = asyncio.create_task(self._recover_and_release())
                self._recovery.add(task)
                task.add_done_callback(self._recovery.discard)
            logger.debug("execution ended (finished=%s, recovering=%s)", finished, handed_off)

    async def _collect(
        self, process: _Process, time_limit: float | None
    ) -> AsyncIterator[events.Event]:
        loop = asyncio.get_running_loop()
        deadline = None if time_limit is None else loop.time() + time_limit
        order = _Orderer(process.last_seq)
        while True:
            wait: float | None = None
            if deadline is not None:
                wait = max(deadline - loop.time(), 0.0)
            stalled_at = order.stalled_since()
            if stalled_at is not None:
                grace = max(stalled_at + SYNC_GRACE_SECONDS - loop.time(), 0.0)
                wait = grace if wait is None else min(wait, grace)
            try:
                kind, payload = await asyncio.wait_for(process.queue.get(), wait)
            except TimeoutError:
                if deadline is not None and loop.time() >= deadline:
                    async for event in self._time_out(process, time_limit or 0.0):
                        yield event
                    return
                logger.warning("worker %s: output sync marker missing; going on", self.pid)
                order.force()
            else:
                if kind == "exit":
                    for message in order.drain():
                        drained = self._to_event(message)
                        if drained is not None:
                            yield drained
                    async for event in self._died(process):
                        yield event
                    return
                order.add(kind, payload, loop.time())
            for item in order.ready():
                if isinstance(item, tuple):
                    yield events.stream_event(item[0], item[1])
                    continue
                process.last_seq = max(process.last_seq, int(item.get("seq", 0)))
                if item.get("t") == "done":
                    return
                converted = self._to_event(item)
                if converted is not None:
                    yield converted

    def _to_event(self, message: dict[str, Any]) -> events.Event | None:
        t = message.get("t")
        if t == "count":
            self.execution_count = int(message.get("n", 0))
            return events.count_event(self.execution_count)
        if t == "result":
            return events.result_event(message)
        if t == "error":
            return events.error_event(
                str(message.get("name", "")),
                str(message.get("value", "")),
                str(message.get("traceback", "")),
            )
        return None

    async def _died(self, process: _Process) -> AsyncIterator[events.Event]:
        await process.proc.wait()
        code = process.proc.returncode
        if self._closed:
            yield events.error_event(
                "ContextRemoved", "The context was removed during the execution"
            )
            return
        logger.warning("worker %s exited with code %s during an execution", process.proc.pid, code)
        yield events.error_event(
            "ContextRestarting",
            f"The context's {self.runtime} process exited (code {code}) during the execution; "
            "it was restarted and its variables are lost",
        )
        await self._restart_locked()

    async def _time_out(self, process: _Process, limit: float) -> AsyncIterator[events.Event]:
        if await self._interrupt(process):
            yield events.error_event(
                "TimeoutError",
                f"Execution timed out after {limit:g} s and was interrupted",
            )
            return
        yield events.error_event(
            "TimeoutError",
            f"Execution timed out after {limit:g} s; the context did not stop on interrupt and "
            "was restarted, its variables are lost",
        )
        await self._restart_locked()

    async def _interrupt(self, process: _Process) -> bool:
        """Interrupts the running cell; returns whether the worker finished it in time."""
        if not process.alive:
            return False
        process.signal_group(signal.SIGINT)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + INTERRUPT_GRACE_SECONDS
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                kind, payload = await asyncio.wait_for(process.queue.get(), remaining)
            except TimeoutError:
                return False
            if kind == "exit":
                return False
            if kind == "event":
                process.last_seq = max(process.last_seq, int(payload.get("seq", 0)))
                if payload.get("t") == "done":
                    return True

    async def _recover_and_release(self) -> None:
        try:
            if self._closed:
                return
            process = self._process
            if process is not None and not await self._interrupt(process):
                logger.warning("worker %s did not stop on interrupt; restarting it", self.pid)
                await self._restart_locked()
        except Exception:
            logger.exception("recovering the worker after an abandoned execution failed")
        finally:
            self._lock.release()


class _Orderer:
    """Puts output and events back in the order the worker produced them.

    An event numbered ``n`` waits until every stream it names has shown sync marker ``n`` (all
    output written before it has arrived); output with epoch ``e`` waits until event ``e`` went
    out (it was written after that event).

    Args:
        emitted: The number of the last event already consumed.
    """

    def __init__(self, emitted: int) -> None:
        self.emitted = emitted
        self.synced = {"stdout": emitted, "stderr": emitted}
        self.text: dict[str, collections.deque[tuple[int, str]]] = {
            "stdout": collections.deque(),
            "stderr": collections.deque(),
        }
        self.pending: collections.deque[tuple[float, dict[str, Any]]] = collections.deque()
        self._forced = False

    def add(self, kind: str, payload: Any, now: float) -> None:
        """Takes one queue item."""
        if kind in self.text:
            self.text[kind].append(payload)
        elif kind == "sync":
            name, seq = payload
            self.synced[name] = max(self.synced[name], seq)
        elif kind == "event":
            self.pending.append((now, payload))

    def stalled_since(self) -> float | None:
        """When the oldest waiting event arrived (None if none waits)."""
        return self.pending[0][0] if self.pending else None

    def force(self) -> None:
        """Lets the oldest event go although its markers did not arrive."""
        self._forced = True

    def drain(self) -> list[dict[str, Any]]:
        """Returns the waiting events (the worker died; no marker will come)."""
        messages = [message for _, message in self.pending]
        self.pending.clear()
        return messages

    def ready(self) -> list[tuple[str, str] | dict[str, Any]]:
        """Returns what may go out now, in order: ``(stream, text)`` or an event message."""
        out: list[tuple[str, str] | dict[str, Any]] = []
        progress = True
        while progress:
            progress = False
            for name, queue in self.text.items():
                while queue and queue[0][0] <= self.emitted:
                    out.append((name, queue.popleft()[1]))
                    progress = True
            if self.pending:
                message = self.pending[0][1]
                seq = int(message.get("seq", 0))
                streams = [s for s in message.get("streams", []) if s in self.synced]
                if self._forced or all(self.synced[s] >= seq for s in streams):
                    self._forced = False
                    self.pending.popleft()
                    self.emitted = max(self.emitted, seq)
                    for s in self.synced:  # a forced or fd-less event: its markers may never come
                        if s not in streams:
                            self.synced[s] = max(self.synced[s], seq)
                    out.append(message)
                    progress = True
        return out
