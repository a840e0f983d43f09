"""A snapshot image: its base image's manifest and config with one more layer on top.

The snapshot keeps the base's media-type family (OCI or Docker schema 2), so every runtime that
ran the base runs the snapshot; the new layer's ``diff_id`` is appended to ``rootfs.diff_ids``
and a ``history`` entry says where it came from. Nothing else of the config changes: the
entrypoint, environment and working directory stay the base's, and the Pod's own ``command``
and ``env`` apply on top as before.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
from dataclasses import dataclass
from typing import Any, Final

from kube_agent_sandbox.extensions.snapshot.layer import LayerInfo
from kube_agent_sandbox.extensions.snapshot.registry import sha256_digest

OCI_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX: Final = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG: Final = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP: Final = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST: Final = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST: Final = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG: Final = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP: Final = "application/vnd.docker.image.rootfs.diff.tar.gzip"
INDEX_TYPES: Final = (OCI_INDEX, DOCKER_LIST)
_GO_ARCH: Final = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}


class ImageError(ValueError):
    """A manifest or config is not one a snapshot can build on (the message says why)."""


@dataclass(frozen=True)
class SnapshotImage:
    """The serialized config and manifest of a snapshot, with their digests."""

    config: bytes
    config_digest: str
    manifest: bytes
    manifest_digest: str
    media_type: str


def node_platform() -> tuple[str, str]:
    """``(os, architecture)`` of this machine in Go's names, as image indexes list them."""
    machine = platform.machine()
    return "linux", _GO_ARCH.get(machine, machine)


def pick_platform(index: dict[str, Any], *, os_name: str, architecture: str) -> str:
    """The digest of the manifest for one platform in an image index.

    Raises:
        ImageError: The index has no manifest for that platform.
    """
    for entry in index.get("manifests") or []:
        wanted = entry.get("platform") or {}
        if wanted.get("os") == os_name and wanted.get("architecture") == architecture:
            return str(entry["digest"])
    raise ImageError(f"the image index has no manifest for {os_name}/{architecture}")


def parse_manifest(content: bytes) -> dict[str, Any]:
    """A single-platform image manifest (OCI or Docker schema 2) as a dict.

    Raises:
        ImageError: It is not JSON or not a single-platform image manifest.
    """
    try:
        manifest = json.loads(content)
    except ValueError as err:
        raise ImageError(f"the image manifest is not JSON: {err}") from err
    if not isinstance(manifest, dict) or manifest.get("schemaVersion") != 2:
        raise ImageError("the image manifest is not schema version 2")
    if not isinstance(manifest.get("config"), dict) or not isinstance(manifest.get("layers"), list):
        raise ImageError("the image manifest has no config or no layers")
    return manifest


def _media_family(manifest: dict[str, Any]) -> tuple[str, str, str]:
    """(manifest, config, gzip layer) media types matching the base manifest's family."""
    if manifest.get("mediaType") == DOCKER_MANIFEST or (
        manifest["config"].get("mediaType") == DOCKER_CONFIG
    ):
        return DOCKER_MANIFEST, DOCKER_CONFIG, DOCKER_LAYER_GZIP
    return OCI_MANIFEST, OCI_CONFIG, OCI_LAYER_GZIP


def _canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def build_snapshot_image(
    base_manifest: dict[str, Any],
    base_config: bytes,
    layer: LayerInfo,
    *,
    comment: str,
    created: dt.datetime | None = None,
    annotations: dict[str, str] | None = None,
) -> SnapshotImage:
    """The snapshot's config and manifest: the base's plus ``layer``.

    Args:
        base_manifest: The base image's manifest (:func:`parse_manifest`).
        base_config: The base image's config blob, as stored.
        layer: The committed layer.
        comment: The new history entry's comment (which sandbox, which container).
        created: The image's creation time (now when None).
        annotations: Manifest annotations (OCI manifests only).

    Returns:
        The serialized config and manifest with their digests.

    Raises:
        ImageError: The base config does not match the manifest or is not an image config.
    """
    if sha256_digest(base_config) != base_manifest["config"].get("digest"):
        raise ImageError("the base image's config does not match its manifest's digest")
    try:
        config = json.loads(base_config)
        diff_ids = config["rootfs"]["diff_ids"]
    except (ValueError, KeyError, TypeError) as err:
        raise ImageError(f"the base image's config has no rootfs.diff_ids: {err}") from err
    if len(diff_ids) != len(base_manifest["layers"]):
        raise ImageError("the base image's config and manifest list different layer counts")
    when = (created or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    config["rootfs"]["diff_ids"] = [*diff_ids, layer.diff_id]
    config["created"] = when
    config["history"] = [
        *(config.get("history") or []),
        {"created": when, "created_by": "agent-sandbox snapshot", "comment": comment},
    ]
    config_bytes = _canonical(config)
    manifest_type, config_type, layer_type = _media_family(base_manifest)
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": manifest_type,
        "config": {
            "mediaType": config_type,
            "digest": sha256_digest(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [
            *base_manifest["layers"],
            {"mediaType": layer_type, "digest": layer.digest, "size": layer.size},
        ],
    }
    if annotations and manifest_type == OCI_MANIFEST:
        manifest["annotations"] = dict(annotations)
    manifest_bytes = _canonical(manifest)
    return SnapshotImage(
        config=config_bytes,
        config_digest=sha256_digest(config_bytes),
        manifest=manifest_bytes,
        manifest_digest=sha256_digest(manifest_bytes),
        media_type=manifest_type,
    )
