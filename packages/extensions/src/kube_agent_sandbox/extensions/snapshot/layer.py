"""An overlayfs upper directory as an OCI image layer (a gzip-compressed tar).

A container's writes live in the upper directory of its overlay root. Overlayfs marks deletions
its own way; the OCI image spec (layer.md, "Whiteouts") marks them with names:

- a deleted file or directory is a character device 0/0 in the upper directory; in the layer it
  is an empty file ``.wh.<name>`` beside where it was;
- a directory that replaced a lower one (``rm -r d; mkdir d``) carries the xattr
  ``trusted.overlay.opaque=y`` (``user.overlay.opaque`` with ``userxattr`` mounts); in the layer
  it is followed by an empty ``<dir>/.wh..wh..opq``, before its own entries.

Everything else goes in as it is: numeric owners (the host's user names mean nothing in the
image), modes, mtimes, symlinks, hard links between files of the layer, and xattrs other than
overlayfs' own (``security.capability`` among them) as PAX ``SCHILY.xattr.`` records. The walk is
sorted, so the same tree gives the same bytes, digests included.

The layer can be written in one pass (:func:`write_layer`) or in two (:func:`write_tar`, then
:func:`compress_tar`): the commit reads the upper directory while the container is frozen and
compresses after it thaws, so the freeze lasts as long as a copy, not as long as gzip.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, Protocol

WHITEOUT_PREFIX: Final = ".wh."
OPAQUE_MARKER: Final = ".wh..wh..opq"
_OPAQUE_XATTRS: Final = (b"trusted.overlay.opaque", b"user.overlay.opaque")
_OVERLAY_XATTR_PREFIXES: Final = ("trusted.overlay.", "user.overlay.")
COMPRESS_LEVEL: Final = 6
"""gzip level of layers: Go's default, which containerd and Docker write; 9 (Python's default)
takes about twice as long for a few percent."""
_CHUNK: Final = 1 << 20


class LayerError(RuntimeError):
    """The upper directory cannot be turned into a layer (it names what and where)."""


@dataclass(frozen=True)
class TarInfo:
    """An uncompressed layer tar.

    Attributes:
        diff_id: ``sha256:`` of its bytes.
        size: Its size in bytes.
        entries: Tar entries written.
    """

    diff_id: str
    size: int
    entries: int


@dataclass(frozen=True)
class LayerInfo:
    """What a manifest and an image config need to know about a layer.

    Attributes:
        digest: ``sha256:`` of the compressed bytes (the blob's name in a registry).
        diff_id: ``sha256:`` of the uncompressed tar (the image config's ``rootfs.diff_ids``).
        size: Compressed size in bytes.
        entries: Tar entries written (whiteouts and opaque markers included).
    """

    digest: str
    diff_id: str
    size: int
    entries: int


class _Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...


class _HashingWriter:
    """A write-only file object that hashes and counts what passes through to ``target``."""

    def __init__(self, target: _Sink) -> None:
        self._target = target
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        self._target.write(data)
        return len(data)

    def flush(self) -> None:
        self._target.flush()


def is_whiteout(st: os.stat_result) -> bool:
    """Whether a stat result is overlayfs' whiteout: a character device numbered 0/0."""
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_opaque(path: Path) -> bool:
    """Whether a directory of the upper layer hides everything below it."""
    for name in _OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _kept_xattrs(path: Path) -> dict[str, str]:
    """PAX records of the xattrs an image keeps (overlayfs' own bookkeeping left out)."""
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    records: dict[str, str] = {}
    for name in sorted(names):
        if name.startswith(_OVERLAY_XATTR_PREFIXES):
            continue
        value = os.getxattr(path, name, follow_symlinks=False)
        # PAX values are UTF-8 strings; tarfile writes surrogate escapes back as the raw bytes.
        records[f"SCHILY.xattr.{name}"] = value.decode("utf-8", "surrogateescape")
    return records


def _walk(root: Path) -> Iterator[Path]:
    """Every path below ``root``, parents first, names sorted."""
    with os.scandir(root) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        path = Path(entry.path)
        yield path
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(path)


def _marker(arcname: str, *, like: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.type = tarfile.REGTYPE
    info.mode = 0o644
    info.mtime = int(like.st_mtime)
    return info


def write_layer(upper: Path, target: BinaryIO) -> LayerInfo:
    """Write ``upper`` as a gzip-compressed OCI layer into ``target``.

    Args:
        upper: The overlay upper directory (the container's writable layer).
        target: Where the compressed bytes go (a file opened for binary writing).

    Returns:
        The layer's digests, size and entry count.

    Raises:
        LayerError: ``upper`` is not a directory, or a file in it cannot be read.
    """
    if not upper.is_dir():
        raise LayerError(f"upper directory {upper} does not exist or is not a directory")
    compressed = _HashingWriter(target)
    with _gzip(compressed) as gz:
        raw = _HashingWriter(gz)
        entries = _write_tar(upper, raw)
    return LayerInfo(
        digest=f"sha256:{compressed.sha256.hexdigest()}",
        diff_id=f"sha256:{raw.sha256.hexdigest()}",
        size=compressed.size,
        entries=entries,
    )


def write_tar(upper: Path, target: BinaryIO) -> TarInfo:
    """Write ``upper`` as the layer's uncompressed tar (the first of two passes).

    Raises:
        LayerError: As :func:`write_layer`.
    """
    if not upper.is_dir():
        raise LayerError(f"upper directory {upper} does not exist or is not a directory")
    raw = _HashingWriter(target)
    entries = _write_tar(upper, raw)
    raw.flush()
    return TarInfo(diff_id=f"sha256:{raw.sha256.hexdigest()}", size=raw.size, entries=entries)


def compress_tar(source: BinaryIO, target: BinaryIO, tar: TarInfo) -> LayerInfo:
    """Compress a tar :func:`write_tar` wrote into the layer blob (the second pass); the same
    bytes as :func:`write_layer` gives for the same tree."""
    compressed = _HashingWriter(target)
    with _gzip(compressed) as gz:
        while chunk := source.read(_CHUNK):
            gz.write(chunk)
    return LayerInfo(
        digest=f"sha256:{compressed.sha256.hexdigest()}",
        diff_id=tar.diff_id,
        size=compressed.size,
        entries=tar.entries,
    )


def _gzip(target: _HashingWriter) -> gzip.GzipFile:
    # mtime=0 and no file name in the gzip header: the same tar gives the same blob digest.
    return gzip.GzipFile(
        filename="", mode="wb", fileobj=target, mtime=0, compresslevel=COMPRESS_LEVEL
    )


def _write_tar(upper: Path, raw: _HashingWriter) -> int:
    entries = 0
    with tarfile.open(fileobj=raw, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for path in _walk(upper):
            arcname = path.relative_to(upper).as_posix()
            try:
                st = path.lstat()
                if is_whiteout(st):
                    parent, _, name = arcname.rpartition("/")
                    whiteout = (
                        f"{parent}/{WHITEOUT_PREFIX}{name}" if parent else WHITEOUT_PREFIX + name
                    )
                    tar.addfile(_marker(whiteout, like=st))
                    entries += 1
                    continue
                info = tar.gettarinfo(str(path), arcname)
                if info is None:  # a socket: tar cannot hold one, and it is dead in an image
                    continue
                # The host's user and group names mean nothing inside the image.
                info.uname = info.gname = ""
                info.pax_headers = _kept_xattrs(path)
                if info.isreg():
                    with path.open("rb") as data:
                        tar.addfile(info, data)
                else:
                    tar.addfile(info)
                entries += 1
                if info.isdir() and is_opaque(path):
                    tar.addfile(_marker(f"{arcname}/{OPAQUE_MARKER}", like=st))
                    entries += 1
            except OSError as err:
                raise LayerError(f"cannot add {arcname!r} of {upper} to the layer: {err}") from err
    return entries
