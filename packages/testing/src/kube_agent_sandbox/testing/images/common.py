"""Shared pieces of the image builder: its error type, its cache folder and command runner.

Images are built without a registry or a container engine, from Debian packages and local
files, and every result is cached outside the repository so that only the first build is slow.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from kube_agent_sandbox.testing import versions

_log = logging.getLogger(__name__)


class ImageBuildError(RuntimeError):
    """An image or one of its layers could not be built."""


def images_cache_dir() -> Path:
    """Folder of cached layers and OCI archives (created on first use)."""
    path = versions.cache_root() / "images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_key(parts: Mapping[str, object]) -> str:
    """A short stable hash of the inputs of a build step, used in cached file names.

    Args:
        parts: JSON-serialisable description of every input that changes the output.

    Returns:
        16 hexadecimal characters.
    """
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run(
    argv: Sequence[str],
    *,
    what: str,
    log_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 1800.0,
) -> str:
    """Run a build command and return its output; raise with the output's tail on failure.

    Args:
        argv: Program and arguments.
        what: Step name used in messages.
        log_file: File that receives the full output, when given.
        env: Full environment of the child (the parent's when None).
        cwd: Working directory.
        timeout: Seconds before the command is killed.

    Returns:
        stdout and stderr of the command, interleaved.

    Raises:
        ImageBuildError: If the program is missing, fails or times out.
    """
    _log.debug("%s: %s", what, " ".join(argv))
    try:
        result = subprocess.run(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as err:
        raise ImageBuildError(f"{what}: {argv[0]} is not installed") from err
    except subprocess.TimeoutExpired as err:
        raise ImageBuildError(f"{what}: timed out after {timeout:.0f}s") from err
    if log_file is not None:
        log_file.write_text(result.stdout)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-30:])
        raise ImageBuildError(f"{what} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def unmount_below(root: Path) -> None:
    """Unmount anything still mounted inside ``root`` (deepest first) before it is deleted.

    debootstrap mounts ``/proc`` and ``/sys`` into its target, the kubelet and containerd mount
    volumes and root filesystems below their folders: deleting a folder must never walk into
    a mount (the host's ``/proc``, a volume) that a crashed run left behind.

    Args:
        root: Folder about to be removed.
    """
    prefix = str(root.resolve()) + "/"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    points = [line.split()[1] for line in lines if len(line.split()) > 1]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        run(["umount", "-l", point], what=f"umount {point}")


def prune_older(name: str, *, keep: set[Path]) -> None:
    """Delete the cached images and app layers of ``name`` built from earlier sources.

    Every source change makes a new archive of a few hundred MB, so the cache would otherwise
    only grow; only the files in ``keep`` (the current image and layer) stay.

    Args:
        name: The image's name (``controller``, ``gateway``, ``sandbox``).
        keep: Files to keep.
    """
    folder = images_cache_dir()
    for pattern in (f"{name}-*.oci.tar", f"{name}-app-*.layer.tar", f"{name}-app-*.layer.json"):
        for path in folder.glob(pattern):
            if path not in keep:
                path.unlink(missing_ok=True)
