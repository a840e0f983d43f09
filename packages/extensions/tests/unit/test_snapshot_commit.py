"""The freeze of a commit: the container is frozen only while its writes are copied into a
tar, thawed before the compression and also when the copy fails; no tar is left behind."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from kube_agent_sandbox.extensions.snapshot.commit import _freeze_and_diff
from kube_agent_sandbox.extensions.snapshot.containerd import ContainerdNode, ContainerInfo
from kube_agent_sandbox.extensions.snapshot.layer import LayerError
from kube_agent_sandbox.extensions.snapshot.nospace import disk_full_message, node_disk_full
from kube_agent_sandbox.testing.tmpfs import tmpfs_or_skip

CONTAINER = ContainerInfo("c1", "docker.io/library/python:3", "overlayfs", "k1")


class _Node:
    """Records the freeze calls (the real ``ctr tasks pause``/``resume`` run in e2e)."""

    def __init__(self, workdir: Path) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.workdir = workdir

    def _files(self) -> list[str]:
        return sorted(p.name for p in self.workdir.iterdir())

    def pause(self, container_id: str) -> None:
        self.calls.append((f"pause {container_id}", self._files()))

    def resume(self, container_id: str) -> None:
        self.calls.append((f"resume {container_id}", self._files()))


def _diff(node: _Node, upper: Path, layer: Path) -> Any:
    return _freeze_and_diff(cast(ContainerdNode, node), CONTAINER, upper, layer)


def test_compression_runs_after_the_thaw(tmp_path: Path) -> None:
    upper, work = tmp_path / "upper", tmp_path / "work"
    upper.mkdir()
    work.mkdir()
    (upper / "notes.txt").write_text("kept\n")
    node = _Node(work)

    layer, frozen = _diff(node, upper, work / "layer.tar.gz")

    # frozen with nothing written yet; thawed with only the tar there (no gzip yet)
    assert node.calls == [("pause c1", []), ("resume c1", ["layer.tar.gz.tar"])]
    assert sorted(p.name for p in work.iterdir()) == ["layer.tar.gz"]
    assert frozen >= 0
    blob = (work / "layer.tar.gz").read_bytes()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        assert tar.getnames() == ["notes.txt"]
    assert layer.entries == 1


def test_a_failed_copy_still_thaws_and_leaves_nothing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    node = _Node(work)

    with pytest.raises(LayerError):
        _diff(node, tmp_path / "gone", work / "layer.tar.gz")

    assert [call for call, _ in node.calls] == ["pause c1", "resume c1"]
    assert list(work.iterdir()) == []


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB filesystem (tmpfs; mounting needs root, as CI runs)."""
    with tmpfs_or_skip(tmp_path / "small") as folder:
        yield folder


def test_a_full_work_folder_thaws_leaves_nothing_and_is_told_as_disk_full(
    tmp_path: Path, small_disk: Path
) -> None:
    upper = tmp_path / "upper"
    upper.mkdir()
    # 3 MiB that gzip cannot shrink: the tar alone overflows the 1 MiB folder.
    (upper / "data.bin").write_bytes(os.urandom(3 << 20))
    node = _Node(small_disk)

    # The write fails bare or inside a LayerError, as the tar module meets it.
    with pytest.raises((LayerError, OSError)) as caught:
        _diff(node, upper, small_disk / "layer.tar.gz")

    assert [call for call, _ in node.calls] == ["pause c1", "resume c1"]
    assert list(small_disk.iterdir()) == []
    assert node_disk_full(caught.value)
    message = disk_full_message("node-a", caught.value, small_disk)
    assert f"ran out of space in {small_disk} (1.0 MiB free of 1.0 MiB" in message
    assert "node node-a" in message
    assert "--workdir" in message
