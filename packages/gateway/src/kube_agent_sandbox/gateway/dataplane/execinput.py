"""stdin of the exec fallback's commands, reachable from every gateway replica.

A command started with ``stdin`` (or a PTY) keeps its exec stream on the replica that started
it, which alone can write to it. So that a ``SendInput``, ``StreamInput``, ``CloseStdin`` or
``Update`` landing on any replica reaches it, the input goes through a FIFO in the container
(``execscripts.INPUT_DIR/<pid>/in``):

- the starting replica runs :data:`~.execscripts.RELAY_INPUT` beside the command
  (:func:`relay`) and copies what it prints into the command's exec stdin; when every writer of
  the FIFO is gone (``CloseStdin``) it closes that stdin;
- any replica writes input with one exec of :data:`~.execscripts.SEND_INPUT` per call
  (:func:`send_input`), resending what the kubelet dropped, closes it with
  :data:`~.execscripts.CLOSE_INPUT` (:func:`close_input`) and resizes a PTY with ``stty``
  (:func:`resize_pty`).

Every replica takes the same path, so a client sees the same behaviour and order wherever its
calls land.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from kube_agent_sandbox.gateway.dataplane import execscripts as scripts
from kube_agent_sandbox.gateway.dataplane.execwire import ExecFailure
from kube_agent_sandbox.gateway.dataplane.interfaces import CommandOutput, CommandStream
from kube_agent_sandbox.sdk import execproto

logger = logging.getLogger(__name__)

MAX_SEND_ATTEMPTS = 5
"""Execs in a row that may deliver nothing before ``SendInput`` gives up."""
STDIN = "stdin"
PTY = "pty"


class Container(Protocol):
    """Where the commands run (the fallback's target pod container)."""

    def open(
        self, argv: list[str], *, stdin: bool = False, tty: bool = False
    ) -> AbstractAsyncContextManager[CommandStream]:
        """A stream running ``argv``."""
        ...

    async def run(self, argv: list[str], *, stdin: bytes | None = None) -> CommandOutput:
        """Run ``argv`` to completion (``stdin`` written, then closed)."""
        ...


async def send_input(container: Container, pid: int, kind: str, data: bytes) -> None:
    """Write ``data`` to the stdin (``kind`` ``stdin``) or terminal (``pty``) of ``pid``.

    Each exec reports how many bytes arrived and wrote those; the rest is sent again.

    Raises:
        ExecFailure: ``not_found`` (no such command with stdin), ``invalid_argument`` (the
            other kind), ``failed_precondition`` (stdin closed), ``internal`` (the bytes keep
            getting lost, or the script failed).
    """
    sent = 0
    empty = 0
    while True:
        rest = data[sent:]
        output = await container.run(
            scripts.sh(scripts.SEND_INPUT, str(pid), kind, str(len(rest))), stdin=rest
        )
        _check(output, pid, kind=kind)
        arrived = _count(output.stdout)
        if arrived is None or arrived > len(rest):
            raise ExecFailure(
                "internal", f"stdin of pid {pid}: unexpected answer {output.stdout!r}"
            )
        sent += arrived
        if sent == len(data):
            return
        empty = empty + 1 if arrived == 0 else 0
        if empty >= MAX_SEND_ATTEMPTS:
            raise ExecFailure(
                "internal", f"stdin of pid {pid}: {sent} of {len(data)} bytes arrived"
            )


async def close_input(container: Container, pid: int) -> None:
    """End the stdin of ``pid``: it reads EOF once the writes under way are in.

    Raises:
        ExecFailure: ``not_found`` when no command with stdin has that PID.
    """
    _check(await container.run(scripts.sh(scripts.CLOSE_INPUT, str(pid))), pid)


async def resize_pty(container: Container, pid: int, cols: int, rows: int) -> None:
    """Set the size of the PTY of ``pid`` (its foreground process group gets SIGWINCH).

    Raises:
        ExecFailure: ``not_found`` when ``pid`` is no PTY started through the fallback.
    """
    output = await container.run(scripts.sh(scripts.RESIZE_PTY, str(pid), str(rows), str(cols)))
    if output.exit_code == scripts.NOT_FOUND:
        raise ExecFailure("not_found", f"process with pid {pid} not found, or not a PTY")
    _check(output, pid)


@contextlib.asynccontextmanager
async def relay(
    container: Container, stream: CommandStream, pid: int, *, tty: bool
) -> AsyncIterator[None]:
    """While inside, input written to the FIFO of ``pid`` reaches ``stream``'s stdin.

    Returns once the FIFO exists (so a ``SendInput`` right after the client learns the PID
    finds it); the copying runs in a task, cancelled on exit. When the FIFO's writers are all
    gone (``CloseStdin``) the stdin of a command (not of a PTY) is closed.
    """
    kind = PTY if tty else STDIN
    async with container.open(scripts.sh(scripts.RELAY_INPUT, str(pid), kind)) as feed:
        if not await _ready(feed):
            # The command runs on; its input calls answer not_found, and this says why.
            logger.warning("no stdin FIFO for pid %s: %s", pid, feed.failure or "relay ended")
            yield
            return
        task = asyncio.ensure_future(_copy(feed, stream, pid, close=not tty))
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _ready(feed: CommandStream) -> bool:
    """Wait for the relay's ``ready`` on stderr (False when it ended before)."""
    seen = b""
    while (chunk := await feed.read()) is not None:
        if chunk[0] == execproto.STDERR:
            seen += chunk[1]
            if b"ready\n" in seen:
                return True
    return False


async def _copy(feed: CommandStream, stream: CommandStream, pid: int, *, close: bool) -> None:
    try:
        while (chunk := await feed.read()) is not None:
            if chunk[0] == execproto.STDOUT:
                await stream.write(chunk[1])
        if close and feed.exit_code == 0 and stream.can_close_stdin:
            await stream.close_stdin()
    except Exception as err:  # the command's exec connection closed under us: it ended
        logger.debug("relaying stdin of pid %s: %s", pid, err)


def _check(output: CommandOutput, pid: int, *, kind: str | None = None) -> None:
    code = output.exit_code
    if code == 0:
        return
    if code == scripts.NOT_FOUND:
        raise ExecFailure(
            "not_found",
            f"process with pid {pid} not found, or not started with stdin, or its stdin closed",
        )
    if code == scripts.STDIN_CLOSED:
        raise ExecFailure("failed_precondition", f"stdin of process with pid {pid} is closed")
    if code == scripts.WRONG_INPUT_KIND and kind is not None:
        wanted = PTY if kind == STDIN else STDIN
        what = "a PTY" if kind == STDIN else "not a PTY"
        raise ExecFailure(
            "invalid_argument", f"process with pid {pid} is {what}: send input.{wanted}"
        )
    text = output.stderr.decode("utf-8", "replace").strip() or output.failure or f"exit {code}"
    raise ExecFailure("internal", f"stdin of pid {pid}: {text}")


def _count(stdout: bytes) -> int | None:
    lines: Sequence[bytes] = stdout.split()
    return int(lines[0]) if len(lines) == 1 and lines[0].isdigit() else None
