"""The controller's container image, built from our wheels without Docker or a registry.

The same steps as the repository's Dockerfile, done by hand: the Python base layer (Debian
bookworm, Python 3.11) plus one layer with the controller, the extension controllers and their
locked dependencies, the controller's ``tracing`` extra included, installed into
``/opt/agent-sandbox`` (``uv pip install --target`` for the image's platform and Python,
bytecode compiled ahead because the container's root filesystem is read-only). The image runs
``agent-sandbox-controller`` as user 65532, like the Dockerfile's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kube_agent_sandbox.testing.images.catalog import PATH_ENV, BuiltImage, assemble
from kube_agent_sandbox.testing.images.common import (
    ImageBuildError,
    images_cache_dir,
    prune_older,
    run,
)
from kube_agent_sandbox.testing.images.oci import ImageConfig, Layer, host_architecture, pack_layer
from kube_agent_sandbox.testing.images.rootfs import base_layer

_log = logging.getLogger(__name__)

#: Workspace packages that go into the image (the SDK and the test harness do not).
IMAGE_PACKAGES = ("api-types", "controller", "extensions")
#: Extras of those packages installed too: ``--enable-tracing`` works in the image.
IMAGE_EXTRAS = ("tracing",)
INSTALL_PREFIX = "/opt/agent-sandbox"
IMAGE_PYTHON = "3.11"
# Debian bookworm ships glibc 2.36.
IMAGE_PLATFORM_TAG = "manylinux_2_36"
ENTRYPOINT_SCRIPT = """\
#!/usr/bin/python3
import sys

from kube_agent_sandbox.controller.launcher import main

sys.exit(main())
"""


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        raise ImageBuildError("uv is needed to build the images (pip install uv)")
    return uv


def wheel_fingerprint(wheels: Sequence[Path]) -> str:
    """Hash of the wheels' contents (names and bytes of members, not zip timestamps)."""
    digest = hashlib.sha256()
    for wheel in sorted(wheels, key=lambda p: p.name):
        digest.update(wheel.name.encode())
        with zipfile.ZipFile(wheel) as archive:
            for member in sorted(archive.namelist()):
                digest.update(member.encode())
                digest.update(archive.read(member))
    return digest.hexdigest()[:16]


def build_wheels(
    repo_root: Path, dest: Path, *, packages: Sequence[str] = IMAGE_PACKAGES
) -> list[Path]:
    """Build the wheels of the packages that go into the image.

    Args:
        repo_root: The repository (uv workspace) root.
        dest: Folder for the wheels.
        packages: Workspace packages (folder names under ``packages/``).

    Returns:
        The wheel files.

    Raises:
        ImageBuildError: If a build fails.
    """
    for package in packages:
        run(
            [_uv(), "build", "--quiet", "--wheel", "--out-dir", str(dest), f"packages/{package}"],
            what=f"uv build {package}",
            cwd=repo_root,
            timeout=600,
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != len(packages):
        raise ImageBuildError(f"expected {len(packages)} wheels, found {wheels}")
    return wheels


def locked_requirements(
    repo_root: Path, *, packages: Sequence[str] = IMAGE_PACKAGES, extras: Sequence[str] = ()
) -> str:
    """The third-party requirements of the image's packages, pinned by ``uv.lock``.

    Args:
        repo_root: The repository (uv workspace) root.
        packages: Workspace packages whose requirements are exported.
        extras: Their optional extras to include (``uv export --extra``).

    Returns:
        requirements.txt text (no workspace packages, no dev tools).
    """
    selected = [f"--package=kube-agent-sandbox-{p}" for p in packages]
    return run(
        [
            _uv(),
            "export",
            "--frozen",
            "--no-dev",
            "--no-emit-workspace",
            "--no-header",
            *selected,
            *(f"--extra={extra}" for extra in extras),
        ],
        what="uv export",
        cwd=repo_root,
    )


def app_layer(
    wheels: Sequence[Path],
    requirements: str,
    dest: Path,
    *,
    scripts: Mapping[str, str] | None = None,
    what: str = "controller image",
    extend: Callable[[Path], None] | None = None,
) -> Layer:
    """Install wheels and pinned requirements into ``/opt/agent-sandbox`` as one layer.

    Args:
        wheels: The workspace wheels.
        requirements: Pinned third-party requirements (``locked_requirements``).
        dest: Layer tar to write.
        scripts: Entry scripts for ``/opt/agent-sandbox/bin`` (name -> text); the
            controller's by default, none (and no ``bin`` folder) if empty.
        what: The image, for error messages.
        extend: Called with the layer's root folder before packing, to add more files.

    Returns:
        The layer.
    """
    architecture = {"amd64": "x86_64", "arm64": "aarch64"}[host_architecture()]
    with tempfile.TemporaryDirectory(prefix="app-layer-", dir=images_cache_dir()) as tmp:
        root = Path(tmp) / "root"
        site = root / INSTALL_PREFIX.lstrip("/") / "site-packages"
        site.mkdir(parents=True)
        requirements_file = Path(tmp) / "requirements.txt"
        requirements_file.write_text(requirements)
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)
        run(
            [
                _uv(),
                "pip",
                "install",
                "--quiet",
                "--target",
                str(site),
                "--python-version",
                IMAGE_PYTHON,
                "--python-platform",
                f"{architecture}-{IMAGE_PLATFORM_TAG}",
                "--only-binary",
                ":all:",
                "--no-deps",
                "--compile-bytecode",
                "-r",
                str(requirements_file),
                *map(str, wheels),
            ],
            what=f"uv pip install ({what})",
            env=env,
            timeout=900,
        )
        # Make the folder importable for the image's python3 without PYTHONPATH.
        dist_packages = root / "usr/lib/python3/dist-packages"
        dist_packages.mkdir(parents=True)
        (dist_packages / "agent-sandbox.pth").write_text(f"{INSTALL_PREFIX}/site-packages\n")
        if scripts is None:
            scripts = {"agent-sandbox-controller": ENTRYPOINT_SCRIPT}
        if scripts:
            bin_dir = root / INSTALL_PREFIX.lstrip("/") / "bin"
            bin_dir.mkdir(parents=True)
            for name, text in scripts.items():
                script = bin_dir / name
                script.write_text(text)
                script.chmod(0o755)
        if extend is not None:
            extend(root)
        return pack_layer(root, dest, empty_dirs=())


