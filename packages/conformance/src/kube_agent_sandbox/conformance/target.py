"""What a conformance run tests: the cluster and the implementation.

Its own module so that the runner (which builds it from the command line) and the local
environments (which start a cluster and a controller for it) share it without importing each
other at module level.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Target:
    """The cluster and implementation a run tests."""

    kubeconfig: Path | None
    implementation: str
    image: str | None = None
