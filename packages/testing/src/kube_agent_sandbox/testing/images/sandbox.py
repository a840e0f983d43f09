"""The E2B-style sandbox image: the Python image plus ``sandboxd`` and the code interpreter.

What the gateway's real-node tests run in their sandboxes, built like the controller image
(no Docker, no registry): the Debian/Python base layer and one layer with the
``kube-agent-sandbox-sandboxd`` wheel and its locked dependencies (pure Python) in
``/opt/agent-sandbox/site-packages``, importable by the image's ``python3`` through a ``.pth``
file. The layer also adds E2B's default user ``user`` (uid/gid 1000, home ``/home/user``),
because the SDK's commands and relative paths act as that user. The container runs
``python3 -m kube_agent_sandbox.sandboxd`` (envd's port 49983) as root, which switches to
``user`` per process as envd does; a code-interpreter template starts
``python3 -m kube_agent_sandbox.sandboxd.interpreter`` (port 49999) from the same image.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tarfile
import tempfile
import time
from pathlib import Path

from kube_agent_sandbox.testing.images.catalog import PATH_ENV, BuiltImage, assemble
from kube_agent_sandbox.testing.images.common import ImageBuildError, images_cache_dir, prune_older
from kube_agent_sandbox.testing.images.controller import (
    IMAGE_PLATFORM_TAG,
    app_layer,
    build_wheels,
    locked_requirements,
    wheel_fingerprint,
)
from kube_agent_sandbox.testing.images.oci import ImageConfig, Layer
from kube_agent_sandbox.testing.images.rootfs import base_layer

_log = logging.getLogger(__name__)

SANDBOX_PACKAGES = ("sandboxd",)
SANDBOXD_COMMAND = ("python3", "-m", "kube_agent_sandbox.sandboxd")
INTERPRETER_COMMAND = ("python3", "-m", "kube_agent_sandbox.sandboxd.interpreter")
USER_NAME = "user"
USER_ID = 1000
LAYER_FORMAT = 1


def _base_file(base: Layer, name: str) -> str:
    """A text file of the base layer (``etc/passwd``...), to extend rather than replace."""
    with tarfile.open(base.path) as archive:
        for candidate in (name, f"./{name}"):
            try:
                member = archive.getmember(candidate)
            except KeyError:
                continue
            extracted = archive.extractfile(member)
            if extracted is not None:
                return extracted.read().decode()
    raise ImageBuildError(f"the base layer has no {name}")


def _add_user(root: Path, base: Layer) -> None:
    etc = root / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    passwd = _base_file(base, "etc/passwd")
    group = _base_file(base, "etc/group")
    if not any(line.startswith(f"{USER_NAME}:") for line in passwd.splitlines()):
        passwd += f"{USER_NAME}:x:{USER_ID}:{USER_ID}::/home/{USER_NAME}:/bin/bash\n"
    if not any(line.startswith(f"{USER_NAME}:") for line in group.splitlines()):
        group += f"{USER_NAME}:x:{USER_ID}:\n"
    (etc / "passwd").write_text(passwd)
    (etc / "group").write_text(group)
    for path in (etc / "passwd", etc / "group"):
        path.chmod(0o644)
    home = root / "home" / USER_NAME
    home.mkdir(parents=True)
    home.chmod(0o755)
    os.chown(home, USER_ID, USER_ID)


def sandbox_image(repo_root: Path) -> BuiltImage:
    """The sandbox image from the repository's current ``sandboxd`` sources (cached by content).

    Args:
        repo_root: The repository (uv workspace) root.

    Returns:
        The image (``localhost/agent-sandbox/sandbox:<hash>``).

    Raises:
        ImageBuildError: If the wheel, the dependency install or packing fails.
    """
    started = time.monotonic()
    base = base_layer()
    with tempfile.TemporaryDirectory(prefix="sandbox-wheels-") as tmp:
        wheels = build_wheels(repo_root, Path(tmp), packages=SANDBOX_PACKAGES)
        requirements = locked_requirements(repo_root, packages=SANDBOX_PACKAGES)
        digest = hashlib.sha256(wheel_fingerprint(wheels).encode())
        digest.update(f"{requirements}\n{IMAGE_PLATFORM_TAG}\n{base.digest}\n".encode())
        digest.update(f"{USER_NAME}:{USER_ID}:{LAYER_FORMAT}".encode())
        dest = images_cache_dir() / f"sandbox-app-{digest.hexdigest()[:16]}.layer.tar"
        app = Layer.from_cache(dest)
        if app is None:
            _log.info("installing sandboxd and its dependencies into an image layer")
            app = app_layer(
                wheels,
                requirements,
                dest,
                scripts={},
                what="sandbox image",
                extend=lambda root: _add_user(root, base),
            )
    image = assemble(
        "sandbox",
        layers=[base, app],
        config=ImageConfig(
            cmd=list(SANDBOXD_COMMAND),
            env={"PATH": PATH_ENV, "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"},
            working_dir=f"/home/{USER_NAME}",
            labels={"org.opencontainers.image.title": "agent-sandbox-sandbox"},
        ),
    )
    prune_older("sandbox", keep={image.archive, app.path, app.path.with_suffix(".json")})
    return BuiltImage(
        reference=image.reference,
        archive=image.archive,
        build_seconds=time.monotonic() - started,
        cached=image.cached,
    )
