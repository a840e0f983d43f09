"""Strict Sandbox-to-Pod mapping and write-behind Pod patches on a real kube-apiserver.

MultiplePods (docs/guides/upstream-differences.md): a second Pod controlled by the Sandbox blocks it
with ``Ready=False/MultiplePods`` and one ``events.k8s.io`` Warning, and it recovers when the extra
Pod is deleted. Write-behind (docs/guides/upstream-differences.md): with
``--sandbox-write-behind-window`` the Pod label drift is still repaired (later, in one patch).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.testing.nsapi import EVENTS, NamespaceApi

pytestmark = pytest.mark.integration

PAUSE = {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}


class Env(NamespaceApi):
    async def until_ready_reason(self, name: str, reason: str) -> Obj:
        async def probe() -> Obj | None:
            sandbox = await self.get(SANDBOXES, name)
            return sandbox if ready(sandbox).get("reason") == reason else None

        return await self.until(probe, f"{name} Ready reason {reason}")

    async def create_sandbox(self, name: str, template_labels: dict[str, str] | None = None) -> Obj:
        template: Obj = {"spec": PAUSE}
        if template_labels:
            template["metadata"] = {"labels": template_labels}
        return await self.create(
            SANDBOXES, {"metadata": {"name": name}, "spec": {"podTemplate": template}}
        )


@pytest.fixture
async def env(cluster: Any, namespace: str, sandbox_controller: object) -> AsyncIterator[Env]:
    async with Env.connect(cluster.kubeconfig, namespace) as e:
        yield e


def ready(sandbox: Obj | None) -> Obj:
    for cond in ((sandbox or {}).get("status") or {}).get("conditions") or ():
        if cond["type"] == "Ready":
            return dict(cond)
    return {}


class TestMultiplePods:
    async def test_extra_owned_pod_blocks_then_recovers(self, env: Env) -> None:
        await env.create_sandbox("twin")
        sandbox = await env.until_ready_reason("twin", "DependenciesReady")
        extra = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "twin-extra",
                "labels": {c.LABEL_SANDBOX_NAME_HASH: name_hash("twin")},
                "ownerReferences": [
                    {
                        "apiVersion": SANDBOXES.api_version,
                        "kind": "Sandbox",
                        "name": "twin",
                        "uid": sandbox["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": PAUSE,
        }
        await env.client.create(PODS, env.namespace, extra)
        blocked = await env.until_ready_reason("twin", "MultiplePods")
        assert ready(blocked)["message"] == (
            "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod"
        )
        scheduled = [
            cond for cond in blocked["status"]["conditions"] if cond["type"] == "PodScheduled"
        ]
        assert [(cond["status"], cond["reason"]) for cond in scheduled] == [
            ("Unknown", "PodSchedulingUnknown")
        ]
        assert "podIPs" not in blocked["status"]
        assert await env.get(PODS, "twin") is not None  # nothing deleted
        assert await env.get(PODS, "twin-extra") is not None

        async def warning() -> list[Obj] | None:
            listed = await env.client.list(EVENTS, env.namespace)
            found = [
                e
                for e in listed.get("items", [])
                if (e.get("regarding") or {}).get("name") == "twin"
                and e.get("reason") == "MultiplePods"
            ]
            return found or None

        [event] = await env.until(warning, "the MultiplePods Warning event")
        assert (event["type"], event["action"], event["reportingController"]) == (
            "Warning",
            "Reconciling",
            "sandbox-controller",
        )
        assert event["note"] == ready(blocked)["message"]

        await env.client.delete(PODS, env.namespace, "twin-extra")
        await env.until_ready_reason("twin", "DependenciesReady")


class TestWriteBehind:
    controller_options = ControllerOptions(sandbox_write_behind_window=0.5)

    async def test_label_drift_is_still_repaired(self, env: Env) -> None:
        await env.create_sandbox("lazy", template_labels={"app": "v1"})
        await env.until_ready_reason("lazy", "DependenciesReady")
        patch = {"spec": {"podTemplate": {"metadata": {"labels": {"app": "v2"}}}}}
        await env.client.patch(SANDBOXES, env.namespace, "lazy", patch)

        async def relabelled() -> Obj | None:
            pod = await env.get(PODS, "lazy")
            labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
            return pod if labels.get("app") == "v2" else None

        pod = await env.until(relabelled, "the deferred label patch")
        assert pod["metadata"]["annotations"][c.ANNOTATION_PROPAGATED_LABELS] == "app"
        sandbox = await env.get(SANDBOXES, "lazy")
        assert ready(sandbox)["status"] == "True"
