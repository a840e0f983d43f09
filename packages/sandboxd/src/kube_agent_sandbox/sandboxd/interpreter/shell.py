"""A bash (or sh) context: one shell process per execution, output streamed as it comes.

Cheaper than a persistent kernel and enough for ``run_code(..., language="bash")``: variables
and ``cd`` do not carry over between executions (each runs in the context's working directory).
A non-zero exit status is reported as an ``error``; a timeout or a client that went away kills the
shell's whole process group.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping
from typing import Any

from kube_agent_sandbox.sandboxd.interpreter import events
from kube_agent_sandbox.sandboxd.interpreter.pipes import RunAs, spawn

logger = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
DRAIN_SECONDS = 0.2


class ShellRunner:
    """Runs each execution of a shell context as ``<shell> -c CODE``.

    Args:
        shell: The shell binary (``bash`` or ``sh``).
        cwd: The working directory of every execution.
        run_as: The account shells run as (None: the server's).
    """

    def __init__(self, *, shell: str, cwd: str, run_as: RunAs | None = None) -> None:
        self.shell = shell
        self.cwd = cwd
        self.run_as = run_as
        self.execution_count = 0
        self.base_env: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Nothing to start: a shell runs per execution."""

    async def restart(self) -> None:
        """Resets the execution count (a running execution is stopped first)."""
        async with self._lock:
            self.execution_count = 0

    async def close(self) -> None:
        """Waits for a running execution to end."""
        async with self._lock:
            return

    async def execute(
        self,
        code: str,
        *,
        env: Mapping[str, str] | None = None,
        time_limit: float | None = None,
    ) -> AsyncIterator[events.Event]:
        """Runs the code in a new shell and yields its events.

        Args:
            code: The shell script.
            env: Extra environment variables for this execution.
            time_limit: Seconds after which the shell is killed and an error reported.

        Yields:
            ``number_of_executions``, ``stdout``/``stderr`` and, on failure, ``error`` events.
        """
        async with self._lock:
            self.execution_count += 1
            yield events.count_event(self.execution_count)
            merged = dict(os.environ)
            if self.run_as is not None:
                self.run_as.apply_env(merged)
            merged.update(self.base_env)
            merged.update(env or {})
            try:
                proc, stdout, stderr = await spawn(
                    [self.shell, "-c", code],
                    cwd=self.cwd,
                    env=merged,
                    stdin=asyncio.subprocess.DEVNULL,
                    run_as=self.run_as,
                )
            except OSError as exc:
                yield events.error_event("ShellError", f"cannot start {self.shell}: {exc}")
                return
            queue: asyncio.Queue[tuple[str, str | None]] = asyncio.Queue()
            pumps = [
                asyncio.create_task(_pump("stdout", stdout, queue)),
                asyncio.create_task(_pump("stderr", stderr, queue)),
            ]
            loop = asyncio.get_running_loop()
            deadline = None if time_limit is None else loop.time() + time_limit
            exited = asyncio.create_task(proc.wait())
            drain_until: float | None = None  # set when the shell exited: background children
            open_streams = 2  # may keep the pipes open, so wait only a moment for the rest
            try:
                while open_streams:
                    limits = [t for t in (deadline, drain_until) if t is not None]
                    wait = max(min(limits) - loop.time(), 0.0) if limits else None
                    getter = asyncio.ensure_future(queue.get())
                    waiting: set[asyncio.Future[Any]] = {getter}
                    if drain_until is None:
                        waiting.add(exited)
                    done, _ = await asyncio.wait(
                        waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED
                    )
                    if getter not in done:
                        getter.cancel()
                    if exited in done and drain_until is None:
                        drain_until = loop.time() + DRAIN_SECONDS
                    if getter in done:
                        name, text = getter.result()
                        if text is None:
                            open_streams -= 1
                        else:
                            yield events.stream_event(name, text)
                    elif not done:
                        if drain_until is not None and loop.time() >= drain_until:
                            break
                        _kill_group(proc)
                        yield events.error_event(
                            "TimeoutError",
                            f"Execution timed out after {time_limit:g} s and the shell was killed",
                        )
                        return
                status = await exited
                if status != 0:
                    yield events.error_event(
                        "ExitCodeError", f"The shell exited with status {status}"
                    )
            finally:
                if proc.returncode is None:
                    _kill_group(proc)
                    await proc.wait()
                exited.cancel()
                for task in pumps:
                    task.cancel()
                waited: list[asyncio.Future[Any]] = [*pumps, exited]
                for future in waited:
                    with contextlib.suppress(asyncio.CancelledError):
                        await future


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _pump(
    name: str, reader: asyncio.StreamReader, queue: asyncio.Queue[tuple[str, str | None]]
) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        chunk = await reader.read(READ_CHUNK)
        text = decoder.decode(chunk, final=not chunk)
        if text:
            queue.put_nowait((name, text))
        if not chunk:
            queue.put_nowait((name, None))
            return
