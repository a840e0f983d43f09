"""A minimal Debian root filesystem with Python, built with debootstrap and cached as a layer.

Sandboxes in the tests and the demo run Python, and the controller image runs our wheels, so
both start from one base: Debian's ``minbase`` variant plus ``python3``, fetched from Debian's
mirror (the only package source these machines reach besides PyPI), stripped of
documentation and package lists, and packed into an uncompressed OCI layer. The layer is
cached by its inputs, so debootstrap runs once per machine.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from kube_agent_sandbox.testing.images.common import (
    ImageBuildError,
    cache_key,
    images_cache_dir,
    run,
    unmount_below,
)
from kube_agent_sandbox.testing.images.oci import Layer, pack_layer

_log = logging.getLogger(__name__)

DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "ca-certificates")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Removed after debootstrap: nothing in a sandbox or the controller reads them.
_PRUNED = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/cache/debconf/templates.dat-old",
    "var/log",
)


def debian_mirror() -> str:
    """The Debian mirror to debootstrap from (``AGENT_SANDBOX_DEBIAN_MIRROR`` overrides)."""
    return os.environ.get("AGENT_SANDBOX_DEBIAN_MIRROR", DEFAULT_MIRROR)


def _prune(root: Path) -> None:
    for relative in _PRUNED:
        target = root / relative
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
            target.mkdir(mode=0o755)


def base_layer(
    *,
    suite: str = DEBIAN_SUITE,
    packages: Sequence[str] = BASE_PACKAGES,
    mirror: str | None = None,
) -> Layer:
    """The cached base layer, built with debootstrap on first use.

    Args:
        suite: Debian release to install.
        packages: Packages added to the ``minbase`` variant.
        mirror: Debian mirror URL; :func:`debian_mirror` when None.

    Returns:
        The base layer.

    Raises:
        ImageBuildError: If debootstrap is missing, not run as root, or fails.
    """
    mirror = mirror or debian_mirror()
    key = cache_key({"suite": suite, "packages": sorted(packages), "pruned": _PRUNED, "format": 1})
    dest = images_cache_dir() / f"debian-{suite}-python-{key}.layer.tar"
    cached = Layer.from_cache(dest)
    if cached is not None:
        return cached
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap is not installed (apt-get install debootstrap); it builds the "
            "images' root filesystem"
        )
    if os.geteuid() != 0:
        raise ImageBuildError("building a root filesystem with debootstrap needs root")
    started = time.monotonic()
    _log.info("building the %s base root filesystem with debootstrap (once per machine)", suite)
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=images_cache_dir()) as tmp:
        root = Path(tmp) / "rootfs"
        try:
            _debootstrap(root, suite=suite, packages=packages, mirror=mirror, log_dir=Path(tmp))
        finally:
            unmount_below(root)
        _prune(root)
        layer = pack_layer(root, dest)
    _log.info("base layer %s built in %.0fs", layer.digest[:19], time.monotonic() - started)
    return layer


def _debootstrap(
    root: Path, *, suite: str, packages: Sequence[str], mirror: str, log_dir: Path
) -> None:
    run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            suite,
            str(root),
            mirror,
        ],
        what="debootstrap",
        log_file=log_dir / "debootstrap.log",
        timeout=1200,
    )
