"""The SandboxWarmPool controller against a real kube-apiserver with kwok nodes.

The Sandbox controller and the warm pool controller run in-process under their generated RBAC
(``extensions_controller`` fixture); kwok makes the pods Running/Ready, so pool members become
Ready. kube-controller-manager runs in the local cluster, which lets a real
HorizontalPodAutoscaler read the pool's scale subresource.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import Obj, Resource
from kube_agent_sandbox.testing.nsapi import EVENTS, NamespaceApi

pytestmark = pytest.mark.integration

POLL = 0.2
WAIT = 120.0  # seconds: a generous bound for a loaded 2-core machine, never asserted on
HPAS = Resource(
    group="autoscaling",
    version="v2",
    plural="horizontalpodautoscalers",
    kind="HorizontalPodAutoscaler",
)
POOL_RESOURCE = f"{SANDBOX_WARM_POOLS.plural}.{SANDBOX_WARM_POOLS.group}"


def template_body(name: str, *, image: str = "registry.k8s.io/pause:3.10") -> Obj:
    return {
        "apiVersion": SANDBOX_TEMPLATES.api_version,
        "kind": SANDBOX_TEMPLATES.kind,
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {
                "metadata": {"labels": {"app": "warm"}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            }
        },
    }


def pool_body(name: str, *, template: str, replicas: int, strategy: str | None = None) -> Obj:
    spec: Obj = {"replicas": replicas, "sandboxTemplateRef": {"name": template}}
    if strategy is not None:
        spec["updateStrategy"] = {"type": strategy}
    return {
        "apiVersion": SANDBOX_WARM_POOLS.api_version,
        "kind": SANDBOX_WARM_POOLS.kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def is_ready(obj: Obj) -> bool:
    return any(
        cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in (obj.get("status") or {}).get("conditions") or ()
    )


def image_of(sandbox: Obj) -> str:
    return str(sandbox["spec"]["podTemplate"]["spec"]["containers"][0]["image"])


@dataclass
class Env(NamespaceApi):
    cluster: Any

    poll = POLL
    wait = WAIT

    async def members(self, pool: str) -> list[Obj]:
        selector = f"{c.LABEL_WARM_POOL_SANDBOX}={name_hash(pool)}"
        listed = await self.list(SANDBOXES, label_selector=selector)
        return [sb for sb in listed if not sb["metadata"].get("deletionTimestamp")]

    async def until_members(
        self, pool: str, count: int, *, ready: bool = True, check: Callable[[Obj], bool] = bool
    ) -> list[Obj]:
        """Wait until the pool has exactly ``count`` live members passing ``check``."""

        async def probe() -> list[Obj] | None:
            found = await self.members(pool)
            if len(found) != count or not all(check(sb) for sb in found):
                return None
            if ready and not all(is_ready(sb) for sb in found):
                return None
            return found or [{}]

        found = await self.until(probe, f"{count} members of {pool}")
        return [sb for sb in found if sb]

    async def until_status(self, pool: str, **want: Any) -> Obj:
        async def probe() -> Obj | None:
            obj = await self.get(SANDBOX_WARM_POOLS, pool)
            status = (obj or {}).get("status") or {}
            return status if all(status.get(k) == v for k, v in want.items()) else None

        return await self.until(probe, f"status of {pool} to be {want}")

    async def kubectl(self, *args: str) -> str:
        result = await asyncio.to_thread(self.cluster.kubectl, *args, "-n", self.namespace)
        return str(result.stdout)


@pytest.fixture
async def env(cluster: Any, namespace: str, extensions_controller: list[Any]) -> AsyncIterator[Env]:
    async with Env.connect(cluster.kubeconfig, namespace, cluster=cluster) as e:
        yield e


class TestWarmPool:
    extensions: ClassVar[tuple[str, ...]] = ("warmpool",)

    async def test_pool_fills_with_members_shaped_as_the_spec_and_scales_to_zero(
        self, env: Env
    ) -> None:
        await env.create(SANDBOX_TEMPLATES, template_body("tpl"))
        pool = await env.create(SANDBOX_WARM_POOLS, pool_body("pool", template="tpl", replicas=3))
        members = await env.until_members("pool", 3)
        for sb in members:
            m = sb["metadata"]
            assert re.fullmatch(r"pool-[a-z0-9]{5}", m["name"]), m["name"]
            # named by the pool like generateName would, its Pod's name recorded from the start
            assert m["annotations"][c.ANNOTATION_POD_NAME] == m["name"]
            labels = m["labels"]
            assert labels[c.LABEL_WARM_POOL_SANDBOX] == name_hash("pool")
            assert labels[c.LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash("tpl")
            assert labels[c.LABEL_LAUNCH_TYPE] == "warm"
            assert labels[c.LABEL_CREATED_BY] == "controller"
            assert labels[c.LABEL_SANDBOX_TEMPLATE_HASH]
            assert labels[c.LABEL_SANDBOX_POD_TEMPLATE_HASH]
            assert m["annotations"][c.ANNOTATION_SANDBOX_TEMPLATE_REF] == "tpl"
            (ref,) = m["ownerReferences"]
            assert ref == {
                "apiVersion": SANDBOX_WARM_POOLS.api_version,
                "kind": "SandboxWarmPool",
                "name": "pool",
                "uid": pool["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
            pod_meta = sb["spec"]["podTemplate"]["metadata"]
            assert pod_meta["labels"]["app"] == "warm"
            assert pod_meta["labels"][c.LABEL_WARM_POOL_SANDBOX] == name_hash("pool")
            assert pod_meta["annotations"] == {c.ANNOTATION_SAFE_TO_EVICT: "true"}
            pod_spec = sb["spec"]["podTemplate"]["spec"]
            assert pod_spec["automountServiceAccountToken"] is False
            assert pod_spec["dnsPolicy"] == "None"
        selector = f"{c.LABEL_WARM_POOL_SANDBOX}={name_hash('pool')}"
        await env.until_status("pool", replicas=3, readyReplicas=3, selector=selector)
        # converged: no further writes (a status patch that changes nothing is never sent)
        settled = await env.get(SANDBOX_WARM_POOLS, "pool")
        await asyncio.sleep(3)
        again = await env.get(SANDBOX_WARM_POOLS, "pool")
        assert settled is not None
        assert again is not None
        assert again["metadata"]["resourceVersion"] == settled["metadata"]["resourceVersion"]
        assert len(await env.members("pool")) == 3

        await env.patch(SANDBOX_WARM_POOLS, "pool", {"spec": {"replicas": 0}})
        await env.until_members("pool", 0)
        status = await env.until_status("pool", replicas=None, readyReplicas=None)
        assert status["selector"] == selector

    async def test_kubectl_scale_and_an_hpa_use_the_scale_subresource(self, env: Env) -> None:
        await env.create(SANDBOX_TEMPLATES, template_body("tpl"))
        await env.create(SANDBOX_WARM_POOLS, pool_body("pool", template="tpl", replicas=1))
        await env.until_members("pool", 1)
        await env.kubectl("scale", f"{POOL_RESOURCE}/pool", "--replicas=4")
        pool = await env.get(SANDBOX_WARM_POOLS, "pool")
        assert pool is not None
        assert pool["spec"]["replicas"] == 4
        await env.until_members("pool", 4)
        await env.until_status("pool", replicas=4, readyReplicas=4)
        scale = await env.kubectl("get", "--raw", scale_path(env.namespace, "pool"))
        assert '"replicas":4' in scale.replace(" ", "")
        assert name_hash("pool") in scale

        await env.create(
            HPAS,
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "pool-hpa"},
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": SANDBOX_WARM_POOLS.api_version,
                        "kind": "SandboxWarmPool",
                        "name": "pool",
                    },
                    "minReplicas": 1,
                    "maxReplicas": 6,
                    "metrics": [
                        {
                            "type": "Resource",
                            "resource": {
                                "name": "cpu",
                                "target": {"type": "Utilization", "averageUtilization": 50},
                            },
                        }
                    ],
                },
            },
        )

        async def able_to_scale() -> Obj | None:
            hpa = await env.get(HPAS, "pool-hpa")
            for cond in ((hpa or {}).get("status") or {}).get("conditions") or ():
                if cond.get("type") == "AbleToScale":
                    return cond
            return None

        cond = await env.until(able_to_scale, "the HPA's AbleToScale condition")
        assert cond["status"] == "True", cond
        assert cond["reason"] == "SucceededGetScale", cond
        hpa = await env.get(HPAS, "pool-hpa")
        assert hpa is not None
        assert hpa["status"].get("currentReplicas") == 4

    async def test_recreate_replaces_members_when_the_template_changes(self, env: Env) -> None:
        await env.create(SANDBOX_TEMPLATES, template_body("tpl"))
        await env.create(
            SANDBOX_WARM_POOLS,
            pool_body("pool", template="tpl", replicas=2, strategy="Recreate"),
        )
        old = {sb["metadata"]["name"] for sb in await env.until_members("pool", 2)}
        new_image = "registry.k8s.io/pause:3.9"
        await env.patch(SANDBOX_TEMPLATES, "tpl", template_body("tpl", image=new_image))
        fresh = await env.until_members(
            "pool",
            2,
            check=lambda sb: image_of(sb) == new_image and sb["metadata"]["name"] not in old,
        )
        assert len(fresh) == 2

    async def test_on_replenish_keeps_members_and_replaces_deleted_ones_from_the_new_template(
        self, env: Env
    ) -> None:
        await env.create(SANDBOX_TEMPLATES, template_body("tpl"))
        await env.create(
            SANDBOX_WARM_POOLS,
            pool_body("pool", template="tpl", replicas=2, strategy="OnReplenish"),
        )
        members = await env.until_members("pool", 2)
        kept, victim = (sb["metadata"]["name"] for sb in members)
        new_image = "registry.k8s.io/pause:3.9"
        await env.patch(SANDBOX_TEMPLATES, "tpl", template_body("tpl", image=new_image))
        await env.client.delete(SANDBOXES, env.namespace, victim)
        after = await env.until_members(
            "pool", 2, check=lambda sb: sb["metadata"]["name"] != victim
        )
        by_name = {sb["metadata"]["name"]: sb for sb in after}
        assert kept in by_name
        assert image_of(by_name[kept]) != new_image  # the stale member stays under OnReplenish
        (replacement,) = (sb for name, sb in by_name.items() if name != kept)
        assert image_of(replacement) == new_image

    async def test_a_missing_template_creates_nothing_until_it_appears(self, env: Env) -> None:
        await env.create(SANDBOX_WARM_POOLS, pool_body("pool", template="later", replicas=2))
        selector = f"{c.LABEL_WARM_POOL_SANDBOX}={name_hash('pool')}"
        status = await env.until_status("pool", selector=selector)
        assert "replicas" not in status
        assert await env.members("pool") == []
        await env.create(SANDBOX_TEMPLATES, template_body("later"))
        await env.until_members("pool", 2)
        await env.until_status("pool", replicas=2, readyReplicas=2)


def scale_path(namespace: str, name: str) -> str:
    return (
        f"/apis/{SANDBOX_WARM_POOLS.group}/{SANDBOX_WARM_POOLS.version}/namespaces/{namespace}/"
        f"{SANDBOX_WARM_POOLS.plural}/{name}/scale"
    )


async def pool_events(env: Env, pool: str) -> list[tuple[str, str, str, str]]:
    listed = await env.client.list(EVENTS, env.namespace)
    return [
        (e.get("type", ""), e.get("reason", ""), e.get("action", ""), e.get("note", ""))
        for e in sorted(listed.get("items", []), key=lambda e: e["metadata"]["creationTimestamp"])
        if (e.get("regarding") or {}).get("kind") == "SandboxWarmPool"
        and (e.get("regarding") or {}).get("name") == pool
        and e.get("reportingController") == "sandboxwarmpool-controller"
    ]


class TestUnschedulableMembers:
    extensions: ClassVar[tuple[str, ...]] = ("warmpool",)
    controller_options: ClassVar[ControllerOptions] = ControllerOptions(
        extensions=True,
        sandbox_warm_pool_readiness_grace_period=2.0,
        sandbox_warm_pool_unschedulable_recheck_interval=1.0,
    )

    async def test_unschedulable_members_are_held_and_reported(self, env: Env) -> None:
        nowhere = template_body("tpl")
        nowhere["spec"]["podTemplate"]["spec"]["nodeSelector"] = {"warmpool-test": "nowhere"}
        await env.create(SANDBOX_TEMPLATES, nowhere)
        await env.create(SANDBOX_WARM_POOLS, pool_body("pool", template="tpl", replicas=1))
        (held,) = await env.until_members("pool", 1, ready=False)
        name = held["metadata"]["name"]

        async def warned() -> list[tuple[str, str, str, str]] | None:
            found = await pool_events(env, "pool")
            return found or None

        events = await env.until(warned, "a WarmPoolNotProgressing event")
        assert events[0] == (
            "Warning",
            "WarmPoolNotProgressing",
            "Reconciling",
            "1/1 sandboxes are unschedulable past the 2s readiness grace period; holding them "
            "instead of replacing (replacements would be equally unschedulable)",
        )
        await asyncio.sleep(5)  # several grace periods and re-checks: still held, not churned
        (still,) = await env.members("pool")
        assert still["metadata"]["name"] == name
        assert len(await pool_events(env, "pool")) == 1  # emitted once, on the transition

        # capacity "frees up": the template becomes schedulable and the held member goes
        await env.patch(
            SANDBOX_TEMPLATES, "tpl", {"spec": {"podTemplate": {"spec": {"nodeSelector": None}}}}
        )
        await env.client.delete(SANDBOXES, env.namespace, name)
        await env.until_members("pool", 1, check=lambda sb: sb["metadata"]["name"] != name)

        async def recovered() -> list[tuple[str, str, str, str]] | None:
            found = await pool_events(env, "pool")
            return found if len(found) >= 2 else None

        events = await env.until(recovered, "a WarmPoolProgressing event")
        assert events[1] == (
            "Normal",
            "WarmPoolProgressing",
            "Reconciling",
            "Warm pool is progressing again",
        )
