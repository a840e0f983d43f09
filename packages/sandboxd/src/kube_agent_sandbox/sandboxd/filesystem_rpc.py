"""The ``filesystem.Filesystem`` Connect service: Stat, ListDir, MakeDir, Remove, Move.

Entries are ``EntryInfo`` in proto3 JSON: ``name``, ``type`` (``FILE_TYPE_FILE`` /
``FILE_TYPE_DIRECTORY``; a symlink reports its target's type and ``isSymlink``), ``path``,
``size`` (int64, so a decimal string), ``mode`` (permission bits), ``permissions`` (``ls``-style
text), ``owner``, ``group``, ``modifiedTime`` (RFC 3339), ``symlinkTarget``. Errors carry the
codes the SDK branches on: ``not_found`` (``exists()`` → False), ``already_exists``
(``make_dir()`` → False), ``invalid_argument``, ``permission_denied``, ``resource_exhausted``.
Directories and files created for a request are owned by the request's user.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import grp
import os
import posixpath
import pwd
import shutil
import stat
import uuid
from collections.abc import AsyncGenerator, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request

from kube_agent_sandbox.sandboxd import file_metadata
from kube_agent_sandbox.sandboxd.connect_codec import (
    Code,
    ConnectError,
    Message,
    Method,
    get_bool,
    get_int,
    get_str,
)
from kube_agent_sandbox.sandboxd.dir_watch import (
    DirectoryWatch,
    PolledWatcher,
    WatchError,
    check_directory,
)
from kube_agent_sandbox.sandboxd.init_state import DaemonState
from kube_agent_sandbox.sandboxd.process_rpc import keepalive_seconds, request_user
from kube_agent_sandbox.sandboxd.users import BadPathError, User, resolve_path

MAX_LIST_ENTRIES = 100_000
MAX_WATCHERS = 256


def os_error(exc: OSError, path: str) -> ConnectError:
    """The Connect error for a failed filesystem call."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT:
        return ConnectError(Code.NOT_FOUND, f"path '{path}' does not exist")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ConnectError(Code.PERMISSION_DENIED, f"{path}: {reason}")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ConnectError(Code.RESOURCE_EXHAUSTED, f"{path}: no space left on device")
    if exc.errno == errno.EEXIST:
        return ConnectError(Code.ALREADY_EXISTS, f"path '{path}' already exists")
    if exc.errno in (errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EINVAL):
        return ConnectError(Code.INVALID_ARGUMENT, f"{path}: {reason}")
    return ConnectError(Code.INTERNAL, f"{path}: {reason}")


def _name_of(table: Any, ident: int) -> str:
    try:
        return str(table(ident)[0])
    except KeyError:
        return str(ident)


def permissions_text(mode: int) -> str:
    """Go's ``fs.FileMode.String()`` for the common types (``drwxr-xr-x``)."""
    if stat.S_ISDIR(mode):
        kind = "d"
    elif stat.S_ISLNK(mode):
        kind = "L"
    elif stat.S_ISFIFO(mode):
        kind = "p"
    elif stat.S_ISSOCK(mode):
        kind = "S"
    elif stat.S_ISCHR(mode):
        kind = "Dc"
    elif stat.S_ISBLK(mode):
        kind = "D"
    else:
        kind = "-"
    bits = "".join(
        letter if mode & (1 << (8 - index)) else "-" for index, letter in enumerate("rwxrwxrwx")
    )
    return kind + bits


def entry_info(path: str) -> Message:
    """The ``EntryInfo`` of a path (symlinks are not followed for identity, only for type).

    Raises:
        OSError: the path cannot be examined.
    """
    link = os.lstat(path)
    info = link
    entry: Message = {}
    if stat.S_ISLNK(link.st_mode):
        entry["isSymlink"] = True
        target = os.readlink(path)
        entry["symlinkTarget"] = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        with contextlib.suppress(OSError):
            info = os.stat(path)
    if stat.S_ISDIR(info.st_mode):
        file_type = "FILE_TYPE_DIRECTORY"
    elif stat.S_ISLNK(info.st_mode):  # dangling link
        file_type = "FILE_TYPE_SYMLINK"
    else:
        file_type = "FILE_TYPE_FILE"
    entry.update(
        {
            "name": posixpath.basename(path) or "/",
            "type": file_type,
            "path": path,
            "size": str(info.st_size),
            "mode": stat.S_IMODE(info.st_mode) & 0o777,
            "permissions": permissions_text(info.st_mode),
            "owner": _name_of(pwd.getpwuid, link.st_uid),
            "group": _name_of(grp.getgrgid, link.st_gid),
            "modifiedTime": datetime.fromtimestamp(info.st_mtime, tz=UTC)
            .isoformat()
            .replace("+00:00", "Z"),
        }
    )
    stored = file_metadata.read(path)
    if stored:
        entry["metadata"] = stored
    return {key: value for key, value in entry.items() if value not in ("", 0, "0", None)}


