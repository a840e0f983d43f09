"""The sandbox image's user layer: E2B's ``user`` is added to the base's passwd/group files."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from kube_agent_sandbox.testing.images import sandbox
from kube_agent_sandbox.testing.images.common import ImageBuildError
from kube_agent_sandbox.testing.images.oci import Layer


def _layer(tmp_path: Path, files: dict[str, str]) -> Layer:
    path = tmp_path / "base.layer.tar"
    with tarfile.open(path, "w") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return Layer(path=path, digest="sha256:" + "0" * 64, size=path.stat().st_size)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown of the home folder needs root")
def test_user_is_appended_to_the_base_files(tmp_path: Path) -> None:
    base = _layer(
        tmp_path,
        {"./etc/passwd": "root:x:0:0:root:/root:/bin/bash\n", "./etc/group": "root:x:0:\n"},
    )
    root = tmp_path / "root"
    sandbox._add_user(root, base)
    passwd = (root / "etc/passwd").read_text().splitlines()
    assert passwd == ["root:x:0:0:root:/root:/bin/bash", "user:x:1000:1000::/home/user:/bin/bash"]
    assert (root / "etc/group").read_text().splitlines() == ["root:x:0:", "user:x:1000:"]
    home = root / "home/user"
    assert (home.stat().st_uid, home.stat().st_gid) == (1000, 1000)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown of the home folder needs root")
def test_existing_user_is_kept_once(tmp_path: Path) -> None:
    line = "user:x:1000:1000::/home/user:/bin/bash\n"
    base = _layer(tmp_path, {"etc/passwd": line, "etc/group": "user:x:1000:\n"})
    root = tmp_path / "root"
    sandbox._add_user(root, base)
    assert (root / "etc/passwd").read_text() == line
    assert (root / "etc/group").read_text() == "user:x:1000:\n"


def test_missing_base_file_is_an_error(tmp_path: Path) -> None:
    base = _layer(tmp_path, {"etc/hostname": "x\n"})
    with pytest.raises(ImageBuildError, match="etc/passwd"):
        sandbox._base_file(base, "etc/passwd")
