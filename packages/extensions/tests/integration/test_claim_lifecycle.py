"""Claim lifecycle: shutdownTime with each policy, ttlSecondsAfterFinished
(docs/concepts/claims.md)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
from claim_env import ClaimEnv, conditions

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS

pytestmark = pytest.mark.integration
HOLD_FINALIZER = "test.agents.x-k8s.io/hold"


@pytest.fixture
async def env(
    cluster: Any, namespace: str, extensions_controller: list[Any]
) -> AsyncIterator[ClaimEnv]:
    async with ClaimEnv.connect(cluster.kubeconfig, namespace) as e:
        await e.template("tmpl")
        await e.pool("pool", "tmpl")
        yield e


def _past() -> str:
    return (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _soon(seconds: int) -> str:
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class TestClaimLifecycle:
    extensions = ("claim",)

    async def test_retain_keeps_claim_and_deletes_sandbox(self, env: ClaimEnv) -> None:
        await env.claim("retained", "pool", lifecycle={"shutdownTime": _soon(15)})
        await env.until_claim("retained", status="True")
        assert await env.get(SANDBOXES, "retained") is not None
        claim = await env.until_claim("retained", status="False", reason="ClaimExpired")
        assert conditions(claim)["Ready"]["message"] == "Claim expired. Sandbox cleanup initiated."
        await env.until_gone(SANDBOXES, "retained")
        assert await env.get(SANDBOX_CLAIMS, "retained") is not None
        expired = await env.until_event("retained", "ClaimExpired")
        assert expired["action"] == "Claim Expired"

    async def test_already_expired_retain(self, env: ClaimEnv) -> None:
        await env.claim("late", "pool", lifecycle={"shutdownTime": _past()})
        claim = await env.until_claim("late", status="False", reason="ClaimExpired")
        assert claim["metadata"]["name"] == "late"
        assert await env.get(SANDBOXES, "late") is None

    async def test_delete_policy_deletes_claim(self, env: ClaimEnv) -> None:
        await env.claim(
            "deleted", "pool", lifecycle={"shutdownTime": _soon(15), "shutdownPolicy": "Delete"}
        )
        await env.until_claim("deleted", status="True")
        await env.until_gone(SANDBOX_CLAIMS, "deleted")

    async def test_delete_foreground(self, env: ClaimEnv) -> None:
        await env.claim(
            "fg",
            "pool",
            lifecycle={"shutdownTime": _soon(15), "shutdownPolicy": "DeleteForeground"},
        )
        ready = await env.until_claim("fg", status="True")
        sandbox = ready["status"]["sandbox"]["name"]
        # A finalizer of the test's holds the Sandbox, so the claim's foreground deletion stays
        # visible (deletionTimestamp + foregroundDeletion) until the test lets go; without it
        # kwok's fast garbage collection can finish between two polls.
        await env.patch(SANDBOXES, sandbox, {"metadata": {"finalizers": [HOLD_FINALIZER]}})

        async def deleting() -> dict[str, Any] | None:
            claim = await env.get(SANDBOX_CLAIMS, "fg")
            if claim is None or not claim["metadata"].get("deletionTimestamp"):
                return None
            return claim

        claim = await env.until(deleting, "claim with deletionTimestamp")
        assert "foregroundDeletion" in claim["metadata"].get("finalizers", [])
        await env.patch(SANDBOXES, sandbox, {"metadata": {"finalizers": None}})
        await env.until_gone(SANDBOX_CLAIMS, "fg")
        assert await env.get(SANDBOXES, sandbox) is None

    async def test_ttl_after_finished(self, env: ClaimEnv) -> None:
        await env.claim("ttl", "pool", lifecycle={"ttlSecondsAfterFinished": 0})
        await env.until_claim("ttl", status="True")
        # the pod completes (kwok runs no containers: the test plays the kubelet)
        pod = await env.get(PODS, "ttl")
        assert pod is not None
        await env.client.patch(
            PODS, env.namespace, "ttl", {"status": {"phase": "Succeeded"}}, subresource="status"
        )

        async def expired() -> dict[str, Any] | None:
            claim = await env.get(SANDBOX_CLAIMS, "ttl")
            conds = conditions(claim)
            if conds.get("Ready", {}).get("reason") != "ClaimExpired":
                return None
            return claim

        claim = await env.until(expired, "claim expired after finishing")
        finished = conditions(claim)["Finished"]
        assert (finished["status"], finished["reason"]) == ("True", c.REASON_POD_SUCCEEDED)
        await env.until_gone(SANDBOXES, "ttl")
        kept = await env.get(SANDBOX_CLAIMS, "ttl")
        assert kept is not None
        assert conditions(kept)["Finished"]["status"] == "True"
