"""Helpers of the gateway core's unit tests: a FakeApi-backed gateway and a fake controller.

``gateway`` is a started :class:`GatewayState` on a ``FakeApi`` with one tenant key, plus an
httpx client on the ASGI app. ``FakeController`` plays the claim and Sandbox controllers:
when a gateway claim appears it binds a Sandbox with a Pod and marks the claim Ready (or
leaves it pending, or fails it, as a test asks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_SNAPSHOTS,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import PODS, SECRETS
from kube_agent_sandbox.controller.runtime import FakeApi, Obj
from kube_agent_sandbox.gateway.app import build_app
from kube_agent_sandbox.gateway.config import GatewayOptions
from kube_agent_sandbox.gateway.state import GatewayState
from kube_agent_sandbox.gateway.tenant_rbac import DEFAULT_GATEWAY_NAMESPACE
from kube_agent_sandbox.gateway.tenants import generate_key, key_secret
from kube_agent_sandbox.gateway.tokens import Tokens

TENANT = "tenant-a"
OTHER = "tenant-b"
GATEWAY_NS = DEFAULT_GATEWAY_NAMESPACE
"""The gateway's own namespace, where its API-key Secrets are (the default: no option set, no
ServiceAccount file; setting it would also change the egress NetworkPolicies)."""
TOKEN_SECRET = b"0123456789abcdef0123"


def ready_condition(status: str = "True", reason: str = "Ready", message: str = "") -> Obj:
    """A Ready condition."""
    return {
        "type": c.CONDITION_READY,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-01T21:00:00Z",
    }


@dataclass
class FakeController:
    """Binds gateway claims to Sandboxes with Pods, as the real controllers would."""

    api: FakeApi
    mode: str = "ready"  # ready | pending | fail
    fail_reason: str = c.REASON_TEMPLATE_NOT_FOUND
    bound: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def bind(self, claim: Obj) -> None:
        """Make ``claim`` Ready with a Sandbox and Pod (or failed, per ``mode``)."""
        meta = claim["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if self.mode == "pending":
            return
        if self.mode == "fail":

            def failed(obj: Obj) -> None:
                obj["status"] = {
                    "conditions": [ready_condition("False", self.fail_reason, "no template")]
                }

            self.api.mutate(SANDBOX_CLAIMS, name, failed, namespace=ns)
            return
        sandbox_name = f"pool-{name[:8]}"
        self.api.add(
            SANDBOXES,
            {
                "metadata": {
                    "name": sandbox_name,
                    "namespace": ns,
                    "annotations": {c.ANNOTATION_POD_NAME: sandbox_name},
                },
                "spec": {"operatingMode": "Running"},
                "status": {"conditions": [ready_condition()]},
            },
        )
        self.api.add(
            PODS,
            {
                "metadata": {
                    "name": sandbox_name,
                    "namespace": ns,
                    "labels": {c.LABEL_SANDBOX_NAME_HASH: "abc"},
                },
                "spec": {
                    "containers": [
                        {"name": "main", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}
                    ]
                },
                "status": {"podIP": "10.0.0.7", "phase": "Running"},
            },
        )

        def ready(obj: Obj) -> None:
            obj["status"] = {
                "conditions": [ready_condition()],
                "sandbox": {"name": sandbox_name, "podIPs": ["10.0.0.7"]},
            }

        self.api.mutate(SANDBOX_CLAIMS, name, ready, namespace=ns)
        self.bound.append(name)

    async def run(self) -> None:
        """Watch the fake API for new claims and bind them."""
        seen: set[str] = set()  # by uid: a new claim under a gone claim's name is new
        while True:
            for claim in self.api.objects(SANDBOX_CLAIMS):
                uid = claim["metadata"]["uid"]
                if uid not in seen:
                    seen.add(uid)
                    self.bind(claim)
            await asyncio.sleep(0.01)


@dataclass
class Gateway:
    """A started gateway on a FakeApi."""

    api: FakeApi
    state: GatewayState
    client: httpx.AsyncClient
    key: str
    other_key: str
    controller: FakeController
    app: Any = None

    def headers(self, key: str | None = None) -> dict[str, str]:
        """Auth headers of the tenant (or of ``key``)."""
        return {"X-API-KEY": key or self.key}


def add_pool(api: FakeApi, namespace: str, name: str) -> None:
    """A warm pool named ``name``."""
    api.add(
        SANDBOX_WARM_POOLS,
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "sandboxTemplateRef": {"name": name}},
        },
    )


@contextlib.asynccontextmanager
async def started_gateway(
    *, domain: str | None = None, base_url: str = "http://gw", **options_: Any
) -> AsyncIterator[Gateway]:
    """A started gateway with tenants A and B, a pool ``base`` in both, a fake controller.

    Args:
        domain: the gateway's ``--domain`` (None: none configured).
        base_url: where the test client sends requests (its Host).
        options_: other :class:`GatewayOptions` fields.
    """
    api = FakeApi()
    key, other_key = generate_key(), generate_key()
    api.add(SECRETS, key_secret(TENANT, key, gateway_namespace=GATEWAY_NS))
    api.add(SECRETS, key_secret(OTHER, other_key, gateway_namespace=GATEWAY_NS))
    add_pool(api, TENANT, "base")
    add_pool(api, OTHER, "base")
    options = GatewayOptions(
        create_timeout_seconds=2, init_timeout_seconds=0.2, domain=domain, **options_
    )
    state = GatewayState(options, api=api, tokens=Tokens(TOKEN_SECRET))
    app = build_app(state)
    await state.start()
    controller = FakeController(api)
    task = asyncio.create_task(controller.run())
    transport = httpx.ASGITransport(app=app)
    client = httpx.AsyncClient(transport=transport, base_url=base_url)
    try:
        yield Gateway(api, state, client, key, other_key, controller, app)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.aclose()
        await state.stop()


@dataclass
class Replica:
    """Another gateway process on the same API (and HMAC secret) as a :class:`Gateway`."""

    state: GatewayState
    client: httpx.AsyncClient


@contextlib.asynccontextmanager
async def second_replica(gw: Gateway) -> AsyncIterator[Replica]:
    """A second started gateway sharing ``gw``'s FakeApi, options and token secret."""
    state = GatewayState(gw.state.options, api=gw.api, tokens=Tokens(TOKEN_SECRET))
    app = build_app(state)
    await state.start()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw2")
    try:
        yield Replica(state, client)
    finally:
        await client.aclose()
        await state.stop()