def list_entries(root: str, depth: int) -> list[Message]:
    """Entries below ``root``, ``depth`` levels deep (1 = direct children); links not followed.

    Raises:
        OSError: ``root`` cannot be listed.
    """
    entries: list[Message] = []
    pending: list[tuple[str, int]] = [(root, 1)]
    while pending:
        directory, level = pending.pop(0)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            if directory == root:
                raise
            continue
        for name in names:
            child = posixpath.join(directory, name)
            try:
                entry = entry_info(child)
            except OSError:
                continue  # vanished or unreadable while listing
            entries.append(entry)
            if len(entries) >= MAX_LIST_ENTRIES:
                return entries
            if (
                level < depth
                and entry.get("type") == "FILE_TYPE_DIRECTORY"
                and not entry.get("isSymlink")
            ):
                pending.append((child, level + 1))
    return entries


def list_directory(path: str, depth: int) -> list[Message]:
    """:func:`list_entries` of a path that must be a directory.

    Raises:
        ConnectError: ``invalid_argument`` when the path is not a directory.
        OSError: the path is missing or cannot be listed.
    """
    if not os.path.isdir(path):
        os.stat(path)  # not_found when absent
        raise ConnectError(Code.INVALID_ARGUMENT, f"path '{path}' is not a directory")
    return list_entries(path, depth)


def make_dirs(path: str, user: User) -> bool:
    """Create ``path`` and missing parents owned by ``user``; False if it already was a directory.

    Raises:
        OSError: creation failed (``ENOTDIR`` when a parent or the path is a file).
    """
    missing: list[str] = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        parent = posixpath.dirname(current)
        if parent == current:
            break
        current = parent
    if not missing:
        if os.path.isdir(path):
            return False
        raise OSError(errno.ENOTDIR, "exists and is not a directory")
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o755)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            continue
        chown(directory, user)
    return True


def chown(path: str, user: User) -> None:
    """Give ``path`` to ``user`` when the daemon acts for another user (best effort)."""
    if user.switch:
        with contextlib.suppress(OSError):
            os.lchown(path, user.uid, user.gid)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _move(source: str, destination: str, user: User) -> None:
    os.lstat(source)  # not_found before parents are created
    parent = posixpath.dirname(destination)
    if parent:
        make_dirs(parent, user)
    try:
        os.rename(source, destination)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(source, destination)


