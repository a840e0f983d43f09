"""Constants and helpers shared by the Sandbox reconcile tests (``test_sandbox_reconcile_*``)."""

from __future__ import annotations

from sandbox_fakes import FakeCluster

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOXES

HASH = name_hash("sandbox-name")
SELECTOR = f"{c.LABEL_SANDBOX_NAME_HASH}={HASH}"


def sandbox_status(cluster: FakeCluster, name: str = "sandbox-name") -> dict:
    """The status of Sandbox ``name`` in ``cluster`` (``{}`` when it has none)."""
    sandbox = cluster.obj(SANDBOXES, name)
    assert sandbox is not None
    return sandbox.get("status") or {}
