"""The warm pool controller wired into a Manager over the in-memory API: real informers, real
work queue, real event handlers; claims adopting members as fast as they can."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from warmpool_harness import NS, POOL, TEMPLATE, template_obj

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import FakeApi, Manager, Obj
from kube_agent_sandbox.extensions.warmpool.reconciler import WarmPoolReconciler
from kube_agent_sandbox.extensions.warmpool.setup import setup
from kube_agent_sandbox.testing.waiting import eventually

WAIT = 30.0


@dataclass
class Running:
    api: FakeApi
    manager: Manager
    reconciler: WarmPoolReconciler

    def creates(self) -> int:
        """Sandboxes created (nothing is deleted in these tests; a create retried after a
        generated-name collision in the fake is one Sandbox, not two)."""
        return len(self.api.contents(SANDBOXES))

    def members(self) -> list[Obj]:
        wanted = name_hash(POOL)
        return [  # the live store, not copies: the test loop must stay cheap
            sb
            for sb in self.api.contents(SANDBOXES).values()
            if (sb["metadata"].get("labels") or {}).get(c.LABEL_WARM_POOL_SANDBOX) == wanted
        ]

    async def until(self, what: str, check: Callable[[], object]) -> None:
        await eventually(check, within=WAIT, what=what, interval=0.01)


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    api = FakeApi(default_namespace=NS)
    manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
    reconciler = setup(manager, ControllerOptions(extensions=True), namespace=NS)
    task = asyncio.create_task(manager.run())
    await manager.controllers_started.wait()
    try:
        yield Running(api, manager, reconciler)
    finally:
        manager.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)


def _pool(replicas: int, template: str = TEMPLATE) -> Obj:
    return {
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    }


def _adopt(claim: str) -> object:
    def change(sb: Obj) -> None:
        sb["metadata"]["labels"].pop(c.LABEL_WARM_POOL_SANDBOX)
        sb["metadata"]["ownerReferences"] = [
            {
                "apiVersion": c.EXTENSIONS_API_VERSION,
                "kind": "SandboxClaim",
                "name": claim,
                "uid": f"uid-{claim}",
                "controller": True,
            }
        ]

    return change


async def test_a_pool_fills_through_the_manager(running: Running) -> None:
    running.api.add(SANDBOX_TEMPLATES, template_obj())
    running.api.add(SANDBOX_WARM_POOLS, _pool(5))
    await running.until("5 members", lambda: len(running.members()) == 5)
    await running.until(
        "status", lambda: (running.api.obj(SANDBOX_WARM_POOLS, POOL) or {}).get("status")
    )
    await asyncio.sleep(0.2)
    assert running.creates() == 5


async def test_a_template_created_later_fills_its_pool(running: Running) -> None:
    running.api.add(SANDBOX_WARM_POOLS, _pool(3, template="later"))
    await running.until(
        "status", lambda: (running.api.obj(SANDBOX_WARM_POOLS, POOL) or {}).get("status")
    )
    assert running.creates() == 0
    later = template_obj()
    later["metadata"]["name"] = "later"
    running.api.add(SANDBOX_TEMPLATES, later)
    await running.until("3 members", lambda: len(running.members()) == 3)


async def test_claims_adopting_hundreds_of_members_never_cause_over_creation(
    running: Running,
) -> None:
    replicas, adoptions = 50, 400
    running.api.add(SANDBOX_TEMPLATES, template_obj())
    running.api.add(SANDBOX_WARM_POOLS, _pool(replicas))
    await running.until("initial fill", lambda: len(running.members()) == replicas)
    started = time.monotonic()
    adopted = 0
    while adopted < adoptions:
        members = running.members()
        if not members:
            await asyncio.sleep(0)
            continue
        for sb in list(members[: adoptions - adopted]):
            running.api.mutate(SANDBOXES, sb["metadata"]["name"], _adopt(f"c{adopted}"))  # type: ignore[arg-type]
            adopted += 1
        await asyncio.sleep(0)
    await running.until("refill", lambda: len(running.members()) == replicas)
    elapsed = time.monotonic() - started
    await asyncio.sleep(0.3)
    # every adopted member replaced exactly once, never more
    assert running.creates() == replicas + adoptions
    assert len(running.members()) == replicas
    print(f"{adoptions} adoptions refilled in {elapsed:.2f}s")
