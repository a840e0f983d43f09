"""Snapshot images pushed to and pulled from the real CNCF distribution registry.

The session's local cluster runs the registry over TLS with htpasswd credentials
(``--cluster-registry=tls``, as ``nox -s integration`` passes); one test starts a plain-HTTP
registry of its own. A base image is pushed first, then a snapshot on top of it, then read back
blob by blob and manifest by manifest, as a runtime pulling it would.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import secrets
import ssl
import tarfile
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.extensions.snapshot.image import (
    OCI_CONFIG,
    OCI_LAYER_GZIP,
    OCI_MANIFEST,
    build_snapshot_image,
)
from kube_agent_sandbox.extensions.snapshot.layer import LayerInfo, write_layer
from kube_agent_sandbox.extensions.snapshot.registry import (
    Credentials,
    RegistryClient,
    RegistryError,
    sha256_digest,
)
from kube_agent_sandbox.testing.processes import ProcessSupervisor
from kube_agent_sandbox.testing.registry import RegistryOptions, RunningRegistry, start_registry


def _client(registry: RunningRegistry, **overrides: object) -> RegistryClient:
    credentials = (
        Credentials(registry.username, registry.password)
        if registry.username is not None and registry.password is not None
        else None
    )
    settings: dict[str, object] = {
        "credentials": credentials,
        "ssl_context": registry.ssl_context(),
        "timeout": 60.0,
    }
    settings.update(overrides)
    return RegistryClient(registry.url, **settings)  # type: ignore[arg-type]


def _layer_of(tmp_path: Path, name: str, files: dict[str, bytes]) -> tuple[LayerInfo, Path]:
    tree = tmp_path / f"{name}-tree"
    for relative, content in files.items():
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        (tree / relative).write_bytes(content)
    blob = tmp_path / f"{name}.tar.gz"
    with blob.open("wb") as out:
        return write_layer(tree, out), blob


async def _push_base(
    client: RegistryClient, repository: str, tmp_path: Path
) -> tuple[dict[str, Any], bytes]:
    layer, blob = _layer_of(tmp_path, "base", {"etc/os-release": b"ID=test\n"})
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        }
    ).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": sha256_digest(config), "size": len(config)},
        "layers": [{"mediaType": OCI_LAYER_GZIP, "digest": layer.digest, "size": layer.size}],
    }
    await client.push_blob(repository, layer.digest, blob)
    await client.push_blob(repository, sha256_digest(config), config)
    await client.put_manifest(repository, "base", json.dumps(manifest).encode(), OCI_MANIFEST)
    return manifest, config


def _files_of(blob: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)), mode="r:") as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isreg()
        }


def _repository() -> str:
    return f"snapshots/t-{secrets.token_hex(4)}"


def test_snapshot_pushed_on_a_base_reads_back_layer_by_layer(
    oci_registry: RunningRegistry, tmp_path: Path
) -> None:
    repository = _repository()

    async def scenario() -> None:
        async with _client(oci_registry) as client:
            base, base_config = await _push_base(client, repository, tmp_path)
            layer, blob = _layer_of(tmp_path, "snap", {"home/agent/notes.txt": b"kept\n"})
            image = build_snapshot_image(base, base_config, layer, comment="test")
            assert await client.push_blob(repository, layer.digest, blob)
            # A second push of the same blob is skipped: the registry has it.
            assert not await client.push_blob(repository, layer.digest, blob)
            await client.push_blob(repository, image.config_digest, image.config)
            digest = await client.put_manifest(repository, "snap-1", image.manifest, OCI_MANIFEST)
            assert digest == image.manifest_digest

            content, media_type, read_digest = await client.get_manifest(repository, "snap-1")
            assert (media_type, read_digest) == (OCI_MANIFEST, digest)
            manifest = json.loads(content)
            assert [entry["digest"] for entry in manifest["layers"]] == [
                base["layers"][0]["digest"],
                layer.digest,
            ]
            config = json.loads(await client.get_blob(repository, manifest["config"]["digest"]))
            assert config["rootfs"]["diff_ids"][-1] == layer.diff_id
            pulled = await client.get_blob(repository, layer.digest)
            assert _files_of(pulled) == {"home/agent/notes.txt": b"kept\n"}

    asyncio.run(scenario())


def test_deleting_the_manifest_removes_the_image(
    oci_registry: RunningRegistry, tmp_path: Path
) -> None:
    repository = _repository()

    async def scenario() -> None:
        async with _client(oci_registry) as client:
            await _push_base(client, repository, tmp_path)
            _, _, digest = await client.get_manifest(repository, "base")
            assert await client.delete_manifest(repository, digest)
            with pytest.raises(RegistryError) as gone:
                await client.get_manifest(repository, digest)
            assert gone.value.status == 404
            assert not await client.delete_manifest(repository, digest)

    asyncio.run(scenario())


def test_wrong_password_is_refused_with_401(oci_registry: RunningRegistry) -> None:
    assert oci_registry.username is not None
    wrong = Credentials(oci_registry.username, "not-the-password")

    async def scenario() -> None:
        async with _client(oci_registry, credentials=wrong) as client:
            with pytest.raises(RegistryError, match="credentials were refused") as refused:
                await client.has_blob(_repository(), "sha256:" + "0" * 64)
            assert refused.value.status == 401

    asyncio.run(scenario())


def test_missing_credentials_are_named(oci_registry: RunningRegistry) -> None:
    async def scenario() -> None:
        async with _client(oci_registry, credentials=None) as client:
            with pytest.raises(RegistryError, match="asks for credentials and none were given"):
                await client.has_blob(_repository(), "sha256:" + "0" * 64)

    asyncio.run(scenario())


def test_untrusted_certificate_fails_the_connection(oci_registry: RunningRegistry) -> None:
    async def scenario() -> None:
        # The system's trust store does not know the cluster's CA.
        async with _client(oci_registry, ssl_context=ssl.create_default_context()) as client:
            with pytest.raises(RegistryError, match="certificate"):
                await client.has_blob(_repository(), "sha256:" + "0" * 64)

    asyncio.run(scenario())


def test_blob_whose_bytes_do_not_match_its_digest_is_rejected(
    oci_registry: RunningRegistry,
) -> None:
    async def scenario() -> None:
        async with _client(oci_registry) as client:
            with pytest.raises(RegistryError) as rejected:
                await client.push_blob(_repository(), sha256_digest(b"claimed"), b"actual")
            assert rejected.value.status == 400

    asyncio.run(scenario())


def test_plain_http_registry_without_credentials(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor(tmp_path / "logs")
    try:
        running, _ = start_registry(
            RegistryOptions(tls=False, auth=False),
            supervisor=supervisor,
            workdir=tmp_path / "registry",
            ca=None,
        )
        assert running.url.startswith("http://")
        repository = _repository()

        async def scenario() -> None:
            async with _client(running) as client:
                await _push_base(client, repository, tmp_path)
                _, media_type, _ = await client.get_manifest(repository, "base")
                assert media_type == OCI_MANIFEST

        asyncio.run(scenario())
    finally:
        supervisor.stop_all()


def test_tls_registry_without_a_ca_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a CA"):
        start_registry(
            RegistryOptions(tls=True),
            supervisor=ProcessSupervisor(tmp_path / "logs"),
            workdir=tmp_path / "registry",
            ca=None,
        )
