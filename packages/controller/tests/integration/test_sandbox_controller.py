"""The Sandbox controller against a real kube-apiserver with kwok nodes (upstream's e2e scenarios).

The controller runs in-process (Manager + ``sandbox.setup``) as a ServiceAccount bound to the
generated ``agent-sandbox-controller`` ClusterRole, so its RBAC is exercised too. Its caches are
scoped to the test's namespace because the session cluster is shared. kwok marks scheduled
pods Running/Ready with an IP; no container runs, so only the kwok-runnable scenarios of the
upstream e2e suite are here.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, PVCS, SERVICES
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import ApiError, Obj
from kube_agent_sandbox.testing.nsapi import NamespaceApi

pytestmark = pytest.mark.integration


class Env(NamespaceApi):
    """What a test gets: an admin client, its namespace and helpers."""

    async def create_sandbox(self, name: str, spec: Obj) -> Obj:
        return await self.create(SANDBOXES, {"metadata": {"name": name}, "spec": spec})

    async def sandbox(self, name: str) -> Obj:
        found = await self.get(SANDBOXES, name)
        assert found is not None, f"sandbox {name} is gone"
        return found

    async def until_condition(
        self, name: str, type_: str, *, status: str | None = None, reason: str | None = None
    ) -> Obj:
        async def probe() -> Obj | None:
            sandbox = await self.get(SANDBOXES, name)
            cond = conditions(sandbox).get(type_)
            if cond is None:
                return None
            if status is not None and cond["status"] != status:
                return None
            if reason is not None and cond["reason"] != reason:
                return None
            return sandbox

        return await self.until(probe, f"{name} {type_} status={status} reason={reason}")

    async def events_for(self, name: str) -> list[Obj]:
        return await self.events_regarding("Sandbox", name)


@pytest.fixture
async def env(cluster: Any, namespace: str, sandbox_controller: object) -> AsyncIterator[Env]:
    async with Env.connect(cluster.kubeconfig, namespace) as e:
        yield e


def conditions(obj: Obj | None) -> dict[str, Obj]:
    return {
        cond["type"]: cond for cond in ((obj or {}).get("status") or {}).get("conditions") or ()
    }


def without_ltt(obj: Obj) -> list[Obj]:
    return [
        {k: v for k, v in cond.items() if k != "lastTransitionTime"}
        for cond in obj["status"]["conditions"]
    ]


def pause_spec(**extra: Any) -> Obj:
    spec: Obj = {
        "podTemplate": {
            "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
        }
    }
    spec.update(extra)
    return spec


def _cond(type_: str, status: str, reason: str, message: str, gen: int = 1) -> Obj:
    return {
        "type": type_,
        "status": status,
        "observedGeneration": gen,
        "reason": reason,
        "message": message,
    }


async def _next_second() -> None:
    """Let the wall clock move past the current second (condition times have 1 s resolution)."""
    await asyncio.sleep(1.05)


async def _ready_sandbox(env: Env, name: str, **extra: Any) -> Obj:
    await env.create_sandbox(name, pause_spec(**extra))
    return await env.until_condition(name, "Ready", status="True")


def _sandbox_owner(sandbox: Obj) -> Obj:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "name": sandbox["metadata"]["name"],
        "uid": sandbox["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


class TestSandboxController:
    async def test_simple_sandbox(self, env: Env) -> None:
        spec = pause_spec(service=True)
        spec["podTemplate"]["metadata"] = {
            "labels": {"test-label-key": "val-2"},
            "annotations": {"test-anno-key": "val-1"},
        }
        await env.create_sandbox("my-sandbox", spec)
        sandbox = await env.until_condition("my-sandbox", "Ready", status="True")
        status = {
            k: v
            for k, v in sandbox["status"].items()
            if k not in ("podIPs", "nodeName", "conditions")
        }
        assert status == {
            "service": "my-sandbox",
            "serviceFQDN": f"my-sandbox.{env.namespace}.svc.cluster.local",
            "selector": f"{c.LABEL_SANDBOX_NAME_HASH}={name_hash('my-sandbox')}",
        }
        assert without_ltt(sandbox) == [
            _cond("Suspended", "False", "NotSuspended", "Sandbox is not suspended"),
            _cond("PodScheduled", "True", "PodScheduled", ""),
            _cond("Ready", "True", "DependenciesReady", "Pod is Ready; Service Exists"),
        ]
        assert sandbox["status"]["podIPs"]
        pod = await env.get(PODS, "my-sandbox")
        assert pod is not None
        assert pod["metadata"]["labels"]["test-label-key"] == "val-2"
        assert pod["metadata"]["annotations"]["test-anno-key"] == "val-1"
        assert pod["metadata"]["ownerReferences"] == [_sandbox_owner(sandbox)]
        assert pod["metadata"]["annotations"][c.ANNOTATION_PROPAGATED_LABELS] == "test-label-key"
        assert any(
            entry.get("manager") == "sandbox-controller"
            for entry in pod["metadata"].get("managedFields") or ()
        )
        svc = await env.get(SERVICES, "my-sandbox")
        assert svc is not None
        assert svc["metadata"]["ownerReferences"] == [_sandbox_owner(sandbox)]
        assert svc["spec"]["clusterIP"] == "None"
        assert svc["spec"]["selector"] == {c.LABEL_SANDBOX_NAME_HASH: name_hash("my-sandbox")}
        assert sandbox["metadata"]["annotations"][c.ANNOTATION_POD_NAME] == "my-sandbox"

    async def test_suspend_resume_cycles(self, env: Env) -> None:
        sandbox = await _ready_sandbox(env, "cycle", service=True)
        selector = sandbox["status"]["selector"]
        ltt = conditions(sandbox)["Suspended"]["lastTransitionTime"]
        pod_uid = (await env.get(PODS, "cycle"))["metadata"]["uid"]  # type: ignore[index]
        for _ in range(2):
            await _next_second()
            await env.patch(SANDBOXES, "cycle", {"spec": {"operatingMode": "Suspended"}})
            suspended = await env.until_condition("cycle", "Suspended", status="True")
            gen = suspended["metadata"]["generation"]
            assert without_ltt(suspended) == [
                _cond(
                    "Suspended",
                    "True",
                    "PodTerminated",
                    "Pod has been terminated. Sandbox is suspended",
                    gen,
                ),
                _cond("Ready", "False", "SandboxSuspended", "Sandbox is suspended", gen),
            ]
            assert suspended["status"]["service"] == "cycle"
            assert suspended["status"]["selector"] == selector
            assert "podIPs" not in suspended["status"]
            assert await env.get(PODS, "cycle") is None
            assert await env.get(SERVICES, "cycle") is not None
            new_ltt = conditions(suspended)["Suspended"]["lastTransitionTime"]
            assert new_ltt > ltt
            ltt = new_ltt

            await _next_second()
            await env.patch(SANDBOXES, "cycle", {"spec": {"operatingMode": "Running"}})
            resumed = await env.until_condition("cycle", "Ready", status="True")
            suspended_cond = conditions(resumed)["Suspended"]
            assert (suspended_cond["status"], suspended_cond["reason"]) == ("False", "NotSuspended")
            assert suspended_cond["lastTransitionTime"] > ltt
            ltt = suspended_cond["lastTransitionTime"]
            pod = await env.get(PODS, "cycle")
            assert pod is not None
            assert pod["metadata"]["uid"] != pod_uid
            pod_uid = pod["metadata"]["uid"]

    async def test_suspension_with_terminating_pod(self, env: Env) -> None:
        sandbox = await _ready_sandbox(env, "hold")
        not_suspended_ltt = conditions(sandbox)["Suspended"]["lastTransitionTime"]
        await env.patch(PODS, "hold", {"metadata": {"finalizers": ["agents.x-k8s.io/test-hold"]}})
        await _next_second()
        await env.patch(SANDBOXES, "hold", {"spec": {"operatingMode": "Suspended"}})
        terminating = await env.until_condition("hold", "Suspended", reason="PodTerminating")
        cond = conditions(terminating)["Suspended"]
        assert (cond["status"], cond["lastTransitionTime"]) == ("False", not_suspended_ltt)
        assert conditions(terminating)["Ready"]["message"] == "Sandbox is suspending"
        pod = await env.get(PODS, "hold")
        assert pod is not None
        assert pod["metadata"].get("deletionTimestamp")

        await _next_second()
        await env.patch(PODS, "hold", {"metadata": {"finalizers": None}})
        done = await env.until_condition("hold", "Suspended", status="True", reason="PodTerminated")
        assert conditions(done)["Suspended"]["lastTransitionTime"] > not_suspended_ltt
        assert await env.get(PODS, "hold") is None

    async def test_pod_deletion_keeps_suspended_false(self, env: Env) -> None:
        sandbox = await _ready_sandbox(env, "crash")
        before = conditions(sandbox)["Suspended"]
        old_uid = (await env.get(PODS, "crash"))["metadata"]["uid"]  # type: ignore[index]
        await env.client.delete(PODS, env.namespace, "crash")

        async def replaced_and_ready() -> Obj | None:
            pod = await env.get(PODS, "crash")
            if pod is None or pod["metadata"]["uid"] == old_uid:
                return None
            current = await env.sandbox("crash")
            return current if conditions(current)["Ready"]["status"] == "True" else None

        after = await env.until(replaced_and_ready, "a replacement pod and Ready again")
        assert conditions(after)["Suspended"] == before

    async def test_suspension_blocked_by_unowned_pod(self, env: Env) -> None:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "squatter"},
            "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
        }
        await env.client.create(PODS, env.namespace, pod)
        await env.create_sandbox("squatter", pause_spec(service=True, operatingMode="Suspended"))
        sandbox = await env.until_condition("squatter", "Suspended", reason="PodNotOwned")
        assert without_ltt(sandbox) == [
            _cond(
                "Suspended",
                "False",
                "PodNotOwned",
                "Refused to delete pod because it is not owned by this sandbox",
            ),
            _cond("Ready", "False", "SandboxSuspended", "Sandbox is suspending"),
        ]
        assert sandbox["status"]["service"] == "squatter"
        assert sandbox["status"]["serviceFQDN"] == f"squatter.{env.namespace}.svc.cluster.local"
        assert (
            sandbox["status"]["selector"] == f"{c.LABEL_SANDBOX_NAME_HASH}={name_hash('squatter')}"
        )
        survivor = await env.get(PODS, "squatter")
        assert survivor is not None
        assert not survivor["metadata"].get("ownerReferences")
        assert not survivor["metadata"].get("deletionTimestamp")

    async def test_shutdown_time_retain(self, env: Env) -> None:
        await _ready_sandbox(env, "expiring", service=True)
        deadline = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=4)).replace(microsecond=0)
        stamp = deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
        await env.patch(SANDBOXES, "expiring", {"spec": {"shutdownTime": stamp}})
        expired = await env.until_condition("expiring", "Ready", reason="SandboxExpired")
        await env.until_gone(PODS, "expiring")
        await env.until_gone(SERVICES, "expiring")

        async def status_reset() -> Obj | None:
            current = await env.sandbox("expiring")
            return current if set(current["status"]) == {"conditions"} else None

        expired = await env.until(status_reset, "the expired status to be reset")
        assert without_ltt(expired) == [
            _cond("Suspended", "False", "NotSuspended", "Sandbox is not suspended", 2),
            _cond("Ready", "False", "SandboxExpired", "Sandbox has expired", 2),
        ]
        assert (
            conditions(expired)["Ready"]["lastTransitionTime"] >= stamp
        )  # not before shutdownTime

    async def test_shutdown_time_delete(self, env: Env) -> None:
        await _ready_sandbox(env, "doomed")
        past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        await env.patch(
            SANDBOXES, "doomed", {"spec": {"shutdownTime": past, "shutdownPolicy": "Delete"}}
        )
        await env.until_gone(SANDBOXES, "doomed")
        await env.until_gone(PODS, "doomed")

    async def test_volume_claim_templates_are_immutable(self, env: Env) -> None:
        vct = {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        await env.create_sandbox("vct", pause_spec(volumeClaimTemplates=[vct]))
        pvc = await env.until(lambda: env.get(PVCS, "data-vct"), "the PVC")
        sandbox = await env.sandbox("vct")
        assert pvc["metadata"]["ownerReferences"] == [_sandbox_owner(sandbox)]
        assert pvc["metadata"]["labels"] == {c.LABEL_SANDBOX_NAME_HASH: name_hash("vct")}
        changed = copy.deepcopy(vct)
        changed["spec"]["resources"]["requests"]["storage"] = "2Gi"
        for patch in (
            {"spec": {"volumeClaimTemplates": [changed]}},
            {"spec": {"volumeClaimTemplates": None}},
        ):
            with pytest.raises(ApiError) as caught:
                await env.patch(SANDBOXES, "vct", patch)
            assert caught.value.status == 422
            assert "volumeClaimTemplates is immutable" in caught.value.message
        await env.create_sandbox("no-vct", pause_spec())
        with pytest.raises(ApiError) as caught:
            await env.patch(SANDBOXES, "no-vct", {"spec": {"volumeClaimTemplates": [vct]}})
        assert "volumeClaimTemplates is immutable" in caught.value.message

    async def test_invalid_pod_template_is_reported_without_hot_loop(self, env: Env) -> None:
        spec = {"podTemplate": {"spec": {"containers": [{"name": "no-image"}]}}}
        await env.create_sandbox("broken", spec)
        sandbox = await env.until_condition("broken", "Ready", reason="ReconcilerError")
        message = conditions(sandbox)["Ready"]["message"]
        assert message.startswith("Error seen: ")
        assert "image" in message
        assert "Required value" in message
        events = await env.until(lambda: env.events_for("broken"), "a Warning event")
        assert [(e["type"], e["reason"]) for e in events] == [("Warning", "ReconcilerError")]
        rv = sandbox["metadata"]["resourceVersion"]
        await asyncio.sleep(2)  # the slow requeue must not rewrite the status meanwhile
        assert (await env.sandbox("broken"))["metadata"]["resourceVersion"] == rv
        assert await env.get(PODS, "broken") is None

    async def test_service_name_too_long(self, env: Env) -> None:
        name = "s" * 70
        await env.create_sandbox(name, pause_spec(service=True))
        sandbox = await env.until_condition(name, "Ready", reason="ReconcilerError")
        assert "must be no more than 63 characters" in conditions(sandbox)["Ready"]["message"]
        assert await env.get(PODS, name) is not None

    async def test_multiple_owned_pods_fail_closed(self, env: Env) -> None:
        sandbox = await _ready_sandbox(env, "twin")
        extra = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "twin-extra",
                "labels": {c.LABEL_SANDBOX_NAME_HASH: name_hash("twin")},
                "ownerReferences": [_sandbox_owner(sandbox)],
            },
            "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
        }
        await env.client.create(PODS, env.namespace, extra)
        failed = await env.until_condition("twin", "Ready", reason="MultiplePods")
        assert conditions(failed)["Ready"]["message"] == (
            "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod"
        )
        events = await env.until(lambda: env.events_for("twin"), "a Warning event")
        assert [(e["type"], e["reason"], e["action"]) for e in events] == [
            ("Warning", "MultiplePods", "Reconciling")
        ]
        await env.client.delete(PODS, env.namespace, "twin-extra")
        await env.until_condition("twin", "Ready", status="True")


class TestLabelScopedCaches:
    """``--cache-label-selectors``: Pod and Service caches only see labelled objects."""

    controller_options = ControllerOptions(cache_label_selectors=True)

    async def test_sandbox_becomes_ready(self, env: Env) -> None:
        sandbox = await _ready_sandbox(env, "scoped", service=True)
        assert conditions(sandbox)["Ready"]["message"] == "Pod is Ready; Service Exists"

    async def test_adopts_unlabelled_adoptable_service_it_cannot_cache(self, env: Env) -> None:
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "legacy", "labels": {c.LABEL_ADOPTABLE: "true"}},
            "spec": {"clusterIP": "None", "selector": {"app": "old"}},
        }
        await env.client.create(SERVICES, env.namespace, service)
        sandbox = await _ready_sandbox(env, "legacy", service=True)
        adopted = await env.get(SERVICES, "legacy")
        assert adopted is not None
        assert adopted["metadata"]["ownerReferences"] == [_sandbox_owner(sandbox)]
        assert adopted["spec"]["selector"] == {c.LABEL_SANDBOX_NAME_HASH: name_hash("legacy")}
