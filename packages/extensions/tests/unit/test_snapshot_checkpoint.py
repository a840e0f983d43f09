"""Memory snapshots' node side: the kubelet's checkpoint API and the checkpoint image.

The kubelet is an HTTP server on loopback answering what a kubelet answers (its bodies copied
from a real node: containerd 1.6 with Debian's CRIU, a kubelet with the gate off). The real
checkpoint runs in the real-node e2e suite.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from kube_agent_sandbox.extensions.snapshot.checkpoint import (
    CHECKPOINT_ANNOTATION,
    OCI_LAYER_TAR,
    CheckpointError,
    KubeletCheckpointer,
    build_checkpoint_image,
    explain_failure,
    file_digest,
    local_archive,
)
from kube_agent_sandbox.extensions.snapshot.registry import sha256_digest

CRIU_FAILED = (
    "checkpointing of default/counter/c failed (rpc error: code = Unknown desc = checkpointing "
    'container "eb91" failed: /usr/sbin/runc did not terminate successfully: exit status 1: '
    "criu failed: type DUMP errno 0 path= /run/criu-dump.log)"
)
CONTAINERD_16 = (
    "checkpointing of default/counter/c failed (rpc error: code = Unimplemented desc = "
    "method CheckpointContainer not implemented)"
)


@pytest.fixture
async def kubelet(tmp_path: Path) -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A kubelet stand-in: /checkpoint/<ns>/<pod>/<c> answers by the pod's name."""
    seen: list[dict[str, str]] = []

    async def checkpoint(request: web.Request) -> web.Response:
        seen.append({"path": request.path, "auth": request.headers.get("Authorization", "")})
        pod = request.match_info["pod"]
        if pod == "ok":
            return web.json_response({"items": ["/var/lib/kubelet/checkpoints/c-ok.tar"]})
        if pod == "criu":
            return web.Response(status=500, text=CRIU_FAILED)
        if pod == "old":
            return web.Response(status=500, text=CONTAINERD_16)
        if pod == "denied":
            return web.Response(status=403, text="Forbidden (user=system:serviceaccount:x:y)")
        return web.Response(status=200, text="{}")

    app = web.Application()
    app.router.add_post("/checkpoint/{ns}/{pod}/{container}", checkpoint)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


def _checkpointer(url: str, tmp_path: Path) -> KubeletCheckpointer:
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    return KubeletCheckpointer(url, node="node-a", token_file=token, timeout=10)


async def test_a_checkpoint_returns_the_archive_path_and_sends_the_token(
    kubelet: tuple[str, list[dict[str, str]]], tmp_path: Path
) -> None:
    url, seen = kubelet
    path = await _checkpointer(url, tmp_path).checkpoint("ns1", "ok", "main")
    assert path == "/var/lib/kubelet/checkpoints/c-ok.tar"
    assert seen == [{"path": "/checkpoint/ns1/ok/main", "auth": "Bearer tok-1"}]


@pytest.mark.parametrize(
    ("pod", "unsupported", "words"),
    [
        ("criu", True, "CRIU failed or is missing on node node-a"),
        ("old", True, "container runtime on node node-a cannot checkpoint: containerd 2.0"),
        ("denied", False, "needs create on nodes/checkpoint"),
        ("gone", False, "answered no archive path"),
    ],
)
async def test_a_refused_checkpoint_names_what_the_node_lacks(
    kubelet: tuple[str, list[dict[str, str]]],
    tmp_path: Path,
    pod: str,
    unsupported: bool,
    words: str,
) -> None:
    with pytest.raises(CheckpointError, match=words) as err:
        await _checkpointer(kubelet[0], tmp_path).checkpoint("ns1", pod, "main")
    assert err.value.unsupported is unsupported


async def test_a_kubelet_without_the_api_is_unsupported(
    kubelet: tuple[str, list[dict[str, str]]], tmp_path: Path
) -> None:
    # No route for /checkpoint/<ns>/<pod> (two segments): aiohttp answers 404, as a kubelet
    # with the ContainerCheckpoint gate off does.
    checkpointer = _checkpointer(kubelet[0], tmp_path)
    with pytest.raises(CheckpointError, match="no checkpoint API") as err:
        await checkpointer.checkpoint("ns1", "ok", "")
    assert err.value.unsupported


async def test_an_unreachable_kubelet_is_named(tmp_path: Path) -> None:
    checkpointer = _checkpointer("http://127.0.0.1:9", tmp_path)
    with pytest.raises(CheckpointError, match=r"cannot reach the kubelet on node node-a at") as err:
        await checkpointer.checkpoint("ns1", "ok", "main")
    assert not err.value.unsupported


def test_an_unknown_failure_keeps_the_kubelets_words() -> None:
    err = explain_failure("n", 500, "disk full while writing /var/lib/kubelet/checkpoints")
    assert not err.unsupported
    assert str(err) == (
        "the kubelet on node n answered 500: disk full while writing /var/lib/kubelet/checkpoints"
    )


def test_the_archive_is_found_in_the_mounted_folder_by_name(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-p_ns-c-1.tar").write_bytes(b"x")
    found = local_archive("/var/lib/kubelet/checkpoints/checkpoint-p_ns-c-1.tar", tmp_path)
    assert found == tmp_path / "checkpoint-p_ns-c-1.tar"
    with pytest.raises(CheckpointError, match="--kubelet-checkpoints-dir"):
        local_archive("/var/lib/kubelet/checkpoints/other.tar", tmp_path)
    with pytest.raises(CheckpointError, match="unexpected archive"):
        local_archive("/etc/passwd", tmp_path)


def test_the_image_is_the_archive_as_one_uncompressed_layer(tmp_path: Path) -> None:
    archive = tmp_path / "c.tar"
    archive.write_bytes(b"checkpoint" * 100_000)
    image = build_checkpoint_image(archive, "main", source_image="python:3.12")
    manifest = json.loads(image.manifest)
    digest, size = file_digest(archive)
    assert size == 1_000_000
    assert manifest["layers"] == [{"mediaType": OCI_LAYER_TAR, "digest": digest, "size": size}]
    assert manifest["annotations"][CHECKPOINT_ANNOTATION] == "main"
    assert manifest["config"]["digest"] == sha256_digest(image.config) == image.config_digest
    config = json.loads(image.config)
    assert config["rootfs"] == {"type": "layers", "diff_ids": [digest]}
    assert config["os"] == "linux"
