"""Tell "out of space" from other commit failures, and say where and how much.

A node agent that fills its work folder, and a registry that cannot store one more blob, fail a
snapshot with their own reasons (``NodeDiskFull``, ``RegistryStorageFull``): the fix is to free
space or raise a quota, not to look for a bug. The space is found in the error itself (``ENOSPC``
or ``EDQUOT``, also when a layer error wraps it), in the kubelet's answer to a checkpoint, or in
the registry's (HTTP 507, or a storage error whose text says so: CNCF distribution answers 500
with the driver's "no space left on device").
"""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from typing import Final

from kube_agent_sandbox.extensions.snapshot.registry import RegistryError

NO_SPACE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
INSUFFICIENT_STORAGE: Final = 507
_NO_SPACE_TEXTS: Final = (
    "no space left on device",
    "disk quota exceeded",
    "insufficient storage",
    "storage quota",
    "quota exceeded",
)


def _says_no_space(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in _NO_SPACE_TEXTS)


def disk_full_error(err: BaseException) -> OSError | None:
    """The ``ENOSPC``/``EDQUOT`` error behind ``err`` (itself or what it wraps), else None."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in NO_SPACE_ERRNOS:
            return current
        current = current.__cause__ or current.__context__
    return None


def node_disk_full(err: BaseException) -> bool:
    """Whether ``err`` is the node running out of space (a local write, or the kubelet's
    checkpoint, which reports its own ``ENOSPC`` as text)."""
    if isinstance(err, RegistryError):
        return False
    return disk_full_error(err) is not None or _says_no_space(str(err))


def registry_full(err: RegistryError) -> bool:
    """Whether the registry refused a write for want of storage (or quota)."""
    if err.status == INSUFFICIENT_STORAGE:
        return True
    return err.status >= 400 and _says_no_space(f"{err} {err.body}")


def _storage_detail(body: str) -> str:
    """The OCI error of ``body`` that speaks of space (distribution's storage driver error)."""
    try:
        errors = json.loads(body).get("errors") or []
    except (ValueError, AttributeError):
        return ""
    for error in errors if isinstance(errors, list) else []:
        text = f"{error.get('message') or ''}: {error.get('detail') or ''}"
        if _says_no_space(text):
            return str(error.get("detail") or error.get("message"))
    return ""


def _size(count: int) -> str:
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _existing(folder: Path) -> Path:
    """The folder, or its nearest existing parent (the partial files' folder is removed)."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate
    return folder


def disk_full_message(node: str, err: BaseException, workdir: Path) -> str:
    """What ran out, where, and what to do.

    Args:
        node: The agent's node.
        err: The failure (:func:`node_disk_full` is true of it).
        workdir: The agent's work folder (named when the error names no file).
    """
    found = disk_full_error(err)
    if found is None:  # the kubelet said so of its checkpoint: its folder, not the agent's
        return (
            f"node {node} ran out of space writing the checkpoint: {err}. Nothing was pushed "
            "and the container kept running; free space in the kubelet's checkpoints folder "
            "(<kubelet root>/checkpoints)"
        )
    folder = Path(str(found.filename)).parent if found and found.filename else workdir
    try:
        usage = shutil.disk_usage(_existing(folder))
        room = f" ({_size(usage.free)} free of {_size(usage.total)} once its partial files went)"
    except OSError:
        room = ""
    return (
        f"the node agent on node {node} ran out of space in {folder}{room} writing the "
        f"snapshot: {err}. Nothing was pushed and the container kept running; free space on "
        "the node or give the agent a larger --workdir"
    )


def registry_full_message(err: RegistryError) -> str:
    """The registry's refusal (with its storage error), and what to do."""
    detail = _storage_detail(err.body)
    return (
        f"the registry has no room for the snapshot{f' ({detail})' if detail else ''}: {err}. "
        "The container kept running; "
        "free space in the registry's storage (delete snapshots, run its garbage collection) "
        "or raise its quota"
    )
