"""The PodScheduled condition against a real kube-apiserver, scheduler and kwok nodes.

Upstream v0.5.6 (computePodScheduledCondition) mirrors the Sandbox's Pod ``PodScheduled`` condition
into the Sandbox status: True/``PodScheduled`` once the scheduler binds the Pod, the scheduler's own
False/``Unschedulable`` (with its message) when no node fits, and no condition at all while a
suspended Sandbox has no Pod.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.testing.nsapi import NamespaceApi

pytestmark = pytest.mark.integration

NO_SUCH_NODE = {"kube-agent-sandbox.test/no-such-node": "true"}


class Env(NamespaceApi):
    """An admin client on the test's namespace, with polling helpers."""

    async def create_sandbox(self, name: str, **pod_spec: Any) -> Obj:
        spec = {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
        spec.update(pod_spec)
        return await self.create(
            SANDBOXES, {"metadata": {"name": name}, "spec": {"podTemplate": {"spec": spec}}}
        )

    async def until_sandbox(self, name: str, check: Callable[[Obj], bool], what: str) -> Obj:
        async def probe() -> Obj | None:
            sandbox = await self.get(SANDBOXES, name)
            return sandbox if sandbox is not None and check(sandbox) else None

        return await self.until(probe, f"{name}: {what}")


@pytest.fixture
async def env(cluster: Any, namespace: str, sandbox_controller: object) -> AsyncIterator[Env]:
    async with Env.connect(cluster.kubeconfig, namespace) as e:
        yield e


def conditions(obj: Obj) -> dict[str, Obj]:
    return {cond["type"]: cond for cond in (obj.get("status") or {}).get("conditions") or ()}


def types(obj: Obj) -> list[str]:
    return [cond["type"] for cond in (obj.get("status") or {}).get("conditions") or ()]


def has(type_: str, status: str, reason: str | None = None) -> Callable[[Obj], bool]:
    def check(obj: Obj) -> bool:
        cond = conditions(obj).get(type_)
        return (
            cond is not None
            and cond["status"] == status
            and (reason is None or cond["reason"] == reason)
        )

    return check


def pod_condition(pod: Obj, type_: str) -> Obj | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return None


class TestPodScheduledCondition:
    async def test_scheduled_pod_is_mirrored(self, env: Env) -> None:
        await env.create_sandbox("placed")
        sandbox = await env.until_sandbox("placed", has("Ready", "True"), "Ready=True")
        scheduled = conditions(sandbox)["PodScheduled"]
        assert {k: v for k, v in scheduled.items() if k != "lastTransitionTime"} == {
            "type": "PodScheduled",
            "status": "True",
            "observedGeneration": 1,
            "reason": "PodScheduled",
            "message": "",
        }
        assert types(sandbox) == ["Suspended", "PodScheduled", "Ready"]
        pod = await env.get(PODS, "placed")
        assert pod is not None
        assert sandbox["status"]["nodeName"] == pod["spec"]["nodeName"]

    async def test_unschedulable_pod_gives_false_unschedulable(self, env: Env) -> None:
        await env.create_sandbox("nowhere", nodeSelector=NO_SUCH_NODE)
        sandbox = await env.until_sandbox(
            "nowhere",
            has("PodScheduled", "False", "Unschedulable"),
            "PodScheduled=False/Unschedulable",
        )

        async def mirrors_the_pod() -> Obj | None:
            # The scheduler may reword its message on a retry: wait until both agree.
            current = await env.get(SANDBOXES, "nowhere")
            pod = await env.get(PODS, "nowhere")
            if current is None or pod is None:
                return None
            from_pod = pod_condition(pod, "PodScheduled") or {}
            mirrored = conditions(current).get("PodScheduled") or {}
            same = all(
                mirrored.get(key) == from_pod.get(key) for key in ("status", "reason", "message")
            )
            return current if same else None

        sandbox = await env.until(mirrors_the_pod, "the pod's PodScheduled copied verbatim")
        mirrored = conditions(sandbox)["PodScheduled"]
        assert (mirrored["status"], mirrored["reason"]) == ("False", "Unschedulable")
        assert "node" in mirrored["message"]  # e.g. "0/2 nodes are available: ..."
        ready = conditions(sandbox)["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "DependenciesNotReady")
        assert "nodeName" not in sandbox["status"]

    async def test_suspending_removes_it_and_resuming_appends_it(self, env: Env) -> None:
        await env.create_sandbox("pausing")
        await env.until_sandbox("pausing", has("PodScheduled", "True"), "PodScheduled=True")
        await env.client.patch(
            SANDBOXES, env.namespace, "pausing", {"spec": {"operatingMode": "Suspended"}}
        )
        suspended = await env.until_sandbox(
            "pausing", has("Suspended", "True", "PodTerminated"), "Suspended=True"
        )
        assert types(suspended) == ["Suspended", "Ready"]
        await env.client.patch(
            SANDBOXES, env.namespace, "pausing", {"spec": {"operatingMode": "Running"}}
        )
        resumed = await env.until_sandbox(
            "pausing", has("PodScheduled", "True", "PodScheduled"), "PodScheduled=True again"
        )
        assert types(resumed) == ["Suspended", "Ready", "PodScheduled"]
        assert (
            conditions(resumed)["PodScheduled"]["observedGeneration"]
            == (resumed["metadata"]["generation"])
        )

    async def test_suspending_an_unschedulable_sandbox_removes_it(self, env: Env) -> None:
        await env.create_sandbox("stuck", nodeSelector=NO_SUCH_NODE)
        await env.until_sandbox(
            "stuck", has("PodScheduled", "False", "Unschedulable"), "Unschedulable"
        )
        await env.client.patch(
            SANDBOXES, env.namespace, "stuck", {"spec": {"operatingMode": "Suspended"}}
        )
        suspended = await env.until_sandbox(
            "stuck", has("Suspended", "True", "PodTerminated"), "Suspended=True"
        )
        assert "PodScheduled" not in conditions(suspended)
