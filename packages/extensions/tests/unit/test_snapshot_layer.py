"""The writable layer as an OCI layer, on real files: a kernel-made overlay upper directory
(whiteouts and opaque directories as overlayfs writes them) applied back onto its lower layer
must give the merged view, and hand-made trees pin the exact tar entries."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_agent_sandbox.extensions.snapshot.layer import (
    OPAQUE_MARKER,
    LayerError,
    LayerInfo,
    compress_tar,
    write_layer,
    write_tar,
)
from kube_agent_sandbox.testing.plugin import unavailable


def _needs_root() -> None:
    if os.geteuid() != 0:
        unavailable("overlay mounts and whiteout devices need root")


def _layer(upper: Path) -> tuple[LayerInfo, bytes]:
    out = io.BytesIO()
    info = write_layer(upper, out)
    return info, out.getvalue()


def _members(blob: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)), mode="r:") as tar:
        return tar.getmembers()


def apply_layer(blob: bytes, root: Path) -> None:
    """Apply a layer the way the OCI image spec says a runtime does (whiteouts first)."""
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)), mode="r:") as tar:
        for member in tar.getmembers():
            parent, _, name = member.name.rpartition("/")
            folder = root / parent if parent else root
            if name == OPAQUE_MARKER:
                for child in list(folder.iterdir()):
                    subprocess.run(["rm", "-rf", str(child)], check=True)
                continue
            if name.startswith(".wh."):
                subprocess.run(["rm", "-rf", str(folder / name[4:])], check=True)
                continue
            target = folder / name
            present = target.exists() or target.is_symlink()
            if present and not (member.isdir() and target.is_dir()):
                subprocess.run(["rm", "-rf", str(target)], check=True)
            tar.extract(member, root, numeric_owner=True, filter="fully_trusted")


def _tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Path -> (type, mode, uid, gid, content or link target) of everything below root."""
    found: dict[str, tuple[object, ...]] = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                what: object = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                what = path.read_bytes()
            else:
                what = None
            found[str(path.relative_to(root))] = (
                stat.S_IFMT(st.st_mode),
                stat.S_IMODE(st.st_mode),
                st.st_uid,
                st.st_gid,
                what,
            )
    return found


