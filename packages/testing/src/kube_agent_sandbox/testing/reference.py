"""Where the upstream v0.5.4 reference data (CRDs and example manifests) is found.

The data lives beside the repository in ``shared/reference/agent-sandbox-v0.5.4`` (as CI lays it
out) and is test data only: it is never copied into the product. Every test that compares with
upstream locates it here, so one environment variable moves it for all of them.
"""

from __future__ import annotations

import os
from pathlib import Path

REFERENCE_ENV = "AGENT_SANDBOX_REFERENCE_DIR"
"""Directory that holds ``agent-sandbox-v0.5.4/`` (default: ``<repo>/../shared/reference``)."""

_RELEASE = "agent-sandbox-v0.5.4"
_REPO = Path(__file__).resolve().parents[5]


def reference_dir() -> Path:
    """The upstream release's reference directory (it may not exist on this machine)."""
    override = os.environ.get(REFERENCE_ENV)
    base = Path(override) if override else _REPO.parent / "shared" / "reference"
    return base / _RELEASE


def reference_files(kind: str) -> list[Path]:
    """Sorted YAML files of ``kind`` (``crds`` or ``examples``); empty when the data is absent."""
    return sorted((reference_dir() / kind).glob("*.yaml"))


def missing_reason(kind: str) -> str:
    """The message for tests that cannot find the reference data of ``kind``."""
    return (
        f"upstream reference {kind} not found under {reference_dir() / kind} "
        f"(set {REFERENCE_ENV} to the directory holding {_RELEASE}/)"
    )
