"""SandboxSnapshot conversion: v1alpha1 and v1beta1 have the same schema, so nothing but
``apiVersion`` changes (which :func:`~kube_agent_sandbox.api.conversion.convert` sets). The kind
still goes through the webhook like the others, so a later schema difference has its place."""

from __future__ import annotations

from kube_agent_sandbox.api.conversion._common import Obj


def to_hub(obj: Obj) -> Obj:
    """Convert a v1alpha1 SandboxSnapshot to v1beta1 (identical fields)."""
    return obj


def from_hub(obj: Obj) -> Obj:
    """Convert a v1beta1 SandboxSnapshot to v1alpha1 (identical fields)."""
    return obj
