"""Starting a child with output pipes that asyncio's subprocess transport does not own.

When the transport owns the stdout/stderr pipes, ``Process.wait()`` returns only after both
pipes closed, so a background grandchild that inherited them (``sleep 60 &``) holds up the exit
of the shell that started it. Reading our own pipes keeps process exit and end of output apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

PIPE_LIMIT = 2**20


async def open_reader(fd: int) -> asyncio.StreamReader:
    """Wraps the read end of a pipe in a stream reader (the reader owns the descriptor).

    Args:
        fd: The read end.

    Returns:
        The reader.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=PIPE_LIMIT)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader


async def spawn(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    stdin: int | None,
    pass_fds: Sequence[int] = (),
) -> tuple[asyncio.subprocess.Process, asyncio.StreamReader, asyncio.StreamReader]:
    """Starts a child in its own session with stdout and stderr on pipes we read ourselves.

    Args:
        argv: The program and its arguments.
        cwd: Its working directory.
        env: Its whole environment.
        stdin: ``asyncio.subprocess.PIPE`` or ``DEVNULL``.
        pass_fds: Extra descriptors the child inherits.

    Returns:
        The process and readers of its stdout and stderr.

    Raises:
        OSError: The program could not be started.
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    kwargs: dict[str, Any] = {"pass_fds": tuple(pass_fds)} if pass_fds else {}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=out_w,
            stderr=err_w,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            **kwargs,
        )
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (out_w, err_w):
            with contextlib.suppress(OSError):
                os.close(fd)
    return proc, await open_reader(out_r), await open_reader(err_r)
