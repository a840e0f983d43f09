"""Fixtures of the gateway's integration tests: controllers, sandboxd and gateway in-process.

pytest runs with ``--import-mode=importlib``, so this directory is put on ``sys.path`` for
the helper module ``gateway_stack``.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from gateway_stack import GatewayStack, start_controllers, start_gateway  # noqa: E402

from kube_agent_sandbox.testing.access import ClusterAccess  # noqa: E402
from kube_agent_sandbox.testing.controller_runner import ControllerRunner  # noqa: E402
from kube_agent_sandbox.testing.plugin import namespace_name  # noqa: E402
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object  # noqa: E402


@pytest.fixture
def other_namespace(cluster: ClusterAccess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A second tenant namespace (no controllers: it only holds an API key)."""
    name = namespace_name("other-" + request.node.name)
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        wait_for_object(
            cluster.api_client(),
            ObjectRef("v1", "Namespace", name),
            lambda _: True,
            timeout=30,
            what="namespace",
        )
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def gateway_stack(
    agent_sandbox_crds: list[str],
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> Iterator[GatewayStack]:
    """Controllers for ``namespace``, a local sandboxd and the gateway; stopped afterwards."""
    assert "sandboxclaims.extensions.agents.x-k8s.io" in agent_sandbox_crds
    start_controllers(controller_runner, rootpath=request.config.rootpath, namespace=namespace)
    secret_file = tmp_path / "hmac"
    secret_file.write_text(secrets.token_hex(32))
    stack = start_gateway(controller_runner, namespace=namespace, secret_file=secret_file)
    try:
        yield stack
    finally:
        stack.stop()
