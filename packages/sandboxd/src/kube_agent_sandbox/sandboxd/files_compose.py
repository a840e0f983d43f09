"""``POST /files/compose``: concatenate uploaded parts into one file (envd ≥ 0.5.5).

The request is JSON, ``{"source_paths": [...], "destination": "...", "username"?: "..."}``; the
answer is one entry, ``{"path", "name", "type": "file"}`` (not a list, unlike ``POST /files``).
The sources are concatenated in order into a temporary file next to the destination, which is
then renamed over the destination, so an existing destination is replaced in one step and stays
untouched when anything fails. The sources are deleted only after that rename. Paths resolve and
new files and directories belong to the request's user exactly as with ``POST /files``; the
data moves with ``copy_file_range`` (in the kernel) where the file system allows it.

Errors are envd's ``{"code", "message"}``: 400 (malformed body, empty ``source_paths``, missing
``destination``, a source that is the destination, a directory or not a regular file, a
destination that is a directory or under a file), 401 (unknown user), 403 (permission denied),
404 (a source does not exist), 413 (body over 1 MiB), 507 (no space). Unlike ``/files`` it takes
no signed URL: it needs the access token, as envd does.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import posixpath
import secrets
import stat
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from kube_agent_sandbox.sandboxd.files_rest import FilesError, api_error, os_error
from kube_agent_sandbox.sandboxd.filesystem_rpc import chown, make_dirs
from kube_agent_sandbox.sandboxd.init_state import DaemonState
from kube_agent_sandbox.sandboxd.users import (
    BadPathError,
    UnknownUserError,
    User,
    resolve_path,
    resolve_user,
)

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
COPY_CHUNK = 8 * 1024 * 1024
NAME_MAX = 255
# copy_file_range cannot serve this pair of files; plain reads and writes can.
_NO_RANGE_COPY = frozenset(
    {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.ETXTBSY}
)


@dataclass(frozen=True)
class ComposeRequest:
    """A validated ``/files/compose`` body."""

    source_paths: list[str]
    destination: str
    username: str | None


def parse_request(raw: bytes) -> ComposeRequest:
    """Validate a ``/files/compose`` body (unknown fields are ignored, as envd does).

    Raises:
        FilesError: 400 with what is wrong.
    """
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FilesError(400, f"invalid request body: {exc}") from exc
    if not isinstance(body, dict):
        raise FilesError(400, "invalid request body: expected a JSON object")
    sources = body.get("source_paths")
    if sources is not None and (
        not isinstance(sources, list) or not all(isinstance(item, str) for item in sources)
    ):
        raise FilesError(400, "invalid request body: source_paths must be a list of strings")
    if not sources:
        raise FilesError(400, "source_paths must not be empty")
    destination = body.get("destination")
    if destination is not None and not isinstance(destination, str):
        raise FilesError(400, "invalid request body: destination must be a string")
    if not destination:
        raise FilesError(400, "destination is required")
    username = body.get("username")
    if username is not None and not isinstance(username, str):
        raise FilesError(400, "invalid request body: username must be a string")
    return ComposeRequest(list(sources), destination, username or None)


async def compose(request: Request, state: DaemonState) -> Response:
    """``POST /files/compose``: concatenate ``source_paths`` into ``destination``."""
    if request.method != "POST":
        return api_error(405, f"{request.method} is not allowed on /files/compose; use POST")
    try:
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY_BYTES:
                raise FilesError(413, "compose request body too large")
        body = parse_request(bytes(raw))
        try:
            user = resolve_user(body.username, default_user=state.default_user)
        except UnknownUserError as exc:
            raise FilesError(401, str(exc)) from exc
        result = await asyncio.to_thread(compose_files, body.source_paths, body.destination, user)
    except FilesError as exc:
        return exc.response()
    except ClientDisconnect:
        return api_error(400, "the request was interrupted")
    return JSONResponse(result)


def _resolve(path: str, user: User, what: str) -> str:
    try:
        return resolve_path(path, user)
    except BadPathError as exc:
        raise FilesError(400, f"invalid {what} {path!r}: {exc}") from exc


def _check_source(path: str, resolved: str, destination: str) -> None:
    if resolved == destination:
        raise FilesError(400, f"source path {path!r} cannot be the same as the destination")
    try:
        info = os.stat(resolved)
    except FileNotFoundError as exc:
        raise FilesError(404, f"source file not found: '{resolved}'") from exc
    except OSError as exc:
        raise os_error(exc, resolved) from exc
    if stat.S_ISDIR(info.st_mode):
        raise FilesError(400, f"source path '{resolved}' is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise FilesError(400, f"source path '{resolved}' is not a regular file")


def open_temporary(destination: str) -> tuple[str, int]:
    """Create a new file next to ``destination`` (same file system: the rename is atomic).

    Returns:
        Its path and a descriptor open for writing.

    Raises:
        OSError: it could not be created.
    """
    tag = secrets.token_hex(8)
    name = f"{posixpath.basename(destination)}.e2b-compose.{tag}.tmp"
    if len(os.fsencode(name)) > NAME_MAX:
        name = f".e2b-compose.{tag}.tmp"
    path = posixpath.join(posixpath.dirname(destination), name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    return path, os.open(path, flags, 0o666)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_file(source: int, target: int) -> int:
    """Copy the rest of ``source`` to ``target`` at their current offsets; the bytes copied.

    ``copy_file_range`` keeps the data in the kernel. Where it cannot serve the pair (another
    file system on old kernels, some network or FUSE mounts) or reports an end of file early
    (pseudo files whose size is 0), plain reads and writes take over from the same offsets.
    """
    total = 0
    kernel_copy = hasattr(os, "copy_file_range")
    while True:
        if kernel_copy:
            try:
                copied = os.copy_file_range(source, target, COPY_CHUNK)
            except OSError as exc:
                if exc.errno not in _NO_RANGE_COPY:
                    raise
                kernel_copy = False
                continue
            if copied:
                total += copied
                continue
            kernel_copy = False  # confirm the end with a plain read
        data = os.read(source, COPY_CHUNK)
        if not data:
            return total
        _write_all(target, data)
        total += len(data)


def compose_files(sources: list[str], destination: str, user: User) -> dict[str, Any]:
    """Concatenate ``sources`` into ``destination`` atomically, then delete the sources.

    Runs in a worker thread (it blocks on the file system).

    Returns:
        The new file's entry: ``{"path", "name", "type": "file"}``.

    Raises:
        FilesError: with envd's status and a message; nothing was changed then.
    """
    target = _resolve(destination, user, "destination")
    if os.path.isdir(target):
        raise FilesError(400, f"destination '{target}' is a directory")
    resolved = [_resolve(path, user, "source path") for path in sources]
    for path, source in zip(sources, resolved, strict=True):
        _check_source(path, source, target)
    parent = posixpath.dirname(target)
    try:
        make_dirs(parent, user)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise FilesError(400, f"a parent of '{target}' is not a directory") from exc
        raise os_error(exc, parent) from exc
    try:
        temporary, fd = open_temporary(target)
    except OSError as exc:
        raise os_error(exc, target) from exc
    size = 0
    try:
        try:
            chown(temporary, user)
            for source in resolved:
                size += _append_path(source, fd, target)
        finally:
            os.close(fd)
        os.rename(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise os_error(exc, target) from exc
        raise
    for source in dict.fromkeys(resolved):
        with contextlib.suppress(OSError):
            os.unlink(source)
    logger.info("composed %d file(s) into %s (%d bytes)", len(resolved), target, size)
    return {"path": target, "name": posixpath.basename(target), "type": "file"}


def _append_path(source: str, fd: int, target: str) -> int:
    try:
        source_fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FilesError(404, f"source file not found: '{source}'") from exc
        raise os_error(exc, source) from exc
    try:
        return append_file(source_fd, fd)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise os_error(exc, target) from exc
        reason = exc.strerror or str(exc)
        raise FilesError(500, f"cannot copy '{source}' into '{target}': {reason}") from exc
    finally:
        os.close(source_fd)
