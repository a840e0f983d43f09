"""Out of space, told apart: a node's full work folder or a registry's full storage is named as
such (``NodeDiskFull``, ``RegistryStorageFull``), any other failure is not."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from kube_agent_sandbox.extensions.snapshot.checkpoint import CheckpointError
from kube_agent_sandbox.extensions.snapshot.layer import LayerError
from kube_agent_sandbox.extensions.snapshot.nospace import (
    disk_full_message,
    node_disk_full,
    registry_full,
    registry_full_message,
)
from kube_agent_sandbox.extensions.snapshot.registry import RegistryError


def _wrapped(inner: OSError) -> LayerError:
    try:
        try:
            raise inner
        except OSError as err:
            raise LayerError(f"cannot add 'data.bin' of /upper to the layer: {err}") from err
    except LayerError as outer:
        return outer


@pytest.mark.parametrize(
    ("err", "full"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (_wrapped(OSError(errno.ENOSPC, "No space left on device")), True),
        (CheckpointError("kubelet answered 500: write /ckpt.tar: no space left on device"), True),
        (OSError(errno.EACCES, "Permission denied"), False),
        (_wrapped(OSError(errno.EIO, "Input/output error")), False),
        (CheckpointError("kubelet answered 500: criu failed"), False),
        (RegistryError("PUT answered 500: no space left on device", status=500), False),
    ],
)
def test_a_node_disk_full_is_told_from_other_failures(err: BaseException, full: bool) -> None:
    assert node_disk_full(err) is full


@pytest.mark.parametrize(
    ("status", "text", "full"),
    [
        (507, "Insufficient Storage", True),
        (
            500,
            '{"errors":[{"code":"UNKNOWN","detail":"write /r/data: no space left on device"}]}',
            True,
        ),
        (403, "DENIED: storage quota exceeded for project", True),
        (500, '{"errors":[{"code":"UNKNOWN","message":"unknown error"}]}', False),
        (401, "credentials refused", False),
        (0, "cannot connect: no space left on device", False),
    ],
)
def test_a_full_registry_is_told_from_other_failures(status: int, text: str, full: bool) -> None:
    assert (
        registry_full(RegistryError(f"PUT https://r/v2/x answered {status}: {text}", status=status))
        is full
    )


def test_the_messages_name_the_folder_the_room_and_the_registry(tmp_path: Path) -> None:
    err = OSError(errno.ENOSPC, "No space left on device")
    message = disk_full_message("node-a", err, tmp_path / "gone-with-the-partial-files")
    assert f"ran out of space in {tmp_path / 'gone-with-the-partial-files'} (" in message
    assert " free of " in message  # measured on the nearest folder still there
    named = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "w" / "layer.tar"))
    assert f"in {tmp_path / 'w'} (" in disk_full_message("node-a", named, Path("/elsewhere"))
    kubelet = CheckpointError("kubelet answered 500: write /ckpt.tar: no space left on device")
    told = disk_full_message("node-a", kubelet, tmp_path)
    assert "node node-a ran out of space writing the checkpoint" in told
    assert "kubelet's checkpoints folder" in told
    assert str(tmp_path) not in told  # not the agent's folder: the kubelet wrote it

    refused = RegistryError(
        "uploading 3145728 bytes: PUT https://r:5000/v2/x/blobs/uploads/u answered 507: full",
        status=507,
    )
    text = registry_full_message(refused)
    assert "https://r:5000" in text
    assert "3145728 bytes" in text
    assert "garbage collection" in text


def test_distributions_storage_error_is_found_past_the_truncated_message() -> None:
    # CNCF distribution on a full disk: 500 UNKNOWN, the driver's error in the detail, after a
    # path long enough to push it out of the message's first 300 characters.
    path = "/var/lib/registry/docker/registry/v2/repositories/" + "a/" * 150 + "_uploads/u/data"
    body = (
        '{"errors":[{"code":"UNKNOWN","message":"unknown error",'
        f'"detail":"write {path}: no space left on device"}}]}}'
    )
    err = RegistryError(f"PUT https://r/v2/x answered 500: {body[:300]}", status=500, body=body)
    assert "no space" not in str(err)
    assert registry_full(err)
    assert f"(write {path}: no space left on device)" in registry_full_message(err)
    assert not registry_full(RegistryError("PUT answered 500: x", status=500, body="{not json"))
