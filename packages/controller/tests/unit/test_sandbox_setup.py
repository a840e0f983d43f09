"""The Sandbox controller wired into a real Manager over the runtime's in-memory API server.

Checks the wiring of ``setup`` (informers, index, predicates, owned-object mapping, metrics
collector) rather than reconcile rules, which the other ``test_sandbox_*`` files cover.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from sandbox_fakes import make_sandbox

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, SERVICES
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import FakeApi, Manager, Obj
from kube_agent_sandbox.controller.sandbox.pod import POD_NAME_HASH_INDEX
from kube_agent_sandbox.controller.sandbox.setup import setup
from kube_agent_sandbox.testing.waiting import eventually

NS = "default"


@pytest.fixture
async def running() -> AsyncIterator[tuple[FakeApi, Manager]]:
    api = FakeApi()
    manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
    setup(manager, ControllerOptions(cluster_domain="test.local", sandbox_concurrent_workers=2))
    task = asyncio.create_task(manager.run())
    await asyncio.wait_for(manager.controllers_started.wait(), 10)
    try:
        yield api, manager
    finally:
        manager.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


def _get(api: FakeApi, resource: object, name: str) -> Obj | None:
    for obj in api.objects(resource):  # type: ignore[arg-type]
        if obj["metadata"]["name"] == name:
            return obj
    return None


def _ready_reason(api: FakeApi, name: str) -> str | None:
    sandbox = _get(api, SANDBOXES, name)
    for cond in ((sandbox or {}).get("status") or {}).get("conditions") or ():
        if cond["type"] == "Ready":
            return str(cond["reason"])
    return None


class TestSetup:
    async def test_sandbox_to_ready_through_the_manager(
        self, running: tuple[FakeApi, Manager]
    ) -> None:
        api, manager = running
        await api.create(SANDBOXES, NS, make_sandbox("sb", service=True))
        await eventually(lambda: _get(api, PODS, "sb") is not None)
        await eventually(lambda: _get(api, SERVICES, "sb") is not None)

        # A kubelet marks the pod ready: the owned-pod watch must trigger a reconcile.
        status = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "podIPs": [{"ip": "10.0.0.9"}],
        }
        await api.patch(PODS, NS, "sb", {"status": status}, subresource="status")
        await eventually(lambda: _ready_reason(api, "sb") == "DependenciesReady")
        sandbox = _get(api, SANDBOXES, "sb")
        assert sandbox is not None
        assert sandbox["status"]["serviceFQDN"] == "sb.default.svc.test.local"
        assert sandbox["status"]["podIPs"] == ["10.0.0.9"]

        # The pod cache is transformed and indexed.
        pods = manager.informer(PODS)
        cached = pods.get(NS, "sb")
        assert cached is not None
        assert "containers" not in cached["spec"]
        indexed = pods.by_index(POD_NAME_HASH_INDEX, f"{NS}/{name_hash('sb')}")
        assert [p["metadata"]["name"] for p in indexed] == ["sb"]

        # The metric counts the sandbox.
        value = manager.registry.get_sample_value(
            "agent_sandboxes",
            {
                "namespace": NS,
                "ready_condition": "true",
                "expired": "false",
                "launch_type": "cold",
                "sandbox_template": "unknown",
                "owned_by": "None",
                "created_by": "unknown",
            },
        )
        assert value == 1.0

    async def test_deleted_pod_is_recreated(self, running: tuple[FakeApi, Manager]) -> None:
        api, _ = running
        await api.create(SANDBOXES, NS, make_sandbox("sb"))
        await eventually(lambda: _get(api, PODS, "sb") is not None)
        first_uid = _get(api, PODS, "sb")["metadata"]["uid"]  # type: ignore[index]
        await api.delete(PODS, NS, "sb")
        await eventually(
            lambda: (
                (_get(api, PODS, "sb") or {}).get("metadata", {}).get("uid")
                not in (None, first_uid)
            )
        )
        pod = _get(api, PODS, "sb")
        assert pod is not None
        assert pod["metadata"]["labels"][c.LABEL_SANDBOX_NAME_HASH]
