"""Directory watches for ``files.watch_dir``: Linux inotify through ctypes (no dependency).

The SDK watches two ways: the async client opens a ``WatchDir`` server stream, the sync client
creates a watcher (``CreateWatcher``) and polls it (``GetWatcherEvents``) until
``RemoveWatcher``. Both are fed by :class:`DirectoryWatch`, which turns inotify events into
proto3-JSON ``FilesystemEvent`` dicts: ``name`` (relative to the watched directory), ``type``
(``EVENT_TYPE_CREATE``, ``WRITE``, ``REMOVE``, ``RENAME``, ``CHMOD``) and, when asked for, the
``entry``. A recursive watch follows directories created later.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import posixpath
import struct
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000

WATCH_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
_EVENT_HEADER = struct.Struct("iIII")
# Events a polled watcher keeps before the oldest are dropped (a client that stopped polling).
MAX_BUFFERED_EVENTS = 10_000

Event = dict[str, Any]


class WatchError(OSError):
    """Setting up a watch failed (errno tells why)."""


def _libc() -> Any:
    name = ctypes.util.find_library("c") or "libc.so.6"
    return ctypes.CDLL(name, use_errno=True)


_LIBC: Any = None


def _lib() -> Any:
    global _LIBC
    if _LIBC is None:
        _LIBC = _libc()
    return _LIBC


def _event_types(mask: int) -> list[str]:
    types: list[str] = []
    if mask & (IN_CREATE | IN_MOVED_TO):
        types.append("EVENT_TYPE_CREATE")
    if mask & IN_MODIFY:
        types.append("EVENT_TYPE_WRITE")
    if mask & IN_DELETE:
        types.append("EVENT_TYPE_REMOVE")
    if mask & IN_MOVED_FROM:
        types.append("EVENT_TYPE_RENAME")
    if mask & IN_ATTRIB:
        types.append("EVENT_TYPE_CHMOD")
    return types


class DirectoryWatch:
    """An inotify watch of one directory (optionally its whole tree)."""

    def __init__(
        self,
        root: str,
        *,
        recursive: bool,
        on_event: Callable[[Event], None],
        entry_of: Callable[[str], Event | None] | None = None,
    ) -> None:
        """Start watching.

        Args:
            root: The absolute directory to watch.
            recursive: Also watch every subdirectory, present and future.
            on_event: Receives each event (on the event loop).
            entry_of: When given, builds the ``entry`` of non-remove events from a path.

        Raises:
            WatchError: the directory is missing or not a directory, or inotify failed.
        """
        self.root = root
        self.recursive = recursive
        self.on_event = on_event
        self.entry_of = entry_of
        self.closed = False
        self._dirs: dict[int, str] = {}
        lib = _lib()
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise WatchError(code, f"inotify_init1: {os.strerror(code)}")
        self._fd = int(fd)
        try:
            self._add(root)
            if recursive:
                self._add_tree(root)
        except BaseException:
            os.close(self._fd)
            raise
        asyncio.get_running_loop().add_reader(self._fd, self._readable)

    def _add(self, directory: str) -> None:
        wd = _lib().inotify_add_watch(self._fd, os.fsencode(directory), WATCH_MASK)
        if wd < 0:
            code = ctypes.get_errno()
            raise WatchError(code, f"{directory}: {os.strerror(code)}")
        self._dirs[int(wd)] = directory

    def _add_tree(self, directory: str) -> None:
        for current, subdirs, _files in os.walk(directory):
            for name in subdirs:
                child = posixpath.join(current, name)
                if os.path.islink(child):
                    continue
                with contextlib.suppress(WatchError):
                    self._add(child)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 256 * 1024)
        except BlockingIOError:
            return
        except OSError as exc:
            logger.warning("watch of %s failed: %s", self.root, exc)
            self.close()
            return
        offset = 0
        while offset + _EVENT_HEADER.size <= len(data):
            wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            offset += _EVENT_HEADER.size
            raw_name = data[offset : offset + length].rstrip(b"\0")
            offset += length
            self._handle(wd, mask, os.fsdecode(raw_name))

    def _handle(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            logger.warning("watch of %s overflowed: events were lost", self.root)
            return
        directory = self._dirs.get(wd)
        if directory is None:
            return
        if mask & IN_IGNORED:
            self._dirs.pop(wd, None)
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            if directory == self.root:
                self.close()
            return
        path = posixpath.join(directory, name) if name else directory
        if self.recursive and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
            with contextlib.suppress(WatchError):
                self._add(path)
                self._add_tree(path)
        relative = posixpath.relpath(path, self.root)
        for event_type in _event_types(mask):
            event: Event = {"name": relative, "type": event_type}
            if self.entry_of is not None and event_type not in (
                "EVENT_TYPE_REMOVE",
                "EVENT_TYPE_RENAME",
            ):
                entry = self.entry_of(path)
                if entry is not None:
                    event["entry"] = entry
            self.on_event(event)

    def close(self) -> None:
        """Stop watching (idempotent)."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._fd)
        with contextlib.suppress(OSError):
            os.close(self._fd)


def check_directory(path: str) -> None:
    """Raise the OSError a watch of ``path`` would hit (missing, not a directory)."""
    if not os.path.isdir(path):
        os.stat(path)
        raise WatchError(errno.ENOTDIR, f"path '{path}' is not a directory")


class PolledWatcher:
    """A watch whose events wait in a buffer for ``GetWatcherEvents``."""

    def __init__(self, watch_id: str) -> None:
        """Create an empty buffer."""
        self.watch_id = watch_id
        self.events: list[Event] = []
        self.watch: DirectoryWatch | None = None
        self.dropped = 0

    def add(self, event: Event) -> None:
        """Buffer one event (dropping the oldest beyond the limit)."""
        self.events.append(event)
        if len(self.events) > MAX_BUFFERED_EVENTS:
            del self.events[0]
            self.dropped += 1

    def drain(self) -> list[Event]:
        """The buffered events, oldest first; the buffer is emptied."""
        events, self.events = self.events, []
        return events
