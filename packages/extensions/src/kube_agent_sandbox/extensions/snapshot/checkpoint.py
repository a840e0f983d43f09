"""Memory snapshots: the kubelet checkpoints a container with CRIU; the archive becomes an image.

The node agent asks its own kubelet (``POST /checkpoint/<ns>/<pod>/<container>``, authorized
as ``nodes/checkpoint``), which has the runtime dump the process tree with CRIU into
``<kubelet root>/checkpoints/*.tar`` and leaves the container running. That archive, unchanged,
is the one layer of an OCI image annotated ``org.criu.checkpoint.container.name``: a Pod whose
container's ``image`` names it is restored by a containerd that restores checkpoint images
(2.0 to 2.3 with ``enable_experimental_restore_via_create``), process memory included.

A node that cannot is named precisely: no checkpoint API on the kubelet (404), a runtime
without checkpoint support, CRIU missing or failing (500 with the runtime's words).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp

from kube_agent_sandbox.extensions.snapshot.commit import CommitResult, CommitTarget
from kube_agent_sandbox.extensions.snapshot.image import node_platform
from kube_agent_sandbox.extensions.snapshot.layer import LayerInfo
from kube_agent_sandbox.extensions.snapshot.registry import RegistryClient, sha256_digest

CHECKPOINT_ANNOTATION: Final = "org.criu.checkpoint.container.name"
"""The manifest annotation containerd looks for to restore instead of create."""
OCI_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG: Final = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR: Final = "application/vnd.oci.image.layer.v1.tar"
SERVICE_ACCOUNT_TOKEN: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")

# What a runtime without checkpoint support answers through the kubelet (containerd 1.x:
# "unimplemented"; CRI-O without CRIU: "not supported").
_NOT_IMPLEMENTED: Final = ("unimplemented", "not implemented", "not supported")


class CheckpointError(RuntimeError):
    """The checkpoint failed. ``unsupported``: the node cannot do it at all (not a retry)."""

    def __init__(self, message: str, *, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def explain_failure(node: str, status: int, body: str) -> CheckpointError:
    """What a kubelet's non-200 answer to a checkpoint means, naming what the node lacks."""
    detail = body.strip()[:400]
    lowered = detail.lower()
    if status == 404:
        return CheckpointError(
            f"the kubelet on node {node} has no checkpoint API (404): it needs Kubernetes "
            "1.25 or newer with the ContainerCheckpoint feature gate on",
            unsupported=True,
        )
    if status in (401, 403):
        return CheckpointError(
            f"the kubelet on node {node} refused the checkpoint ({status}): the node agent "
            f"needs create on nodes/checkpoint: {detail}"
        )
    if any(word in lowered for word in _NOT_IMPLEMENTED):
        return CheckpointError(
            f"the container runtime on node {node} cannot checkpoint: containerd 2.0 to 2.3 "
            f"(restore through CRI) with CRIU is needed: {detail}",
            unsupported=True,
        )
    if "criu" in lowered:
        return CheckpointError(
            f"CRIU failed or is missing on node {node} (CRIU 4.2 or newer is needed on current "
            f"kernels; a process with a TCP connection needs tcp-close in "
            f"/etc/criu/runc.conf): {detail}",
            unsupported=True,
        )
    return CheckpointError(f"the kubelet on node {node} answered {status}: {detail}")


def ssl_context(ca_file: str, *, insecure: bool) -> ssl.SSLContext:
    """Trust for the kubelet's serving certificate: a CA file, the system's, or none."""
    context = ssl.create_default_context(cafile=ca_file or None)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class KubeletCheckpointer:
    """Asks one kubelet to checkpoint containers.

    Args:
        url: The kubelet's base URL, ``https://<node IP>:10250``.
        node: The node's name (for messages).
        token_file: The bearer token sent (the agent's ServiceAccount token, read per call
            because it rotates).
        context: Trust for the kubelet's certificate.
        timeout: Seconds a checkpoint may take (the dump of a large process).
    """

    def __init__(
        self,
        url: str,
        *,
        node: str,
        token_file: Path = SERVICE_ACCOUNT_TOKEN,
        context: ssl.SSLContext | None = None,
        timeout: float = 600.0,
    ) -> None:
        self.url = url.rstrip("/")
        self._node = node
        self._token_file = token_file
        self._ssl: ssl.SSLContext | bool = context if context is not None else True
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def checkpoint(self, namespace: str, pod: str, container: str) -> str:
        """Checkpoint ``container`` of ``pod``; return the archive's path on the node.

        Raises:
            CheckpointError: The kubelet cannot be reached or refused; the message says why.
        """
        token = (await asyncio.to_thread(self._token_file.read_text)).strip()
        url = f"{self.url}/checkpoint/{namespace}/{pod}/{container}"
        try:
            async with (
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=self._ssl), timeout=self._timeout
                ) as session,
                session.post(url, headers={"Authorization": f"Bearer {token}"}) as response,
            ):
                body = await response.text(errors="replace")
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as err:
            raise CheckpointError(
                f"cannot reach the kubelet on node {self._node} at {self.url}: {err}"
            ) from err
        if status != 200:
            raise explain_failure(self._node, status, body)
        try:
            items = json.loads(body)["items"]
            return str(items[0])
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise CheckpointError(
                f"the kubelet on node {self._node} answered no archive path: {body[:200]!r}"
            ) from err


