"""Starting a child with output pipes that asyncio's subprocess transport does not own.

When the transport owns the stdout/stderr pipes, ``Process.wait()`` returns only after both
pipes closed, so a background grandchild that inherited them (``sleep 60 &``) holds up the exit
of the shell that started it. Reading our own pipes keeps process exit and end of output apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PIPE_LIMIT = 2**20


@dataclass(frozen=True)
class RunAs:
    """The account children run as (the server must be root to switch to it).

    Attributes:
        name: The user name.
        uid: Its user id.
        gid: Its primary group id.
        groups: All its group ids.
        home: Its home directory.
    """

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    @classmethod
    def lookup(cls, name: str) -> RunAs:
        """Resolves a user name.

        Args:
            name: The user name.

        Returns:
            The account.

        Raises:
            KeyError: No such user.
        """
        entry = pwd.getpwnam(name)
        groups = tuple(os.getgrouplist(name, entry.pw_gid))
        return cls(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)

    def apply_env(self, env: dict[str, str]) -> None:
        """Sets ``HOME``, ``USER`` and ``LOGNAME`` for this account.

        Args:
            env: The environment to update.
        """
        env.update({"HOME": self.home, "USER": self.name, "LOGNAME": self.name})


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
    run_as: RunAs | None = None,
) -> tuple[asyncio.subprocess.Process, asyncio.StreamReader, asyncio.StreamReader]:
    """Starts a child in its own session with stdout and stderr on pipes we read ourselves.

    Args:
        argv: The program and its arguments.
        cwd: Its working directory.
        env: Its whole environment.
        stdin: ``asyncio.subprocess.PIPE`` or ``DEVNULL``.
        pass_fds: Extra descriptors the child inherits.
        run_as: The account to run as (None: the server's).

    Returns:
        The process and readers of its stdout and stderr.

    Raises:
        OSError: The program could not be started.
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    kwargs: dict[str, Any] = {"pass_fds": tuple(pass_fds)} if pass_fds else {}
    if run_as is not None:
        kwargs.update(user=run_as.uid, group=run_as.gid, extra_groups=list(run_as.groups))
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
