"""Every extension controller is wired through the runtime's ControllerBuilder, queueing as before.

The setups no longer touch a controller's queue: their custom watch handlers get a
ControllerHandle from the builder. These tests pin what each setup registers and what a
custom handler queues, with which delay.
"""

from __future__ import annotations

import asyncio
import dataclasses
from types import ModuleType

import pytest
from warmpool_harness import NS, POOL

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import LEASES, NETWORK_POLICIES
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import Controller, FakeApi, Manager, Request, Resource
from kube_agent_sandbox.extensions.claim import setup as claim_setup
from kube_agent_sandbox.extensions.idle import setup as idle_setup
from kube_agent_sandbox.extensions.template import setup as template_setup
from kube_agent_sandbox.extensions.warmpool import setup as warmpool_setup


def _manager() -> Manager:
    return Manager(FakeApi(default_namespace=NS), metrics_bind_address="0", health_bind_address="0")


def _only_controller(manager: Manager) -> Controller:
    (controller,) = manager.controllers
    return controller


OPTIONS = dataclasses.replace(
    ControllerOptions(extensions=True),
    sandbox_warm_pool_concurrent_workers=3,
    sandbox_claim_concurrent_workers=5,
)


@pytest.mark.parametrize(
    ("module", "primary", "owns", "watches", "workers"),
    [
        (
            warmpool_setup,
            SANDBOX_WARM_POOLS,
            [],
            [SANDBOX_TEMPLATES],
            OPTIONS.sandbox_warm_pool_concurrent_workers,
        ),
        (
            claim_setup,
            SANDBOX_CLAIMS,
            [SANDBOXES, NETWORK_POLICIES],
            [],
            OPTIONS.sandbox_claim_concurrent_workers,
        ),
        (
            template_setup,
            SANDBOX_TEMPLATES,
            [NETWORK_POLICIES],
            [NETWORK_POLICIES],
            OPTIONS.effective_template_workers,
        ),
        (idle_setup, SANDBOXES, [], [LEASES], idle_setup.WORKERS),
    ],
)
def test_each_setup_builds_the_same_controller(
    module: ModuleType,
    primary: Resource,
    owns: list[Resource],
    watches: list[Resource],
    workers: int,
) -> None:
    manager = _manager()
    module.setup(manager, OPTIONS, namespace=NS)
    controller = _only_controller(manager)
    assert controller.name == module.CONTROLLER_NAME
    assert controller.for_resource == primary
    assert [resource for resource, _ in controller.owns] == owns
    assert [resource for resource, _ in controller.watches] == watches
    assert controller.workers == workers
    assert controller._metrics is manager.metrics


async def test_a_warm_pool_member_event_queues_its_pool_after_the_member_delay() -> None:
    manager = _manager()
    warmpool_setup.setup(manager, ControllerOptions(extensions=True), namespace=NS)
    controller = _only_controller(manager)
    # the member handler is the last one on the Sandbox informer
    handler = manager.informer(SANDBOXES)._handlers[-1]
    assert handler.on_add is not None
    member = {
        "metadata": {
            "name": "m",
            "namespace": NS,
            "uid": "u",
            "ownerReferences": [
                {
                    "apiVersion": c.EXTENSIONS_API_VERSION,
                    "kind": c.KIND_SANDBOX_WARM_POOL,
                    "name": POOL,
                    "uid": "pool-uid",
                    "controller": True,
                }
            ],
        }
    }
    handler.on_add(member)
    assert len(controller.queue) == 0
    assert controller.queue.delayed() == frozenset({Request(NS, POOL)})
    deadline = controller.queue._waiting[Request(NS, POOL)][0]
    now = asyncio.get_running_loop().time()
    assert 0 < deadline - now <= warmpool_setup.MEMBER_EVENT_DELAY
    await controller.queue.shutdown_with_drain(0.1)