class FilesystemService:
    """Handlers of ``filesystem.Filesystem``."""

    def __init__(self, state: DaemonState) -> None:
        """Create the service.

        Args:
            state: The daemon's configuration.
        """
        self.state = state
        self.watchers: dict[str, PolledWatcher] = {}

    def close(self) -> None:
        """Stop every polled watcher (daemon exit)."""
        for watcher in self.watchers.values():
            if watcher.watch is not None:
                watcher.watch.close()
        self.watchers.clear()

    def methods(self) -> dict[str, Method]:
        """The served RPCs by path."""
        prefix = "/filesystem.Filesystem/"
        return {
            prefix + "Stat": Method(unary=self.stat),
            prefix + "ListDir": Method(unary=self.list_dir),
            prefix + "MakeDir": Method(unary=self.make_dir),
            prefix + "Remove": Method(unary=self.remove),
            prefix + "Move": Method(unary=self.move),
            prefix + "WatchDir": Method(stream=self.watch_dir),
            prefix + "CreateWatcher": Method(unary=self.create_watcher),
            prefix + "GetWatcherEvents": Method(unary=self.get_watcher_events),
            prefix + "RemoveWatcher": Method(unary=self.remove_watcher),
        }

    def _path(self, request: Request, message: Message, field: str = "path") -> tuple[str, User]:
        user = request_user(request, self.state)
        try:
            return resolve_path(get_str(message, field), user), user
        except BadPathError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"{field}: {exc}") from exc

    async def stat(self, request: Request, message: Message) -> Message:
        """``Stat``: the entry of one path."""
        path, _user = self._path(request, message)
        try:
            entry = await asyncio.to_thread(entry_info, path)
        except OSError as exc:
            raise os_error(exc, path) from exc
        return {"entry": entry}

    async def list_dir(self, request: Request, message: Message) -> Message:
        """``ListDir``: the entries below a directory, ``depth`` levels (0 = 1)."""
        path, _user = self._path(request, message)
        depth = get_int(message, "depth") or 1
        if depth < 1:
            raise ConnectError(Code.INVALID_ARGUMENT, "depth must be at least 1")
        try:
            entries = await asyncio.to_thread(list_directory, path, depth)
        except OSError as exc:
            raise os_error(exc, path) from exc
        return {"entries": entries} if entries else {}

    async def make_dir(self, request: Request, message: Message) -> Message:
        """``MakeDir``: create a directory and its parents; ``already_exists`` if present."""
        path, user = self._path(request, message)
        try:
            created = await asyncio.to_thread(make_dirs, path, user)
            if not created:
                raise ConnectError(Code.ALREADY_EXISTS, f"directory '{path}' already exists")
            entry = await asyncio.to_thread(entry_info, path)
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and await asyncio.to_thread(os.path.lexists, path):
                raise ConnectError(
                    Code.INVALID_ARGUMENT, f"path '{path}' exists and is not a directory"
                ) from exc
            raise os_error(exc, path) from exc
        return {"entry": entry}

    async def remove(self, request: Request, message: Message) -> Message:
        """``Remove``: delete a file, link or directory tree."""
        path, _user = self._path(request, message)
        if path == "/":
            raise ConnectError(Code.INVALID_ARGUMENT, "refusing to remove '/'")
        try:
            await asyncio.to_thread(_remove, path)
        except OSError as exc:
            raise os_error(exc, path) from exc
        return {}

    async def move(self, request: Request, message: Message) -> Message:
        """``Move``: rename ``source`` to ``destination`` (parents created)."""
        source, user = self._path(request, message, "source")
        destination, _user = self._path(request, message, "destination")
        try:
            await asyncio.to_thread(_move, source, destination, user)
            entry = await asyncio.to_thread(entry_info, destination)
        except OSError as exc:
            raise os_error(exc, source) from exc
        return {"entry": entry}

    async def _start_watch(
        self,
        request: Request,
        message: Message,
        on_event: Callable[[Message], None],
    ) -> DirectoryWatch:
        path, _user = self._path(request, message)
        include_entry = get_bool(message, "includeEntry")
        try:
            await asyncio.to_thread(check_directory, path)
            return DirectoryWatch(
                path,
                recursive=get_bool(message, "recursive"),
                on_event=on_event,
                entry_of=_entry_or_none if include_entry else None,
            )
        except WatchError as exc:
            if exc.errno == errno.ENOTDIR:
                raise ConnectError(Code.INVALID_ARGUMENT, str(exc)) from exc
            raise os_error(exc, path) from exc
        except OSError as exc:
            raise os_error(exc, path) from exc

    async def watch_dir(self, request: Request, message: Message) -> AsyncGenerator[Message, None]:
        """``WatchDir``: ``start{}``, then ``filesystem{event}`` messages (and keepalives)."""
        queue: asyncio.Queue[Message] = asyncio.Queue()
        watch = await self._start_watch(request, message, queue.put_nowait)
        keepalive = keepalive_seconds(request)
        try:
            yield {"start": {}}
            while not watch.closed or not queue.empty():
                try:
                    event = await asyncio.wait_for(queue.get(), keepalive or 3600)
                except TimeoutError:
                    if keepalive is not None:
                        yield {"keepalive": {}}
                    continue
                yield {"filesystem": event}
        finally:
            watch.close()

    async def create_watcher(self, request: Request, message: Message) -> Message:
        """``CreateWatcher``: a watch polled with ``GetWatcherEvents``."""
        if len(self.watchers) >= MAX_WATCHERS:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, "too many watchers")
        watcher = PolledWatcher(uuid.uuid4().hex)
        watcher.watch = await self._start_watch(request, message, watcher.add)
        self.watchers[watcher.watch_id] = watcher
        return {"watcherId": watcher.watch_id}

    def _watcher(self, message: Message) -> PolledWatcher:
        watch_id = get_str(message, "watcherId")
        watcher = self.watchers.get(watch_id)
        if watcher is None:
            raise ConnectError(Code.NOT_FOUND, f"watcher '{watch_id}' not found")
        return watcher

    async def get_watcher_events(self, request: Request, message: Message) -> Message:
        """``GetWatcherEvents``: the events since the last call."""
        del request
        events = self._watcher(message).drain()
        return {"events": events} if events else {}

    async def remove_watcher(self, request: Request, message: Message) -> Message:
        """``RemoveWatcher``: stop a polled watch."""
        del request
        watcher = self._watcher(message)
        if watcher.watch is not None:
            watcher.watch.close()
        self.watchers.pop(watcher.watch_id, None)
        return {}


def _entry_or_none(path: str) -> Message | None:
    try:
        return entry_info(path)
    except OSError:
        return None
