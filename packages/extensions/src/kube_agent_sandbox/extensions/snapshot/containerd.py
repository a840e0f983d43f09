"""What a snapshot needs from the node's containerd, through its ``ctr`` client.

``ctr`` ships with every containerd and speaks its API on the socket, so the node side needs no
gRPC stubs: the container's image and snapshot key (``containers info``), the upper directory
of its overlay root (``snapshots mounts``, the same mount options the runtime used), the base
image's manifest, config and layers from the content store (``content get``), and the freezer
(``tasks pause``/``resume``: runc freezes the container's cgroup, v1 or v2).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

CRI_NAMESPACE: Final = "k8s.io"
SUPPORTED_SNAPSHOTTER: Final = "overlayfs"
_CONTAINER_ID = re.compile(r"^[a-f0-9]{64}$")


class ContainerdError(RuntimeError):
    """containerd could not answer what a snapshot needs (the message says what and why)."""


@dataclass(frozen=True)
class ContainerInfo:
    """The parts of a containerd container a snapshot uses."""

    container_id: str
    image: str
    snapshotter: str
    snapshot_key: str


def container_id_from_status(container_id: str) -> str:
    """The bare ID from a Pod's ``containerStatuses[].containerID`` (``containerd://<id>``).

    Raises:
        ContainerdError: Another runtime's ID, or not a containerd container ID.
    """
    runtime, sep, bare = container_id.partition("://")
    if sep and runtime != "containerd":
        raise ContainerdError(f"container {container_id!r} runs on {runtime}, not containerd")
    bare = bare if sep else container_id
    if not _CONTAINER_ID.match(bare):
        raise ContainerdError(f"{container_id!r} is not a containerd container ID")
    return bare


class ContainerdNode:
    """The node's containerd, reached through ``ctr`` on its socket."""

    def __init__(self, address: Path, *, namespace: str = CRI_NAMESPACE, ctr: str = "ctr") -> None:
        """Args:
        address: containerd's gRPC socket.
        namespace: The containerd namespace of the CRI plugin's containers.
        ctr: The ``ctr`` program.
        """
        self.address = address
        self.namespace = namespace
        self._ctr = ctr

    def _argv(self, *args: str) -> list[str]:
        return [self._ctr, "--address", str(self.address), "--namespace", self.namespace, *args]

    def _run(self, *args: str, timeout: float = 60.0) -> str:
        try:
            result = subprocess.run(
                self._argv(*args), capture_output=True, text=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ContainerdError(f"ctr {' '.join(args)}: {err}") from err
        if result.returncode != 0:
            raise ContainerdError(
                f"ctr {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result.stdout

    def container(self, container_id: str) -> ContainerInfo:
        """The container's image and overlay snapshot.

        Raises:
            ContainerdError: It does not exist, or its root is not an overlayfs snapshot.
        """
        info = json.loads(self._run("containers", "info", container_id))
        snapshotter = str(info.get("Snapshotter") or "")
        if snapshotter != SUPPORTED_SNAPSHOTTER:
            raise ContainerdError(
                f"container {container_id} uses the {snapshotter or 'no'} snapshotter; "
                f"filesystem snapshots need {SUPPORTED_SNAPSHOTTER}"
            )
        return ContainerInfo(
            container_id=container_id,
            image=str(info.get("Image") or ""),
            snapshotter=snapshotter,
            snapshot_key=str(info.get("SnapshotKey") or container_id),
        )

    def upper_dir(self, container: ContainerInfo) -> Path:
        """The upper directory of the container's overlay root (its writable layer).

        Raises:
            ContainerdError: The snapshot has no upper directory (a read-only view).
        """
        # ctr prints the mount command; nothing is mounted. The target is only echoed.
        out = self._run(
            "snapshots",
            "--snapshotter",
            container.snapshotter,
            "mounts",
            "/",
            container.snapshot_key,
        )
        match = re.search(r"upperdir=([^,\s]+)", out)
        if match is None:
            raise ContainerdError(
                f"snapshot {container.snapshot_key} has no upper directory: {out.strip()!r}"
            )
        return Path(match.group(1))

    def image_target(self, image: str) -> tuple[str, str]:
        """The digest and media type an image name points at (manifest or index).

        Raises:
            ContainerdError: containerd holds no image of that name.
        """
        for line in self._run("images", "ls").splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 3 and fields[0] == image:
                return fields[2], fields[1]
        raise ContainerdError(f"containerd holds no image named {image!r}")

    def _content_get(self, digest: str, out: int | IO[bytes], timeout: float) -> bytes:
        """Run ``ctr content get``; return what stdout captured (nothing when ``out`` is a file)."""
        try:
            result = subprocess.run(
                self._argv("content", "get", digest),
                stdout=out,
                stderr=subprocess.PIPE,
                timeout=timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ContainerdError(f"ctr content get {digest}: {err}") from err
        if result.returncode != 0:
            raise ContainerdError(
                f"the content store has no blob {digest} (was the base image pruned?): "
                f"{result.stderr.decode().strip()}"
            )
        return result.stdout or b""

    def read_content(self, digest: str) -> bytes:
        """A small blob (manifest, index, config) of the content store.

        Raises:
            ContainerdError: The content store does not hold it.
        """
        return self._content_get(digest, subprocess.PIPE, timeout=60)

    def copy_content(self, digest: str, target: Path) -> None:
        """Stream a blob of the content store (a layer may be large) into ``target``.

        Raises:
            ContainerdError: The content store does not hold it.
        """
        with target.open("wb") as out:
            self._content_get(digest, out, timeout=1800)

    def pause(self, container_id: str) -> None:
        """Freeze the container's processes (its cgroup's freezer)."""
        self._run("tasks", "pause", container_id)

    def resume(self, container_id: str) -> None:
        """Thaw the container's processes."""
        self._run("tasks", "resume", container_id)
