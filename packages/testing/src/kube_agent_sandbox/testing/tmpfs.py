"""A small real filesystem for "disk full" tests: a size-limited tmpfs mounted on a folder.

Mounting needs root (CI runs as root); :func:`tmpfs_or_skip` skips the test otherwise.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (it runs as root)."""
    return os.geteuid() == 0


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, size: str = "1m") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (``mount -o size=``: ``1m``, ``512k``) on ``folder`` (created),
    unmounted on exit.

    Raises:
        subprocess.CalledProcessError: ``mount`` failed (not root, no tmpfs support).
    """
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        check=True,
        capture_output=True,
    )
    try:
        yield folder
    finally:
        # Lazy: a process still holding a file there (a stopped registry) must not fail the test.
        subprocess.run(["umount", "-l", str(folder)], check=True, capture_output=True)


@contextlib.contextmanager
def tmpfs_or_skip(folder: Path, size: str = "1m") -> Iterator[Path]:
    """:func:`mounted_tmpfs`, or skip the test when this process may not mount."""
    if not can_mount():
        pytest.skip("mounting a tmpfs needs root")
    with mounted_tmpfs(folder, size) as mounted:
        yield mounted


def resize_tmpfs(folder: Path, size: str) -> None:
    """Give a mounted tmpfs a new size (room freed, or taken away), its files kept.

    Raises:
        subprocess.CalledProcessError: ``mount -o remount`` failed.
    """
    subprocess.run(
        ["mount", "-o", f"remount,size={size}", str(folder)], check=True, capture_output=True
    )