@pytest.fixture
def overlay(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """(lower, upper, merged) of a fresh overlay mount, unmounted after the test."""
    _needs_root()
    lower, upper, work, merged = (tmp_path / n for n in ("lower", "upper", "work", "merged"))
    for folder in (lower, upper, work, merged):
        folder.mkdir()
    (lower / "etc").mkdir()
    (lower / "etc" / "keep.conf").write_text("unchanged\n")
    (lower / "etc" / "gone.conf").write_text("to be deleted\n")
    (lower / "etc" / "edit.conf").write_text("old\n")
    (lower / "cache" / "deep").mkdir(parents=True)
    (lower / "cache" / "deep" / "old.bin").write_bytes(b"\x00" * 100)
    (lower / "cache" / "top.txt").write_text("hidden by the opaque dir\n")
    (lower / "removed-dir" / "sub").mkdir(parents=True)
    (lower / "removed-dir" / "sub" / "f").write_text("x")
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    mount = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(merged)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mount.returncode != 0:
        unavailable(f"cannot mount overlayfs here: {mount.stderr.strip()}")
    try:
        yield lower, upper, merged
    finally:
        subprocess.run(["umount", str(merged)], check=False)


def test_kernel_made_upper_applied_onto_lower_gives_the_merged_view(
    overlay: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    lower, upper, merged = overlay
    (merged / "etc" / "gone.conf").unlink()
    (merged / "etc" / "edit.conf").write_text("new\n")
    subprocess.run(["rm", "-rf", str(merged / "removed-dir")], check=True)
    subprocess.run(["rm", "-rf", str(merged / "cache")], check=True)
    (merged / "cache").mkdir(mode=0o750)
    (merged / "cache" / "fresh.txt").write_text("only this\n")
    (merged / "home" / "agent").mkdir(parents=True)
    data = merged / "home" / "agent" / "data.txt"
    data.write_text("written by the agent\n")
    os.chown(data, 1234, 5678)
    os.chmod(data, 0o4751)
    os.link(data, merged / "home" / "agent" / "data-link.txt")
    os.symlink("../etc/keep.conf", merged / "home" / "conf")
    (merged / "run.sock").touch()

    info, blob = _layer(upper)
    applied = tmp_path / "applied"
    subprocess.run(["cp", "-a", str(lower), str(applied)], check=True)
    apply_layer(blob, applied)

    assert _tree(applied) == _tree(merged)
    assert info.entries == len(_members(blob))


def test_whiteouts_and_opaque_directories_become_oci_names(
    overlay: tuple[Path, Path, Path],
) -> None:
    _, upper, merged = overlay
    (merged / "etc" / "gone.conf").unlink()
    subprocess.run(["rm", "-rf", str(merged / "cache")], check=True)
    (merged / "cache").mkdir()
    (merged / "cache" / "fresh.txt").write_text("x")

    names = [m.name for m in _members(_layer(upper)[1])]

    assert "etc/.wh.gone.conf" in names
    assert "etc/gone.conf" not in names
    # The opaque marker comes right after its directory, before the directory's own entries.
    assert names.index("cache/.wh..wh..opq") == names.index("cache") + 1
    assert names.index("cache/.wh..wh..opq") < names.index("cache/fresh.txt")


def test_entries_keep_owner_mode_links_and_numeric_ids(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "bin").mkdir(parents=True)
    tool = upper / "bin" / "tool"
    tool.write_bytes(b"#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    os.link(tool, upper / "bin" / "tool-again")
    os.symlink("tool", upper / "bin" / "alias")
    secret = upper / "secret"
    secret.write_text("s")
    secret.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(secret, 4321, 8765)

    members = {m.name: m for m in _members(_layer(upper)[1])}

    assert list(members) == ["bin", "bin/alias", "bin/tool", "bin/tool-again", "secret"]
    assert members["bin/tool"].mode == 0o755
    assert members["bin/tool-again"].islnk()
    assert members["bin/tool-again"].linkname == "bin/tool"
    assert members["bin/alias"].issym()
    assert members["bin/alias"].linkname == "tool"
    assert members["secret"].mode == 0o600
    assert all(m.uname == "" and m.gname == "" for m in members.values())
    if os.geteuid() == 0:
        assert (members["secret"].uid, members["secret"].gid) == (4321, 8765)


def test_xattrs_are_kept_except_overlay_bookkeeping(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "d").mkdir(parents=True)
    os.setxattr(upper / "d", "user.overlay.opaque", b"y")
    os.setxattr(upper / "d", "user.comment", b"kept")

    members = {m.name: m for m in _members(_layer(upper)[1])}

    assert "d/.wh..wh..opq" in members  # user.overlay.opaque (userxattr mounts) counts too
    assert members["d"].pax_headers.get("SCHILY.xattr.user.comment") == "kept"
    assert not any("overlay" in key for key in members["d"].pax_headers)


def test_whiteout_device_at_the_top_becomes_a_top_level_marker(tmp_path: Path) -> None:
    _needs_root()
    upper = tmp_path / "upper"
    upper.mkdir()
    os.mknod(upper / "usr", 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    os.mknod(upper / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))

    members = {m.name: m for m in _members(_layer(upper)[1])}

    assert members[".wh.usr"].isreg()
    assert members[".wh.usr"].size == 0
    # A real device that is not 0/0 stays a device.
    assert members["null"].ischr()
    assert (members["null"].devmajor, members["null"].devminor) == (1, 3)


def test_digests_name_the_bytes_and_repeat_for_the_same_tree(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "a").mkdir(parents=True)
    (upper / "a" / "f").write_bytes(os.urandom(4096))

    first, blob = _layer(upper)
    second, again = _layer(upper)

    assert first == second
    assert blob == again
    assert first.digest == "sha256:" + hashlib.sha256(blob).hexdigest()
    assert first.diff_id == "sha256:" + hashlib.sha256(gzip.decompress(blob)).hexdigest()
    assert first.size == len(blob)


def test_two_passes_give_the_bytes_of_one(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "a" / "b").mkdir(parents=True)
    (upper / "a" / "f").write_bytes(os.urandom(3 << 20))
    (upper / "a" / "b" / "g").write_text("text " * 1000)
    (upper / "link").symlink_to("a/f")

    one, blob = _layer(upper)
    tar_bytes = io.BytesIO()
    tar = write_tar(upper, tar_bytes)
    assert tar.size == len(tar_bytes.getvalue())
    tar_bytes.seek(0)
    out = io.BytesIO()
    two = compress_tar(tar_bytes, out, tar)

    assert two == one
    assert out.getvalue() == blob
    with pytest.raises(LayerError, match="does not exist"):
        write_tar(tmp_path / "nowhere", io.BytesIO())


def test_empty_upper_is_an_empty_valid_layer(tmp_path: Path) -> None:
    (tmp_path / "upper").mkdir()

    info, blob = _layer(tmp_path / "upper")

    assert info.entries == 0
    assert _members(blob) == []


def test_missing_upper_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LayerError, match="does not exist"):
        write_layer(tmp_path / "nowhere", io.BytesIO())
