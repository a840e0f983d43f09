"""Fixtures of the SDK integration tests: the Sandbox controller and the SDK's cluster config.

The Sandbox controller runs in-process under its generated RBAC (the controller package's
``sandbox_controller_runner``, imported from its test folder), scoped to the test namespace.
The SDK talks to the same kube-apiserver as the cluster admin, or as an identity without rights
for the permission tests. The claim controller is not run here: claim tests check what the SDK
writes, not how a claim becomes Ready.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_RUNNER_DIR = str(Path(__file__).resolve().parents[3] / "controller" / "tests" / "integration")
if _RUNNER_DIR not in sys.path:
    sys.path.insert(0, _RUNNER_DIR)

from sandbox_controller_runner import start_sandbox_controller  # noqa: E402

from kube_agent_sandbox.controller.config import ControllerOptions  # noqa: E402
from kube_agent_sandbox.sdk import ClusterConfig, load_kubeconfig  # noqa: E402
from kube_agent_sandbox.testing.access import ClusterAccess  # noqa: E402
from kube_agent_sandbox.testing.controller_runner import (  # noqa: E402
    ControllerRunner,
    RunningController,
)


@pytest.fixture
def sandbox_controller(
    agent_sandbox_crds: list[str],
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
) -> RunningController:
    """The Sandbox controller running in-process for ``namespace`` under its generated RBAC."""
    assert "sandboxes.agents.x-k8s.io" in agent_sandbox_crds
    return start_sandbox_controller(
        controller_runner,
        rootpath=request.config.rootpath,
        namespace=namespace,
        options=ControllerOptions(),
        name="sandbox",
    )


@pytest.fixture
def sdk_config(cluster: ClusterAccess, namespace: str) -> ClusterConfig:
    """The admin kubeconfig as the SDK loads it, defaulting to the test namespace."""
    config = load_kubeconfig(cluster.kubeconfig)
    config.namespace = namespace
    return config


@pytest.fixture
def unprivileged_config(
    controller_runner: ControllerRunner, namespace: str, agent_sandbox_crds: list[str]
) -> ClusterConfig:
    """A ServiceAccount without any role, for permission errors."""
    del agent_sandbox_crds
    identity = controller_runner.identity("sdk-nobody", namespace=namespace)
    config = load_kubeconfig(identity.kubeconfig)
    config.namespace = namespace
    return config
