"""One real node per machine at a time.

A real node changes machine-wide state: a named bridge, kube-proxy's iptables chains, the
``kubepods`` cgroups. Two at once would fight over them, so each holds an exclusive ``flock``
on one lock file for its lifetime; a second one waits for the first, then fails clearly.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path
from typing import IO

_log = logging.getLogger(__name__)

LOCK_FILE = Path("/tmp/agent-sandbox-real-node.lock")


class NodeBusyError(RuntimeError):
    """Another real node holds the machine."""


class MachineLock:
    """An exclusive lock on the machine's real-node slot."""

    def __init__(self, path: Path = LOCK_FILE) -> None:
        """Prepare the lock.

        Args:
            path: The lock file.
        """
        self.path = path
        self._file: IO[str] | None = None

    def acquire(self, *, timeout: float) -> None:
        """Take the lock, waiting up to ``timeout`` seconds for another holder to finish.

        Args:
            timeout: Seconds to wait.

        Raises:
            NodeBusyError: If the lock is still held after ``timeout``.
        """
        handle = self.path.open("a+")
        deadline = time.monotonic() + timeout
        announced = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "unknown"
                    handle.close()
                    raise NodeBusyError(
                        f"another real node runs on this machine (holder: {holder}); "
                        f"waited {timeout:.0f}s for {self.path}"
                    ) from None
                if not announced:
                    _log.info("waiting for another real node on this machine to stop")
                    announced = True
                time.sleep(1)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._file = handle

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._file is not None

    def release(self) -> None:
        """Release the lock (no-op when not held)."""
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
