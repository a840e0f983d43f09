"""The status a pass writes and the merge patch that gets it there (spec 4.2.1 steps 7, 13).

Zero values are omitted from the desired status (as Go's ``omitempty`` does) and cleared with
``null`` in the patch, so a pool scaled from 3 to 0 shows no stale ``replicas: 3``. Fields the
controller does not own are left alone.
"""

from __future__ import annotations

from typing import Any, Final

from kube_agent_sandbox.controller.runtime.types import Obj

__all__ = ["OWNED_FIELDS", "desired_status", "status_patch"]

OWNED_FIELDS: Final = ("replicas", "readyReplicas", "selector", "observedGeneration")


def desired_status(
    *, replicas: int, ready_replicas: int, selector: str, observed_generation: int
) -> dict[str, Any]:
    """The owned status fields, zero values left out."""
    values: dict[str, Any] = {
        "replicas": replicas,
        "readyReplicas": ready_replicas,
        "selector": selector,
        "observedGeneration": observed_generation,
    }
    return {k: v for k, v in values.items() if v}


def status_patch(current: Obj | None, desired: dict[str, Any]) -> dict[str, Any]:
    """The ``status`` merge patch from ``current`` to ``desired`` (empty when equal)."""
    current = current or {}
    patch: dict[str, Any] = {}
    for name in OWNED_FIELDS:
        have = current.get(name) or None
        want = desired.get(name)
        if have != want:
            patch[name] = want
    return patch
