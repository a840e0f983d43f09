"""Import a repository script (``scripts/*.py``, not a package module) in a test."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

__all__ = ["REPO", "load_script"]

REPO = Path(__file__).resolve().parents[5]
"""The repository root (this file is ``packages/testing/src/kube_agent_sandbox/testing/``)."""


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (executed once per call).

    Raises:
        FileNotFoundError: if there is no such script.
    """
    path = REPO / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
