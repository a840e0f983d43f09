"""Fixtures of the controller integration tests, and their helper modules on ``sys.path``.

pytest runs with ``--import-mode=importlib``, which does not put test directories on
``sys.path``; helper modules of this directory (``sandbox_controller_runner``,
``informer_events``) are imported by plain name, so the directory is added here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from sandbox_controller_runner import start_sandbox_controller  # noqa: E402

from kube_agent_sandbox.controller.config import ControllerOptions  # noqa: E402
from kube_agent_sandbox.testing.access import ClusterAccess  # noqa: E402
from kube_agent_sandbox.testing.controller_runner import (  # noqa: E402
    ControllerRunner,
    RunningController,
)
from kube_agent_sandbox.testing.helm import Helm, find_helm  # noqa: E402
from kube_agent_sandbox.testing.plugin import unavailable  # noqa: E402


@pytest.fixture
def sandbox_controller(
    agent_sandbox_crds: list[str],
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
) -> RunningController:
    """The Sandbox controller running in-process for ``namespace`` under its generated RBAC.

    A test class may set ``controller_options`` (a ``ControllerOptions``) to run it with other
    flags than the defaults.
    """
    assert "sandboxes.agents.x-k8s.io" in agent_sandbox_crds
    options = getattr(request.cls, "controller_options", None) or ControllerOptions()
    return start_sandbox_controller(
        controller_runner,
        rootpath=request.config.rootpath,
        namespace=namespace,
        options=options,
        name="sandbox",
    )


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory, cluster: ClusterAccess) -> Helm:
    """The pinned helm, talking to the test cluster."""
    binary = find_helm()
    if binary is None:
        unavailable("helm not found: run `nox -s testenv -- --only helm` (or put helm on PATH)")
    return Helm(binary, state_dir=tmp_path_factory.mktemp("helm"), kubeconfig=cluster.kubeconfig)
