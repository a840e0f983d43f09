"""The idle reconciler against a real kube-apiserver (kwok nodes): suspend, renewals, GC.

The reconciler runs in-process with the Sandbox controller as a ServiceAccount bound to the
role built from its ``RBAC_RULES``; the minimum idle timeout is lowered through the test-only
``ControllerOptions.idle_min_timeout`` so a timeout of a few seconds is accepted. Heartbeats
are written with the same Lease body the gateway and the SDK use.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.heartbeat import lease_body, renew_patch
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import LEASES
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import ApiError, Obj
from kube_agent_sandbox.sdk import AsyncSandboxClient
from kube_agent_sandbox.sdk.config import load_kubeconfig
from kube_agent_sandbox.testing.nsapi import NamespaceApi

pytestmark = pytest.mark.integration


class Env(NamespaceApi):
    """Sandbox builders and waits."""

    async def create_sandbox(self, name: str, annotations: dict[str, str]) -> Obj:
        return await self.create(
            SANDBOXES,
            {
                "metadata": {"name": name, "annotations": annotations},
                "spec": {
                    "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
                },
            },
        )

    async def until_ready(self, name: str) -> Obj:
        async def probe() -> Obj | None:
            obj = await self.get(SANDBOXES, name)
            conditions = ((obj or {}).get("status") or {}).get("conditions") or []
            ready = any(
                cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions
            )
            return obj if ready else None

        return await self.until(probe, f"sandbox {name} Ready")

    async def until_suspended(self, name: str) -> Obj:
        async def probe() -> Obj | None:
            obj = await self.get(SANDBOXES, name)
            if (obj or {}).get("spec", {}).get("operatingMode") == "Suspended":
                return obj
            return None

        return await self.until(probe, f"sandbox {name} suspended")

    async def heartbeat(self, sandbox: Obj) -> None:
        now = dt.datetime.now(dt.UTC)
        name = sandbox["metadata"]["name"]
        try:
            await self.client.patch(
                LEASES,
                self.namespace,
                name,
                renew_patch(holder="test", duration_seconds=4, now=now),
            )
        except ApiError as err:
            if not err.not_found:
                raise
            body = lease_body(sandbox, holder="test", duration_seconds=4, now=now)
            await self.create(LEASES, body)


@pytest.fixture
async def env(cluster: Any, namespace: str, extensions_controller: list[Any]) -> AsyncIterator[Env]:
    async with Env.connect(cluster.kubeconfig, namespace) as e:
        yield e


@pytest.fixture
async def sdk(cluster: Any, namespace: str) -> AsyncIterator[AsyncSandboxClient]:
    config = load_kubeconfig(cluster.kubeconfig)
    config.namespace = namespace
    client = AsyncSandboxClient(config)
    try:
        yield client
    finally:
        await client.close()


class TestIdleShutdown:
    extensions = ("idle",)
    controller_options = ControllerOptions(
        extensions=True, idle_shutdown=True, idle_min_timeout=1.0
    )

    async def test_an_idle_sandbox_is_suspended_with_the_annotation_and_an_event(
        self, env: Env
    ) -> None:
        await env.create_sandbox("idle", {c.ANNOTATION_IDLE_TIMEOUT: "3s"})
        ready = await env.until_ready("idle")
        started = time.monotonic()
        suspended = await env.until_suspended("idle")
        elapsed = time.monotonic() - started
        assert suspended["metadata"]["annotations"][c.ANNOTATION_SUSPENDED_BY] == "idle"
        assert elapsed < 30

        # The Event is queued by the recorder and written after the patch: wait for it.
        async def idle_events() -> list[Obj] | None:
            events = await env.events_regarding("Sandbox", "idle")
            found = [e for e in events if e.get("reason") == "IdleSuspended"]
            return found or None

        assert len(await env.until(idle_events, "an IdleSuspended Event")) == 1
        # Exactly one suspend: the Sandbox moved to Suspended once and was left there.
        assert ready["metadata"]["generation"] + 1 == suspended["metadata"]["generation"]

        async def pod_terminated() -> bool:
            obj = await env.get(SANDBOXES, "idle")
            conditions = (obj or {}).get("status", {}).get("conditions") or []
            return any(
                cond.get("type") == "Suspended" and cond.get("status") == "True"
                for cond in conditions
            )

        await env.until(pod_terminated, "Suspended=True from the Sandbox controller")

    async def test_renewed_leases_keep_it_running_and_silence_lets_it_suspend(
        self, env: Env
    ) -> None:
        sandbox = await env.create_sandbox("busy", {c.ANNOTATION_IDLE_TIMEOUT: "4s"})
        await env.until_ready("busy")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            await env.heartbeat(sandbox)
            await asyncio.sleep(1)
            obj = await env.get(SANDBOXES, "busy")
            assert obj is not None
            assert obj["spec"].get("operatingMode") != "Suspended", "suspended while renewed"
        lease = await env.get(LEASES, "busy")
        assert lease is not None
        assert lease["metadata"]["labels"] == {c.LABEL_HEARTBEAT: "true"}
        await env.until_suspended("busy")

    async def test_the_sdk_keepalive_renews_the_lease(
        self, env: Env, sdk: AsyncSandboxClient
    ) -> None:
        await env.create_sandbox("kept", {c.ANNOTATION_IDLE_TIMEOUT: "4s"})
        await env.until_ready("kept")
        handle = sdk.sandbox("kept")
        deadline = time.monotonic() + 9
        while time.monotonic() < deadline:
            lease = await handle.keepalive(holder="sdk-test")
            assert lease is not None
            await asyncio.sleep(1)
            obj = await env.get(SANDBOXES, "kept")
            assert obj is not None
            assert obj["spec"].get("operatingMode") != "Suspended", "suspended while kept alive"
        lease = await env.get(LEASES, "kept")
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == "sdk-test"
        assert lease["spec"]["leaseDurationSeconds"] == 4
        assert lease["metadata"]["ownerReferences"][0]["name"] == "kept"
        # A Sandbox without an idle policy has nothing to keep alive: nothing is written.
        await env.create_sandbox("plain", {})
        assert await sdk.keepalive("plain") is None
        assert await env.get(LEASES, "plain") is None
        await env.until_suspended("kept")

    async def test_an_invalid_timeout_is_reported_and_nothing_happens(self, env: Env) -> None:
        await env.create_sandbox("typo", {c.ANNOTATION_IDLE_TIMEOUT: "5 minutes"})

        async def warned() -> bool:
            events = await env.events_regarding("Sandbox", "typo")
            return any(e.get("reason") == "InvalidIdlePolicy" for e in events)

        await env.until(warned, "an InvalidIdlePolicy event")
        obj = await env.get(SANDBOXES, "typo")
        assert obj is not None
        assert obj["spec"].get("operatingMode") != "Suspended"

    async def test_the_lease_is_garbage_collected_with_its_sandbox(self, env: Env) -> None:
        sandbox = await env.create_sandbox("gc", {c.ANNOTATION_IDLE_TIMEOUT: "1h"})
        await env.heartbeat(sandbox)
        assert await env.get(LEASES, "gc") is not None
        await env.delete(SANDBOXES, "gc")
        await env.until_gone(LEASES, "gc")
