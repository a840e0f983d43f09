"""Claims waiting for a missing template or pool recover when it appears.

The 1-minute retry stays as a fallback; these tests require recovery well before it, which
only the template-create and pool watches can deliver.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from claim_env import ClaimEnv

from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_condition

pytestmark = pytest.mark.integration

BEFORE_FALLBACK = 40.0  # seconds: well under the 60 s NotFound requeue


@pytest.fixture
async def env(
    cluster: Any, namespace: str, extensions_controller: list[Any]
) -> AsyncIterator[ClaimEnv]:
    async with ClaimEnv.connect(cluster.kubeconfig, namespace) as e:
        yield e


async def _ready_within(cluster: Any, env: ClaimEnv, name: str, seconds: float) -> None:
    """Watch the claim until Ready is True (the controllers run on their own thread)."""
    ref = ObjectRef(SANDBOX_CLAIMS.api_version, SANDBOX_CLAIMS.kind, name, env.namespace)
    await asyncio.to_thread(wait_for_condition, cluster.api_client(), ref, "Ready", timeout=seconds)


class TestRecovery:
    extensions = ("claim",)

    async def test_template_created_later(self, cluster: Any, env: ClaimEnv) -> None:
        await env.pool("pool", "late-template")
        await env.claim("waiting", "pool")
        await env.until_claim("waiting", status="False", reason="TemplateNotFound")
        await env.template("late-template")
        await _ready_within(cluster, env, "waiting", BEFORE_FALLBACK)

    async def test_pool_created_later(self, cluster: Any, env: ClaimEnv) -> None:
        await env.template("tmpl")
        await env.claim("waiting", "late-pool")
        await env.until_claim("waiting", status="False", reason="WarmPoolNotFound")
        await env.pool("late-pool", "tmpl")
        await _ready_within(cluster, env, "waiting", BEFORE_FALLBACK)
