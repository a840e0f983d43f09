"""The snapshots scenario's inputs: sizes, and the programs its Pods run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from benchlib import snapshots


def test_sizes_parse() -> None:
    assert snapshots.parse_sizes("10,500") == (10, 500)
    assert snapshots.parse_sizes(" 1 ") == (1,)


@pytest.mark.parametrize("bad", ["", "0", "10,-1", "a"])
def test_bad_sizes_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="--snapshot-sizes"):
        snapshots.parse_sizes(bad)


def test_the_writer_writes_the_size_the_reader_reports(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    writer = snapshots.WRITER.replace(snapshots.BLOB, str(blob)).replace("86400", "0")
    reader = snapshots.READER.replace(snapshots.BLOB, str(blob)).replace("86400", "0")
    wrote = subprocess.run(
        [sys.executable, "-c", writer, "2"], capture_output=True, text=True, check=True
    )
    assert wrote.stdout.strip() == "written"
    read = subprocess.run(
        [sys.executable, "-c", reader], capture_output=True, text=True, check=True
    )
    assert read.stdout.strip() == f"size {2 << 20}"


def test_pods_pull_with_the_registry_secret() -> None:
    pod = snapshots._pod("p", "registry.example/x@sha256:" + "0" * 64, snapshots.READER)
    assert pod["spec"]["imagePullSecrets"] == [{"name": snapshots.PULL_SECRET}]
    assert pod["metadata"]["namespace"] == snapshots.NAMESPACE
