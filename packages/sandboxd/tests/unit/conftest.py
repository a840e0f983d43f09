"""Unit-test set-up: pytest runs with ``--import-mode=importlib``, so this directory is put on
``sys.path`` for the shared helper module (``sandboxd_helpers``); the interpreter worker
fixture the interpreter tests share."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kube_agent_sandbox.sandboxd.interpreter.worker import PythonWorker

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
async def python(tmp_path: Path) -> AsyncIterator[PythonWorker]:
    """A started Python interpreter worker in a fresh directory, closed after the test."""
    worker = PythonWorker(cwd=str(tmp_path))
    await worker.start()
    try:
        yield worker
    finally:
        await worker.close()
