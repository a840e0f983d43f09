"""Many Sandboxes at once against a real kube-apiserver with kwok nodes (upstream's e2e scenarios).

Upstream's TestParallelSandboxes restarts the controller with sandbox workers 10, claim workers
100, pool workers 10, qps -1 and burst 10, then creates 20 Sandboxes concurrently and expects
all of them to become Ready. Here the controller runs in-process as a ServiceAccount bound to
the generated ``agent-sandbox-controller`` ClusterRole (as in ``test_sandbox_controller.py``),
with those options; its caches are scoped to the test's namespace. The test also checks that
each Sandbox owns exactly one Pod, and that deleting all Sandboxes at once lets the garbage
collector remove every Pod.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as k8s

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import ApiClient, Obj, load_kubeconfig
from kube_agent_sandbox.testing.waiting import (
    ObjectRef,
    wait_for_condition,
    wait_for_deletion,
)

pytestmark = pytest.mark.integration

COUNT = 20
WAIT = 180.0  # seconds per object: generous for a loaded 2-core machine, never asserted on
# Upstream restarts the controller with exactly these flags for its parallel tests.
PARALLEL_OPTIONS = ControllerOptions(
    sandbox_concurrent_workers=10,
    sandbox_claim_concurrent_workers=100,
    sandbox_warm_pool_concurrent_workers=10,
    kube_api_qps=-1.0,
    kube_api_burst=10,
)


@dataclass
class Env:
    """An admin async client (for concurrent writes), a sync one (for watches), a namespace."""

    client: ApiClient
    watcher: k8s.ApiClient
    namespace: str

    def sandbox_ref(self, name: str) -> ObjectRef:
        return ObjectRef(SANDBOXES.api_version, "Sandbox", name, self.namespace)

    def pod_ref(self, name: str) -> ObjectRef:
        return ObjectRef("v1", "Pod", name, self.namespace)

    async def pods(self) -> list[Obj]:
        listed = await self.client.list(PODS, self.namespace)
        return list(listed.get("items") or [])


@pytest.fixture
async def env(cluster: Any, namespace: str, sandbox_controller: object) -> AsyncIterator[Env]:
    async with ApiClient(load_kubeconfig(str(cluster.kubeconfig))) as admin:
        yield Env(admin, cluster.api_client(), namespace)


def _pause_sandbox(name: str) -> Obj:
    return {
        "apiVersion": SANDBOXES.api_version,
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
            }
        },
    }


def _controller_ref(sandbox: Obj) -> Obj:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "name": sandbox["metadata"]["name"],
        "uid": sandbox["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _wait_all_ready(env: Env, names: list[str]) -> dict[str, Obj]:
    """Watch each Sandbox until Ready is True (all were created together, so order is moot)."""
    return {
        name: wait_for_condition(env.watcher, env.sandbox_ref(name), "Ready", timeout=WAIT)
        for name in names
    }


def _wait_all_gone(env: Env, refs: list[ObjectRef]) -> None:
    for ref in refs:
        wait_for_deletion(env.watcher, ref, timeout=WAIT)


class TestParallelSandboxes:
    controller_options = PARALLEL_OPTIONS

    async def test_concurrent_sandboxes_all_become_ready_and_are_cleaned_up(self, env: Env) -> None:
        names = [f"parallel-{i}" for i in range(COUNT)]
        created = await asyncio.gather(
            *(env.client.create(SANDBOXES, env.namespace, _pause_sandbox(n)) for n in names)
        )
        assert sorted(s["metadata"]["name"] for s in created) == sorted(names)

        ready = await asyncio.to_thread(_wait_all_ready, env, names)
        for name, sandbox in ready.items():
            ready_cond = {cond["type"]: cond for cond in sandbox["status"]["conditions"]}["Ready"]
            assert ready_cond["reason"] == "DependenciesReady", name
            assert ready_cond["message"] == "Pod is Ready", name
            assert sandbox["status"]["selector"] == (
                f"{c.LABEL_SANDBOX_NAME_HASH}={name_hash(name)}"
            )
            assert sandbox["status"]["podIPs"], name

        # Exactly one Pod per Sandbox, named after it, controlled by it, and no strays.
        pods = await env.pods()
        assert len(pods) == COUNT, sorted(p["metadata"]["name"] for p in pods)
        by_owner: dict[str, list[Obj]] = {}
        for pod in pods:
            refs = pod["metadata"].get("ownerReferences") or []
            assert len(refs) == 1, pod["metadata"]["name"]
            by_owner.setdefault(refs[0]["uid"], []).append(pod)
        for name, sandbox in ready.items():
            owned = by_owner.get(sandbox["metadata"]["uid"], [])
            assert len(owned) == 1, f"{name} owns {len(owned)} pods"
            pod = owned[0]
            assert pod["metadata"]["name"] == name
            assert pod["metadata"]["ownerReferences"] == [_controller_ref(sandbox)]
            assert pod["metadata"]["labels"][c.LABEL_SANDBOX_NAME_HASH] == name_hash(name)

        # Delete every Sandbox at once: the garbage collector removes their Pods.
        await asyncio.gather(*(env.client.delete(SANDBOXES, env.namespace, n) for n in names))
        await asyncio.to_thread(
            _wait_all_gone,
            env,
            [env.sandbox_ref(n) for n in names] + [env.pod_ref(n) for n in names],
        )
        assert await env.pods() == []
