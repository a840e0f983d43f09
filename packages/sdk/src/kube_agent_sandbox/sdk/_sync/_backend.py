"""Blocking primitives matching ``_async/_backend.py`` (hand-written pair, not generated)."""

from __future__ import annotations

import time

from kube_agent_sandbox.sdk.config import ClusterConfig, load_default


def authorization(config: ClusterConfig) -> str | None:
    """A fresh ``Authorization`` value (runs an exec plugin when the token expired)."""
    return config.authorization()


def sleep(seconds: float) -> None:
    """Pause the calling thread."""
    time.sleep(seconds)


def load_config(context: str | None) -> ClusterConfig:
    """In-cluster or kubeconfig configuration."""
    return load_default(context=context)
