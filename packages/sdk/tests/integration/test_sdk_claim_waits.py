"""Waiting on claims, against a real kube-apiserver, with the test playing the claim controller.

The claim controller is built elsewhere; here the test writes the claim's status itself (as the
cluster admin, through the status subresource) so the SDK's watch-based wait is exercised for
real: Ready with a bound Sandbox returns the handle, TemplateNotFound / WarmPoolNotFound and the
terminal reasons fail fast (and the claim is deleted), transient reasons keep waiting.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from kube_agent_sandbox.sdk import (
    AsyncSandboxClient,
    ClusterConfig,
    NotFoundError,
    SandboxClaimFailedError,
    SandboxClient,
    SandboxTemplateNotFoundError,
    SandboxTimeoutError,
    SandboxWarmPoolNotFoundError,
)
from kube_agent_sandbox.sdk.constants import SANDBOX_CLAIMS

pytestmark = pytest.mark.integration


def ready(
    status: str, reason: str, message: str = "", sandbox: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        }
    }
    if sandbox:
        body["status"]["sandbox"] = {"name": sandbox}
    return body


async def set_status(client: AsyncSandboxClient, name: str, patch: dict[str, Any]) -> None:
    await client._request(
        "PATCH",
        SANDBOX_CLAIMS,
        client.namespace,
        name,
        verb="patch",
        subresource="status",
        body=patch,
        content_type="application/merge-patch+json",
    )


async def claim_name_appearing(client: AsyncSandboxClient) -> str:
    for _ in range(200):
        claims = await client.list_claims()
        if claims:
            return str(claims[0]["metadata"]["name"])
        await asyncio.sleep(0.05)
    raise AssertionError("the SDK created no claim")


async def test_claim_sandbox_returns_the_bound_sandbox(
    sdk_config: ClusterConfig, agent_sandbox_crds: list[str]
) -> None:
    async with (
        AsyncSandboxClient(sdk_config) as client,
        AsyncSandboxClient(sdk_config) as controller,
    ):
        task = asyncio.create_task(client.claim_sandbox("pool", timeout=60))
        name = await claim_name_appearing(controller)
        await set_status(controller, name, ready("False", "SandboxNotReady", "warming"))
        await asyncio.sleep(0.5)
        assert not task.done()  # a transient reason keeps the SDK waiting
        await set_status(controller, name, ready("True", "DependenciesReady", sandbox="pool-abcde"))
        box = await asyncio.wait_for(task, 30)
        assert (box.claim_name, box.name) == (name, "pool-abcde")


@pytest.mark.parametrize(
    ("reason", "error"),
    [
        ("TemplateNotFound", SandboxTemplateNotFoundError),
        ("WarmPoolNotFound", SandboxWarmPoolNotFoundError),
        ("ClaimExpired", SandboxClaimFailedError),
        ("InvalidMetadata", SandboxClaimFailedError),
    ],
)
async def test_claim_failures_raise_fast_and_delete_the_claim(
    sdk_config: ClusterConfig, agent_sandbox_crds: list[str], reason: str, error: type[Exception]
) -> None:
    async with (
        AsyncSandboxClient(sdk_config) as client,
        AsyncSandboxClient(sdk_config) as controller,
    ):
        task = asyncio.create_task(client.claim_sandbox("pool", timeout=60))
        name = await claim_name_appearing(controller)
        started = time.monotonic()
        await set_status(controller, name, ready("False", reason, "details here"))
        with pytest.raises(error, match="details here") as info:
            await asyncio.wait_for(task, 30)
        assert time.monotonic() - started < 20
        assert getattr(info.value, "reason", None) == reason
        with pytest.raises(NotFoundError):
            await controller.get_claim(name)


async def test_claim_timeout_deletes_the_claim(
    sdk_config: ClusterConfig, agent_sandbox_crds: list[str]
) -> None:
    async with AsyncSandboxClient(sdk_config) as client:
        with pytest.raises(SandboxTimeoutError, match="not Ready after 2s"):
            await client.claim_sandbox("pool", timeout=2)
        assert await client.list_claims() == []


def test_sync_claim_wait(sdk_config: ClusterConfig, agent_sandbox_crds: list[str]) -> None:
    with SandboxClient(sdk_config) as client, SandboxClient(sdk_config) as controller:
        claim = client.create_claim("pool", name="sync-claim")
        assert claim["metadata"]["name"] == "sync-claim"

        def bind() -> None:
            time.sleep(0.5)
            controller._request(
                "PATCH",
                SANDBOX_CLAIMS,
                controller.namespace,
                "sync-claim",
                verb="patch",
                subresource="status",
                body=ready("True", "DependenciesReady", sandbox="sync-claim"),
                content_type="application/merge-patch+json",
            )

        thread = threading.Thread(target=bind)
        thread.start()
        bound = client.wait_claim_ready("sync-claim", timeout=30)
        thread.join()
        assert bound["status"]["sandbox"]["name"] == "sync-claim"
        client.delete_claim("sync-claim", wait=True, timeout=30)
        with pytest.raises(NotFoundError):
            client.get_claim("sync-claim")