def service_image(
    repo_root: Path,
    *,
    name: str,
    packages: Sequence[str],
    entrypoint: str,
    script: str,
    cmd: Sequence[str] = (),
    extras: Sequence[str] = (),
) -> BuiltImage:
    """A non-root image that runs one of our Python services (the controller, the gateway).

    The base layer plus one app layer (``app_layer``) cached by the wheels' contents and the
    locked requirements; earlier images of the same name are pruned from the cache.

    Args:
        repo_root: The repository (uv workspace) root.
        name: The image's name (``localhost/agent-sandbox/<name>:<hash>``).
        packages: Workspace packages installed into the image.
        entrypoint: Name of the entry script in ``/opt/agent-sandbox/bin``.
        script: Text of the entry script.
        cmd: The image's default arguments.
        extras: Optional extras of the packages installed too.

    Returns:
        The image.

    Raises:
        ImageBuildError: If a wheel, the dependency install or packing fails.
    """
    started = time.monotonic()
    base = base_layer()
    with tempfile.TemporaryDirectory(prefix=f"{name}-wheels-") as tmp:
        wheels = build_wheels(repo_root, Path(tmp), packages=packages)
        requirements = locked_requirements(repo_root, packages=packages, extras=extras)
        key = hashlib.sha256(
            f"{wheel_fingerprint(wheels)}\n{requirements}\n{IMAGE_PLATFORM_TAG}".encode()
        ).hexdigest()[:16]
        dest = images_cache_dir() / f"{name}-app-{key}.layer.tar"
        app = Layer.from_cache(dest)
        if app is None:
            _log.info("installing the %s and its dependencies into an image layer", name)
            app = app_layer(
                wheels, requirements, dest, scripts={entrypoint: script}, what=f"{name} image"
            )
    image = assemble(
        name,
        layers=[base, app],
        config=ImageConfig(
            entrypoint=[f"{INSTALL_PREFIX}/bin/{entrypoint}"],
            cmd=list(cmd),
            env={
                "PATH": f"{INSTALL_PREFIX}/bin:{PATH_ENV}",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1",
                "HOME": "/tmp",
                "LANG": "C.UTF-8",
            },
            working_dir="/tmp",
            user="65532:65532",
            labels={"org.opencontainers.image.title": f"agent-sandbox-{name}"},
        ),
    )
    prune_older(name, keep={image.archive, app.path, app.path.with_suffix(".json")})
    return BuiltImage(
        reference=image.reference,
        archive=image.archive,
        build_seconds=time.monotonic() - started,
        cached=image.cached,
    )


def controller_image(repo_root: Path) -> BuiltImage:
    """The controller image from the repository's current sources (cached by content).

    Args:
        repo_root: The repository (uv workspace) root.

    Returns:
        The image (``localhost/agent-sandbox/controller:<hash>``); tag it with the name the
        manifests use when importing it.

    Raises:
        ImageBuildError: If a wheel, the dependency install or packing fails.
    """
    return service_image(
        repo_root,
        name="controller",
        packages=IMAGE_PACKAGES,
        entrypoint="agent-sandbox-controller",
        script=ENTRYPOINT_SCRIPT,
        extras=IMAGE_EXTRAS,
    )
