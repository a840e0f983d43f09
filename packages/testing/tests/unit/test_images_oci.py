"""Unit tests of the OCI layer and archive writer (plain files, no container runtime)."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

import pytest

from kube_agent_sandbox.testing.images.common import ImageBuildError, cache_key
from kube_agent_sandbox.testing.images.oci import (
    CONTAINERD_NAME_ANNOTATION,
    ImageConfig,
    Layer,
    pack_layer,
    write_oci_archive,
)


def _tree(root: Path) -> Path:
    (root / "usr/bin").mkdir(parents=True)
    (root / "dev").mkdir()
    (root / "dev/null-ish").write_text("device placeholder")
    tool = root / "usr/bin/tool"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    os.link(tool, root / "usr/bin/tool-hardlink")
    (root / "usr/bin/tool-link").symlink_to("tool")
    return root


def test_a_layer_keeps_files_modes_links_and_empties_runtime_folders(tmp_path: Path) -> None:
    source = _tree(tmp_path / "rootfs")
    layer = pack_layer(source, tmp_path / "layer.tar")

    data = layer.path.read_bytes()
    assert layer.digest == f"sha256:{hashlib.sha256(data).hexdigest()}"
    assert layer.size == len(data)
    with tarfile.open(layer.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["usr/bin/tool"].mode & 0o777 == 0o755
    assert members["usr/bin/tool-link"].issym()
    assert members["usr/bin/tool-link"].linkname == "tool"
    assert members["usr/bin/tool-hardlink"].islnk() or members["usr/bin/tool"].islnk()
    assert "dev" in members
    assert "dev/null-ish" not in members


def test_a_cached_layer_is_found_again_and_a_truncated_one_is_not(tmp_path: Path) -> None:
    layer = pack_layer(_tree(tmp_path / "rootfs"), tmp_path / "layer.tar")
    assert Layer.from_cache(layer.path) == layer
    with layer.path.open("ab") as handle:
        handle.write(b"x")
    assert Layer.from_cache(layer.path) is None
    assert Layer.from_cache(tmp_path / "missing.tar") is None


def test_packing_a_missing_folder_fails(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match="not a folder"):
        pack_layer(tmp_path / "nope", tmp_path / "layer.tar")


def test_the_archive_is_an_oci_layout_naming_the_image(tmp_path: Path) -> None:
    layer = pack_layer(_tree(tmp_path / "rootfs"), tmp_path / "layer.tar")
    config = ImageConfig(entrypoint=["/usr/bin/tool"], env={"A": "1"}, user="65532:65532")
    archive = write_oci_archive(
        tmp_path / "image.tar", reference="localhost/x/tool:v1", layers=[layer], config=config
    )

    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        layout = json.load(tar.extractfile("oci-layout"))  # type: ignore[arg-type]
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        [descriptor] = index["manifests"]
        manifest_blob = tar.extractfile(f"blobs/sha256/{descriptor['digest'][7:]}").read()  # type: ignore[union-attr]
        manifest = json.loads(manifest_blob)
        config_blob = tar.extractfile(f"blobs/sha256/{manifest['config']['digest'][7:]}").read()  # type: ignore[union-attr]
    assert layout == {"imageLayoutVersion": "1.0.0"}
    assert descriptor["annotations"][CONTAINERD_NAME_ANNOTATION] == "localhost/x/tool:v1"
    assert descriptor["digest"] == f"sha256:{hashlib.sha256(manifest_blob).hexdigest()}"
    assert manifest["layers"][0]["digest"] == layer.digest
    assert f"blobs/sha256/{layer.digest[7:]}" in names
    image_config = json.loads(config_blob)
    assert image_config["rootfs"]["diff_ids"] == [layer.digest]
    assert image_config["config"]["Entrypoint"] == ["/usr/bin/tool"]
    assert image_config["config"]["Env"] == ["A=1"]
    assert image_config["config"]["User"] == "65532:65532"


@pytest.mark.parametrize("reference", ["localhost/x/tool", "tool", "localhost:5000/x"])
def test_an_image_reference_needs_a_tag(tmp_path: Path, reference: str) -> None:
    layer = pack_layer(_tree(tmp_path / "rootfs"), tmp_path / "layer.tar")
    with pytest.raises(ImageBuildError, match="explicit tag"):
        write_oci_archive(
            tmp_path / "i.tar", reference=reference, layers=[layer], config=ImageConfig()
        )


def test_an_image_needs_a_layer(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match="at least one layer"):
        write_oci_archive(tmp_path / "i.tar", reference="a/b:c", layers=[], config=ImageConfig())


def test_cache_keys_change_with_any_input() -> None:
    base = cache_key({"a": 1, "b": [1, 2]})
    assert base == cache_key({"b": [1, 2], "a": 1})
    assert base != cache_key({"a": 2, "b": [1, 2]})
    assert len(base) == 16