def claim_of(api: FakeApi, name: str, namespace: str = TENANT) -> dict[str, Any]:
    """The stored claim."""
    obj = api.obj(SANDBOX_CLAIMS, name, namespace)
    assert obj is not None
    return obj


@contextlib.asynccontextmanager
async def snapshot_controller(
    api: FakeApi, outcome: str = "Ready", message: str = "registry down"
) -> AsyncIterator[list[str]]:
    """Give every new SandboxSnapshot ``outcome`` (a failure's reason, with ``message``);
    yields the names it saw."""
    seen: list[str] = []

    async def run() -> None:
        while True:
            for obj in api.objects(SANDBOX_SNAPSHOTS):
                meta = obj["metadata"]
                if meta["uid"] in seen:
                    continue
                seen.append(meta["uid"])

                def finish(o: Obj) -> None:
                    if outcome == "Ready":
                        o["status"] = {
                            "phase": "Ready",
                            "image": f"reg.example/{o['metadata']['name']}@sha256:{'a' * 64}",
                            "size": 42,
                        }
                    else:
                        o["status"] = {
                            "phase": "Failed",
                            "conditions": [
                                {
                                    "type": "Ready",
                                    "status": "False",
                                    "reason": outcome,
                                    "message": message,
                                }
                            ],
                        }

                api.mutate(SANDBOX_SNAPSHOTS, meta["name"], finish, namespace=meta["namespace"])
            await asyncio.sleep(0.01)

    task = asyncio.create_task(run())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
