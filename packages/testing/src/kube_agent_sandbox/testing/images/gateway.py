"""The gateway's container image, built like the controller's (no Docker, no registry).

The same steps as ``packages/gateway/Dockerfile``: the Python base layer plus one layer with
the gateway, its sibling wheels (api-types, controller, sdk) and their locked dependencies in
``/opt/agent-sandbox``, bytecode compiled ahead because the container's root filesystem is
read-only. The image runs ``agent-sandbox-gateway`` as user 65532, so the kustomize component
(``manifests/components/gateway``) can be deployed on the real node exactly as written.
"""

from __future__ import annotations

from pathlib import Path

from kube_agent_sandbox.testing.images.catalog import BuiltImage
from kube_agent_sandbox.testing.images.controller import service_image

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
    return service_image(
        repo_root,
        name="gateway",
        packages=GATEWAY_PACKAGES,
        entrypoint=ENTRYPOINT,
        script=ENTRYPOINT_SCRIPT,
        cmd=["serve"],
    )
