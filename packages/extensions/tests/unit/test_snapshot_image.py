"""The snapshot image's config and manifest, the registry names, and credentials from a Secret."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import pytest

from kube_agent_sandbox.extensions.snapshot.containerd import (
    ContainerdError,
    container_id_from_status,
)
from kube_agent_sandbox.extensions.snapshot.image import (
    DOCKER_CONFIG,
    DOCKER_LAYER_GZIP,
    DOCKER_MANIFEST,
    OCI_CONFIG,
    OCI_LAYER_GZIP,
    OCI_MANIFEST,
    ImageError,
    build_snapshot_image,
    parse_manifest,
    pick_platform,
)
from kube_agent_sandbox.extensions.snapshot.layer import LayerInfo
from kube_agent_sandbox.extensions.snapshot.registry import (
    Credentials,
    check_reference,
    check_repository,
    credentials_from_dockerconfig,
    sha256_digest,
)

LAYER = LayerInfo(digest="sha256:" + "b" * 64, diff_id="sha256:" + "c" * 64, size=123, entries=4)
WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def _base(
    *, docker: bool = False, diff_ids: int = 1, layers: int = 1
) -> tuple[dict[str, Any], bytes]:
    config = json.dumps(
        {
            "os": "linux",
            "config": {"Entrypoint": ["/init"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "a" * 64] * diff_ids},
            "history": [{"created_by": "base"}],
        }
    ).encode()
    layer_type = DOCKER_LAYER_GZIP if docker else OCI_LAYER_GZIP
    manifest = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST if docker else OCI_MANIFEST,
        "config": {
            "mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
            "digest": sha256_digest(config),
            "size": len(config),
        },
        "layers": [{"mediaType": layer_type, "digest": "sha256:" + "d" * 64, "size": 9}] * layers,
    }
    return manifest, config


def test_snapshot_appends_the_layer_and_keeps_the_base_config() -> None:
    base, config = _base()

    image = build_snapshot_image(base, config, LAYER, comment="sandbox ns/a", created=WHEN)

    new_config = json.loads(image.config)
    manifest = json.loads(image.manifest)
    assert new_config["rootfs"]["diff_ids"] == ["sha256:" + "a" * 64, LAYER.diff_id]
    assert new_config["config"] == {"Entrypoint": ["/init"]}
    assert new_config["history"][-1]["comment"] == "sandbox ns/a"
    assert new_config["created"] == "2026-01-02T03:04:05Z"
    assert manifest["layers"][-1] == {
        "mediaType": OCI_LAYER_GZIP,
        "digest": LAYER.digest,
        "size": 123,
    }
    assert manifest["config"]["digest"] == image.config_digest == sha256_digest(image.config)
    assert image.manifest_digest == sha256_digest(image.manifest)
    assert image.media_type == OCI_MANIFEST


def test_docker_base_gives_a_docker_snapshot() -> None:
    base, config = _base(docker=True)

    image = build_snapshot_image(base, config, LAYER, comment="c", annotations={"a": "b"})

    manifest = json.loads(image.manifest)
    assert image.media_type == DOCKER_MANIFEST
    assert manifest["config"]["mediaType"] == DOCKER_CONFIG
    assert manifest["layers"][-1]["mediaType"] == DOCKER_LAYER_GZIP
    assert "annotations" not in manifest  # Docker schema 2 has none


def test_config_not_matching_its_manifest_is_refused() -> None:
    base, config = _base()

    with pytest.raises(ImageError, match="does not match"):
        build_snapshot_image(base, config + b" ", LAYER, comment="c")


def test_layer_count_mismatch_is_refused() -> None:
    base, config = _base(diff_ids=2, layers=1)

    with pytest.raises(ImageError, match="different layer counts"):
        build_snapshot_image(base, config, LAYER, comment="c")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json", "not JSON"),
        (b'{"schemaVersion": 1}', "schema version 2"),
        (b'{"schemaVersion": 2, "manifests": []}', "no config"),
    ],
)
def test_unusable_manifests_are_named(content: bytes, message: str) -> None:
    with pytest.raises(ImageError, match=message):
        parse_manifest(content)


def test_platform_is_picked_from_an_index() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
        ]
    }

    assert pick_platform(index, os_name="linux", architecture="amd64") == "sha256:amd"
    with pytest.raises(ImageError, match="no manifest for linux/s390x"):
        pick_platform(index, os_name="linux", architecture="s390x")


def _dockerconfig(auths: object) -> dict[str, str]:
    raw = json.dumps({"auths": auths}).encode()
    return {".dockerconfigjson": base64.b64encode(raw).decode()}


def test_credentials_from_a_dockerconfigjson_secret() -> None:
    auth = base64.b64encode(b"robot:s3:cret").decode()
    data = _dockerconfig(
        {
            "https://registry.example:5000/v1/": {"auth": auth},
            "other.example": {"username": "u", "password": "p"},
        }
    )

    assert credentials_from_dockerconfig(data, "registry.example:5000") == Credentials(
        "robot", "s3:cret"
    )
    assert credentials_from_dockerconfig(data, "other.example") == Credentials("u", "p")
    assert credentials_from_dockerconfig(data, "unknown.example") is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"token": "x"}, "no .dockerconfigjson"),
        ({".dockerconfigjson": "%%%"}, "not valid"),
        (_dockerconfig(["not", "an", "object"]), "not valid"),
    ],
)
def test_unreadable_pull_secrets_are_named(data: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        credentials_from_dockerconfig(data, "registry.example")


@pytest.mark.parametrize("name", ["UPPER/case", "a//b", "-lead", "a/", ""])
def test_bad_repository_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid repository"):
        check_repository(name)


@pytest.mark.parametrize("reference", ["snap:1", "sha256:short", "", "." + "x" * 10])
def test_bad_tags_are_refused(reference: str) -> None:
    with pytest.raises(ValueError, match="invalid tag or digest"):
        check_reference(reference)


def test_container_ids_from_pod_status() -> None:
    bare = "f" * 64

    assert container_id_from_status(f"containerd://{bare}") == bare
    assert container_id_from_status(bare) == bare
    with pytest.raises(ContainerdError, match="runs on cri-o"):
        container_id_from_status(f"cri-o://{bare}")
    with pytest.raises(ContainerdError, match="not a containerd container ID"):
        container_id_from_status("containerd://../../etc")
