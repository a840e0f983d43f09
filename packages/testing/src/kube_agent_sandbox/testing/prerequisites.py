"""What the local cluster needs before it starts, and the error that says what is missing.

Kept apart from :mod:`~kube_agent_sandbox.testing.cluster` so that kwok's stage lookup, the
cluster providers and the pytest plugin can raise and catch it without the cluster.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


class PrerequisiteError(RuntimeError):
    """Something the local cluster needs is missing (binaries, Go module cache, ...)."""


def check_binaries(bin_dir: Path, names: Sequence[str]) -> None:
    """Raise :class:`PrerequisiteError` naming every binary missing from ``bin_dir``.

    Args:
        bin_dir: Directory holding the built binaries.
        names: Binary names to look for.

    Raises:
        PrerequisiteError: If any binary is missing.
    """
    missing = [n for n in names if not os.access(bin_dir / n, os.X_OK)]
    if missing:
        raise PrerequisiteError(
            f"missing {', '.join(missing)} in {bin_dir}: run `nox -s testenv` "
            "(python -m kube_agent_sandbox.testing.build)"
        )
