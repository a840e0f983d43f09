"""Pack folders into OCI image layers and images into OCI archives that containerd imports.

There is no registry and no image builder on the test machines, so images are assembled by
hand: each layer is an uncompressed tar of a folder (the root filesystem, the application), and
the image is an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) packed
as one tar, the format ``ctr images import`` reads. Layers are uncompressed because they never
travel over a network: skipping gzip makes both packing and unpacking several times faster.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kube_agent_sandbox.testing.images.common import ImageBuildError

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
# containerd names an imported image after this annotation; the OCI one is the tag alone.
CONTAINERD_NAME_ANNOTATION = "io.containerd.image.name"
OCI_REF_ANNOTATION = "org.opencontainers.image.ref.name"

_GO_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def host_architecture() -> str:
    """The host's CPU architecture in Go/OCI spelling (``amd64``, ``arm64``).

    Raises:
        ImageBuildError: If the architecture is not one the images are built for.
    """
    machine = platform.machine().lower()
    try:
        return _GO_ARCH[machine]
    except KeyError:
        raise ImageBuildError(f"unsupported CPU architecture {machine!r}") from None


@dataclass(frozen=True)
class Layer:
    """One uncompressed layer tar on disk with its digest (which is also its diff id)."""

    path: Path
    digest: str
    size: int

    def write_metadata(self) -> None:
        """Store the digest next to the tar so a cached layer is reused without re-hashing."""
        self.path.with_suffix(".json").write_text(
            json.dumps({"digest": self.digest, "size": self.size})
        )

    @classmethod
    def from_cache(cls, path: Path) -> Layer | None:
        """The cached layer at ``path``, or None when it or its metadata is missing.

        Args:
            path: Path of the layer tar.
        """
        meta = path.with_suffix(".json")
        if not path.is_file() or not meta.is_file():
            return None
        data = json.loads(meta.read_text())
        if data.get("size") != path.stat().st_size:
            return None
        return cls(path=path, digest=str(data["digest"]), size=int(data["size"]))


class _HashingWriter:
    """A write-only file object that hashes and counts what passes through it."""

    def __init__(self, target: IO[bytes]) -> None:
        self._target = target
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self._target.write(data)

    def tell(self) -> int:
        return self.size


ExcludeFilter = Callable[[str], bool]


def _top_level_contents(names: Sequence[str]) -> ExcludeFilter:
    """Exclude what is inside the given top-level folders, keeping the folders themselves."""
    prefixes = tuple(f"{n.strip('/')}/" for n in names)

    def exclude(arcname: str) -> bool:
        return arcname.startswith(prefixes)

    return exclude


def pack_layer(
    source: Path, dest: Path, *, empty_dirs: Sequence[str] = ("dev", "proc", "sys", "run")
) -> Layer:
    """Tar ``source`` into the layer file ``dest`` (numeric owners, hard links kept).

    Args:
        source: Folder whose contents become the layer's root.
        dest: Tar file to write (replaced atomically when complete).
        empty_dirs: Top-level folders kept but emptied (the runtime mounts them).

    Returns:
        The written layer.

    Raises:
        ImageBuildError: If ``source`` is not a folder.
    """
    if not source.is_dir():
        raise ImageBuildError(f"layer source {source} is not a folder")
    excluded = _top_level_contents(empty_dirs)
    partial = dest.with_name(dest.name + ".partial")

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = info.name.removeprefix("./")
        if excluded(name):
            return None
        info.uname = ""
        info.gname = ""
        return info

    with partial.open("wb") as raw:
        writer = _HashingWriter(raw)
        with tarfile.open(fileobj=writer, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for entry in sorted(os.listdir(source)):
                tar.add(source / entry, arcname=entry, recursive=True, filter=clean)
    partial.replace(dest)
    layer = Layer(path=dest, digest=f"sha256:{writer.sha256.hexdigest()}", size=writer.size)
    layer.write_metadata()
    return layer


@dataclass(frozen=True)
class ImageConfig:
    """The runtime defaults of an image (what a Dockerfile's ENV/ENTRYPOINT/... would set)."""

    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = "/"
    user: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    def to_oci(self, layers: Sequence[Layer], *, architecture: str) -> dict[str, Any]:
        """The OCI image configuration document for these defaults and layers.

        Args:
            layers: The image's layers, bottom first.
            architecture: OCI architecture name.

        Returns:
            The configuration as a JSON-ready dict.
        """
        runtime: dict[str, Any] = {
            "Env": [f"{k}={v}" for k, v in self.env.items()],
            "WorkingDir": self.working_dir,
        }
        if self.entrypoint:
            runtime["Entrypoint"] = list(self.entrypoint)
        if self.cmd:
            runtime["Cmd"] = list(self.cmd)
        if self.user:
            runtime["User"] = self.user
        if self.labels:
            runtime["Labels"] = dict(self.labels)
        return {
            "architecture": architecture,
            "os": "linux",
            "config": runtime,
            "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
            "history": [
                {"created_by": f"agent-sandbox testing layer {layer.path.name}"} for layer in layers
            ],
        }


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _blob(data: bytes) -> tuple[str, bytes]:
    return f"sha256:{hashlib.sha256(data).hexdigest()}", data


def write_oci_archive(
    dest: Path,
    *,
    reference: str,
    layers: Sequence[Layer],
    config: ImageConfig,
) -> Path:
    """Write an OCI image layout tar holding one image named ``reference``.

    Args:
        dest: Archive file to write (replaced atomically when complete).
        reference: Full image reference, e.g. ``localhost/agent-sandbox/python:3.11-abc``.
        layers: Layers, bottom first.
        config: Runtime defaults of the image.

    Returns:
        ``dest``.

    Raises:
        ImageBuildError: If there is no layer or the reference has no tag.
    """
    if not layers:
        raise ImageBuildError("an image needs at least one layer")
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag or not tag:
        raise ImageBuildError(f"image reference {reference!r} needs an explicit tag")
    architecture = host_architecture()
    config_digest, config_bytes = _blob(
        json.dumps(config.to_oci(layers, architecture=architecture), sort_keys=True).encode()
    )
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": CONFIG_MEDIA_TYPE,
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {"mediaType": LAYER_MEDIA_TYPE, "digest": layer.digest, "size": layer.size}
            for layer in layers
        ],
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [
            {
                "mediaType": MANIFEST_MEDIA_TYPE,
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": architecture, "os": "linux"},
                "annotations": {CONTAINERD_NAME_ANNOTATION: reference, OCI_REF_ANNOTATION: tag},
            }
        ],
    }
    partial = dest.with_name(dest.name + ".partial")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        for digest, data in ((config_digest, config_bytes), (manifest_digest, manifest_bytes)):
            _add_bytes(tar, f"blobs/sha256/{digest.removeprefix('sha256:')}", data)
        seen: set[str] = set()
        for layer in layers:
            if layer.digest in seen:
                continue
            seen.add(layer.digest)
            tar.add(layer.path, arcname=f"blobs/sha256/{layer.digest.removeprefix('sha256:')}")
    partial.replace(dest)
    return dest
