"""Shared helpers of the Sandbox child-object tests: foreign owner references and shortcuts."""

from __future__ import annotations

from typing import Any

from sandbox_fakes import (
    FakeCluster,
    conditions_by_type,
    owner_ref,
    request,
)

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS

POOL_REF = owner_ref("SandboxWarmPool", "pool", "pool-uid")
CLAIM_REF = owner_ref("SandboxClaim", "claim", "claim-uid")
RS_REF = owner_ref("ReplicaSet", "rs", "rs-uid", api_version="apps/v1")


def _ready(cluster: FakeCluster, name: str = "sandbox-name") -> dict[str, Any]:
    return conditions_by_type(cluster.obj(SANDBOXES, name))["Ready"]  # type: ignore[arg-type]


def _pod(cluster: FakeCluster, name: str = "sandbox-name") -> dict[str, Any]:
    pod = cluster.obj(PODS, name)
    assert pod is not None
    return pod


async def _reconcile(cluster: FakeCluster, **kwargs: Any) -> None:
    await cluster.reconciler(**kwargs).reconcile(request())
