"""Fixtures of the extensions integration tests.

``extensions_controller`` runs the Sandbox controller and the extension controllers a test
class names (``extensions = ("warmpool",)``; all three by default) with the class's
``controller_options``. pytest runs with ``--import-mode=importlib``, so this directory is put
on ``sys.path`` for the helper module.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from extensions_runner import ALL_EXTENSIONS, start_extensions_controller  # noqa: E402

from kube_agent_sandbox.controller.config import ControllerOptions  # noqa: E402
from kube_agent_sandbox.testing.controller_runner import ControllerRunner  # noqa: E402


@pytest.fixture
def extensions_controller(
    agent_sandbox_crds: list[str],
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
) -> list[Any]:
    """Start the controllers; returns ``[manager, <what each setup returned>...]``."""
    assert "sandboxclaims.extensions.agents.x-k8s.io" in agent_sandbox_crds
    options = getattr(request.cls, "controller_options", None) or ControllerOptions(extensions=True)
    names = getattr(request.cls, "extensions", ALL_EXTENSIONS)
    started: list[Any] = []
    running = start_extensions_controller(
        controller_runner,
        rootpath=request.config.rootpath,
        namespace=namespace,
        options=options,
        names=names,
        started=started,
    )
    # The controllers start on their own thread: hand the test their objects once they exist.
    deadline = time.monotonic() + 60
    while len(started) < 1 + len(names):
        if running.error is not None or not running.alive():
            running.stop()  # re-raises what ended it
            raise RuntimeError("the extension controllers exited while starting")
        if time.monotonic() > deadline:
            raise TimeoutError(f"extension controllers not set up within 60 s: {names}")
        time.sleep(0.05)
    return started
