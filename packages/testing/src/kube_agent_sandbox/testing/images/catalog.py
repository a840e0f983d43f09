"""The images the real node needs, each built once per machine and cached as an OCI archive.

- the pod sandbox image (``pause``), which containerd's CRI plugin starts in every pod;
- a Python image: Debian with ``python3``, what test and demo sandboxes run;
- the controller image: the Python image plus the project's wheels (see ``controller_image``);
- the sandbox image: the Python image plus ``sandboxd`` and the code interpreter, what the
  E2B gateway's real-node tests run (see ``images.sandbox.sandbox_image``).

Each archive's name and tag derive from the hash of everything that went into it, so a changed
input gives a new tag and a stale image is never reused by mistake.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kube_agent_sandbox.testing.images.common import cache_key, images_cache_dir
from kube_agent_sandbox.testing.images.oci import ImageConfig, Layer, write_oci_archive
from kube_agent_sandbox.testing.images.pause import pause_layer
from kube_agent_sandbox.testing.images.rootfs import base_layer

_log = logging.getLogger(__name__)

IMAGE_REPOSITORY = "localhost/agent-sandbox"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BuiltImage:
    """An image packed as an OCI archive, ready for ``ctr images import``."""

    reference: str
    archive: Path
    build_seconds: float
    cached: bool


def assemble(
    name: str,
    *,
    layers: Sequence[Layer],
    config: ImageConfig,
    tag_prefix: str = "",
) -> BuiltImage:
    """Pack layers into a cached OCI archive named ``localhost/agent-sandbox/<name>:<tag>``.

    Args:
        name: Repository name under ``localhost/agent-sandbox``.
        layers: Layers, bottom first.
        config: Runtime defaults of the image.
        tag_prefix: Readable start of the tag; the content hash follows it.

    Returns:
        The image.
    """
    started = time.monotonic()
    key = cache_key(
        {
            "name": name,
            "layers": [layer.digest for layer in layers],
            "config": config.to_oci(layers, architecture="any"),
        }
    )
    tag = f"{tag_prefix}{key[:12]}"
    reference = f"{IMAGE_REPOSITORY}/{name}:{tag}"
    archive = images_cache_dir() / f"{name}-{tag}.oci.tar"
    cached = archive.is_file()
    if not cached:
        write_oci_archive(archive, reference=reference, layers=layers, config=config)
        _log.info("packed %s into %s", reference, archive)
    return BuiltImage(
        reference=reference,
        archive=archive,
        build_seconds=time.monotonic() - started,
        cached=cached,
    )


def pause_image() -> BuiltImage:
    """The pod sandbox image (built on first use)."""
    started = time.monotonic()
    image = assemble("pause", layers=[pause_layer()], config=ImageConfig(entrypoint=["/pause"]))
    return _timed(image, started)


def python_image() -> BuiltImage:
    """Debian with python3: the image test and demo sandboxes run (built on first use)."""
    started = time.monotonic()
    image = assemble(
        "python",
        layers=[base_layer()],
        config=ImageConfig(
            cmd=["python3"],
            env={"PATH": PATH_ENV, "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"},
        ),
        tag_prefix="3-bookworm-",
    )
    return _timed(image, started)


def _timed(image: BuiltImage, started: float) -> BuiltImage:
    return BuiltImage(
        reference=image.reference,
        archive=image.archive,
        build_seconds=time.monotonic() - started,
        cached=image.cached,
    )
