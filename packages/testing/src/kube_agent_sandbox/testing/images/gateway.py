"""The gateway's container image, built like the controller's (no Docker, no registry).

The same steps as ``packages/gateway/Dockerfile``: the Python base layer plus one layer with
the gateway, its sibling wheels (api-types, controller, sdk) and their locked dependencies in
``/opt/agent-sandbox``, bytecode compiled ahead because the container's root filesystem is
read-only. The image runs ``agent-sandbox-gateway`` as user 65532, so the kustomize component
(``manifests/components/gateway``) can be deployed on the real node exactly as written.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from pathlib import Path

from kube_agent_sandbox.testing.images.catalog import PATH_ENV, BuiltImage, assemble
from kube_agent_sandbox.testing.images.common import images_cache_dir
from kube_agent_sandbox.testing.images.controller import (
    IMAGE_PLATFORM_TAG,
    INSTALL_PREFIX,
    app_layer,
    build_wheels,
    locked_requirements,
    wheel_fingerprint,
)
from kube_agent_sandbox.testing.images.oci import ImageConfig, Layer
from kube_agent_sandbox.testing.images.rootfs import base_layer

_log = logging.getLogger(__name__)

GATEWAY_PACKAGES = ("api-types", "controller", "sdk", "gateway")
ENTRYPOINT = "agent-sandbox-gateway"
ENTRYPOINT_SCRIPT = """\
#!/usr/bin/python3
import sys

from kube_agent_sandbox.gateway.cli import main

sys.exit(main())
"""


def gateway_image(repo_root: Path) -> BuiltImage:
    """The gateway image from the repository's current sources (cached by content).

    Args:
        repo_root: The repository (uv workspace) root.

    Returns:
        The image (``localhost/agent-sandbox/gateway:<hash>``); tag it with the name the
        component uses when importing it.

    Raises:
        ImageBuildError: If a wheel, the dependency install or packing fails.
    """
    started = time.monotonic()
    base = base_layer()
    with tempfile.TemporaryDirectory(prefix="gateway-wheels-") as tmp:
        wheels = build_wheels(repo_root, Path(tmp), packages=GATEWAY_PACKAGES)
        requirements = locked_requirements(repo_root, packages=GATEWAY_PACKAGES)
        key = hashlib.sha256(
            f"{wheel_fingerprint(wheels)}\n{requirements}\n{IMAGE_PLATFORM_TAG}".encode()
        ).hexdigest()[:16]
        dest = images_cache_dir() / f"gateway-app-{key}.layer.tar"
        app = Layer.from_cache(dest)
        if app is None:
            _log.info("installing the gateway and its dependencies into an image layer")
            app = app_layer(wheels, requirements, dest, scripts={ENTRYPOINT: ENTRYPOINT_SCRIPT})
    image = assemble(
        "gateway",
        layers=[base, app],
        config=ImageConfig(
            entrypoint=[f"{INSTALL_PREFIX}/bin/{ENTRYPOINT}"],
            cmd=["serve"],
            env={
                "PATH": f"{INSTALL_PREFIX}/bin:{PATH_ENV}",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1",
                "HOME": "/tmp",
                "LANG": "C.UTF-8",
            },
            working_dir="/tmp",
            user="65532:65532",
            labels={"org.opencontainers.image.title": "agent-sandbox-gateway"},
        ),
    )
    _prune_older(keep={image.archive, app.path, app.path.with_suffix(".json")})
    return BuiltImage(
        reference=image.reference,
        archive=image.archive,
        build_seconds=time.monotonic() - started,
        cached=image.cached,
    )


def _prune_older(*, keep: set[Path]) -> None:
    """Delete gateway images and layers of earlier sources; only the current ones stay."""
    folder = images_cache_dir()
    for pattern in ("gateway-*.oci.tar", "gateway-app-*.layer.tar", "gateway-app-*.layer.json"):
        for path in folder.glob(pattern):
            if path not in keep:
                path.unlink(missing_ok=True)
