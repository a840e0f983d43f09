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


def test_the_holder_prints_one_token_and_a_rising_counter(tmp_path: Path) -> None:
    from benchlib import memory_snapshots

    holder = subprocess.Popen(
        [sys.executable, "-c", memory_snapshots.HOLDER, "1"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        lines = [holder.stdout.readline().split() for _ in range(3)]
    finally:
        holder.kill()
        holder.wait()
    assert [line[0] for line in lines] == ["tick"] * 3
    assert len({line[1] for line in lines}) == 1
    assert [int(line[2]) for line in lines] == [0, 1, 2]


def test_memory_rows_name_what_the_node_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchlib import memory_snapshots

    from kube_agent_sandbox.testing import versions

    monkeypatch.setenv("AGENT_SANDBOX_TESTENV_CACHE", str(tmp_path))
    options, reason = memory_snapshots.checkpoint_node_options()
    assert options.criu_bin_dir is None
    assert reason is not None
    assert str(versions.criu_bin_dir() / "criu") in reason
    for folder, name in (
        (versions.containerd2_bin_dir(), "containerd"),
        (versions.criu_bin_dir(), "criu"),
    ):
        folder.mkdir(parents=True)
        (folder / name).write_text("")
    options, reason = memory_snapshots.checkpoint_node_options()
    assert reason is None
    assert options.criu_bin_dir == versions.criu_bin_dir()
    assert options.containerd_bin_dir == versions.containerd2_bin_dir()