def local_archive(reported: str, checkpoints_dir: Path) -> Path:
    """Where the agent sees the archive the kubelet reported (its checkpoints dir is mounted).

    Raises:
        CheckpointError: The reported name is not a plain archive name, or it is not there.
    """
    name = Path(reported).name
    if not name.endswith(".tar") or name in (".", ".."):
        raise CheckpointError(f"the kubelet reported an unexpected archive {reported!r}")
    path = checkpoints_dir / name
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint archive {name} is not in {checkpoints_dir}: mount the kubelet's "
            "checkpoints folder into the node agent (--kubelet-checkpoints-dir)"
        )
    return path


@dataclass(frozen=True)
class CheckpointImage:
    """A checkpoint archive as an OCI image: the archive is its one, uncompressed layer."""

    config: bytes
    config_digest: str
    manifest: bytes
    layer_digest: str
    layer_size: int


def file_digest(path: Path) -> tuple[str, int]:
    """``sha256:`` digest and size of a file, read in chunks (archives can be GiBs)."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return f"sha256:{digest.hexdigest()}", size


def build_checkpoint_image(
    archive: Path, container: str, *, source_image: str, created: dt.datetime | None = None
) -> CheckpointImage:
    """The config and manifest of the image whose one layer is ``archive``.

    Args:
        archive: The kubelet's checkpoint archive.
        container: The checkpointed container's name (the annotation containerd needs).
        source_image: The image the container ran (recorded as the base name).
        created: The image's creation time (now when None).
    """
    layer_digest, layer_size = file_digest(archive)
    when = (created or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    config: dict[str, Any] = {
        "created": when,
        "architecture": node_platform()[1],
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": when, "created_by": "agent-sandbox memory snapshot"}],
    }
    config_bytes = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": OCI_CONFIG,
            "digest": sha256_digest(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [{"mediaType": OCI_LAYER_TAR, "digest": layer_digest, "size": layer_size}],
        "annotations": {
            CHECKPOINT_ANNOTATION: container,
            "org.opencontainers.image.base.name": source_image,
        },
    }
    return CheckpointImage(
        config=config_bytes,
        config_digest=sha256_digest(config_bytes),
        manifest=json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode(),
        layer_digest=layer_digest,
        layer_size=layer_size,
    )


async def checkpoint_container(
    checkpointer: KubeletCheckpointer,
    checkpoints_dir: Path,
    *,
    namespace: str,
    pod: str,
    container: str,
    source_image: str,
    target: CommitTarget,
    registry: RegistryClient,
) -> CommitResult:
    """Checkpoint the container, push the archive as an image, and delete the archive.

    Raises:
        CheckpointError: The kubelet, the runtime or CRIU could not checkpoint it.
        RegistryError: A push failed.
    """
    started = time.monotonic()
    reported = await checkpointer.checkpoint(namespace, pod, container)
    dumped = time.monotonic() - started
    archive = local_archive(reported, checkpoints_dir)
    try:
        image = await asyncio.to_thread(
            build_checkpoint_image, archive, container, source_image=source_image
        )
        await registry.push_blob(target.repository, image.layer_digest, archive)
        await registry.push_blob(target.repository, image.config_digest, image.config)
        digest = await registry.put_manifest(
            target.repository, target.tag, image.manifest, OCI_MANIFEST
        )
    finally:
        # The node's disk keeps no copy: the registry holds it now (or the snapshot failed).
        archive.unlink(missing_ok=True)
    layer = LayerInfo(image.layer_digest, image.layer_digest, image.layer_size, entries=0)
    return CommitResult(
        image=target.reference(digest),
        digest=digest,
        layer=layer,
        base_image=source_image,
        frozen_seconds=dumped,
    )
