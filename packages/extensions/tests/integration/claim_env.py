"""Helpers of the SandboxClaim integration tests: objects as users and upstream's pool write them.

Not a test module: the ``test_claim_*`` modules import it (``conftest.py`` puts this directory
on ``sys.path``). Warm pool members are written here exactly as upstream's warm pool
controller writes them (buildSandboxCR), with Go-computed hash labels this project cannot
reproduce, so serving them proves that objects written by upstream are served by ours.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.testing.nsapi import NamespaceApi

POLL = 0.1
WAIT = 180.0  # seconds: a generous bound for a loaded 2-core machine, never asserted on
PAUSE = "registry.k8s.io/pause:3.10"
GO_BLUEPRINT_HASH = "9c7f3a21"  # what upstream's pool would write; never equal to ours
GO_POD_TEMPLATE_HASH = "1b2c3d4e"


def pod_template(**extra: Any) -> Obj:
    """A pause-container pod template."""
    spec: Obj = {"containers": [{"name": "main", "image": PAUSE}]}
    spec.update(extra)
    return {"spec": spec}


def conditions(obj: Obj | None) -> dict[str, Obj]:
    """Conditions of an object by type."""
    return {
        cond["type"]: cond for cond in ((obj or {}).get("status") or {}).get("conditions") or ()
    }


def owner_ref(owner: Obj, kind: str) -> Obj:
    """A controller reference to an extensions object."""
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


class ClaimEnv(NamespaceApi):
    """An admin client in the test namespace, with object builders and waits."""

    wait = WAIT

    async def template(self, name: str, **spec: Any) -> Obj:
        body: Obj = {"podTemplate": pod_template()}
        body.update(spec)
        return await self.create(SANDBOX_TEMPLATES, {"metadata": {"name": name}, "spec": body})

    async def pool(
        self, name: str, template: str, *, replicas: int = 0, strategy: str | None = None
    ) -> Obj:
        spec: Obj = {"replicas": replicas, "sandboxTemplateRef": {"name": template}}
        if strategy:
            spec["updateStrategy"] = {"type": strategy}
        return await self.create(SANDBOX_WARM_POOLS, {"metadata": {"name": name}, "spec": spec})

    async def claim(
        self,
        name: str,
        pool: str,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        **spec: Any,
    ) -> Obj:
        body: Obj = {"warmPoolRef": {"name": pool}}
        body.update(spec)
        metadata: Obj = {"name": name}
        if labels:
            metadata["labels"] = labels
        if annotations:
            metadata["annotations"] = annotations
        return await self.create(SANDBOX_CLAIMS, {"metadata": metadata, "spec": body})

    async def upstream_pool_member(self, pool: Obj, template: Obj) -> Obj:
        """A Sandbox exactly as upstream's warm pool controller creates it (buildSandboxCR)."""
        pool_name, template_name = pool["metadata"]["name"], template["metadata"]["name"]
        spec = copy.deepcopy(
            {k: v for k, v in template["spec"].items() if k in ("podTemplate", "service")}
        )
        pool_labels = {
            c.LABEL_WARM_POOL_SANDBOX: name_hash(pool_name),
            c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(template_name),
            c.LABEL_SANDBOX_POD_TEMPLATE_HASH: GO_POD_TEMPLATE_HASH,
            c.LABEL_SANDBOX_TEMPLATE_HASH: GO_BLUEPRINT_HASH,
        }
        meta = spec["podTemplate"].setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **pool_labels}
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            c.ANNOTATION_SAFE_TO_EVICT: "true",
        }
        pod_spec = spec["podTemplate"]["spec"]
        pod_spec.setdefault("automountServiceAccountToken", False)
        pod_spec.setdefault("dnsPolicy", "None")
        pod_spec.setdefault("dnsConfig", {"nameservers": ["8.8.8.8", "1.1.1.1"]})
        body: Obj = {
            "metadata": {
                "generateName": f"{pool_name}-",
                "labels": {
                    **pool_labels,
                    c.LABEL_LAUNCH_TYPE: c.LAUNCH_TYPE_WARM,
                    c.LABEL_CREATED_BY: c.CREATED_BY_CONTROLLER,
                },
                "annotations": {c.ANNOTATION_SANDBOX_TEMPLATE_REF: template_name},
                "ownerReferences": [owner_ref(pool, c.KIND_SANDBOX_WARM_POOL)],
            },
            "spec": spec,
        }
        return await self.create(SANDBOXES, body)

    async def ready_members(self, pool: Obj, template: Obj, count: int) -> builtins.list[Obj]:
        """``count`` upstream-style pool members, waited on until Ready with pod IPs."""
        members = await asyncio.gather(
            *(self.upstream_pool_member(pool, template) for _ in range(count))
        )
        names = [m["metadata"]["name"] for m in members]

        async def all_ready() -> builtins.list[Obj] | None:
            found = {s["metadata"]["name"]: s for s in await self.list(SANDBOXES)}
            ready = [
                found[n]
                for n in names
                if n in found
                and conditions(found[n]).get("Ready", {}).get("status") == "True"
                and (found[n].get("status") or {}).get("podIPs")
            ]
            return ready if len(ready) == len(names) else None

        return await self.until(all_ready, f"{count} warm members Ready")

    async def until_claim(self, name: str, *, status: str, reason: str | None = None) -> Obj:
        async def probe() -> Obj | None:
            claim = await self.get(SANDBOX_CLAIMS, name)
            ready = conditions(claim).get("Ready")
            if ready is None or ready["status"] != status:
                return None
            if reason is not None and ready["reason"] != reason:
                return None
            return claim

        return await self.until(probe, f"claim {name} Ready={status} reason={reason}")

    async def events_for(self, name: str) -> builtins.list[Obj]:
        return await self.events_regarding(c.KIND_SANDBOX_CLAIM, name)

    async def until_event(self, name: str, reason: str) -> Obj:
        """The claim's first Event with ``reason``, once written.

        The recorder writes Events from a queue after the change they report, so a test that
        has seen the change waits for the Event rather than reading the list once.
        """

        async def probe() -> Obj | None:
            found = [e for e in await self.events_for(name) if e.get("reason") == reason]
            return found[0] if found else None

        return await self.until(probe, f"a {reason} Event for claim {name}")


async def wait_started(started: list[Any], count: int = 2) -> list[Any]:
    """The fixture's ``[manager, setup results...]`` once the controller thread filled it."""
    for _ in range(int(WAIT / POLL)):
        if len(started) >= count:
            return started
        await asyncio.sleep(POLL)
    raise AssertionError("controllers did not start")


def sample(manager: Any, name: str, labels: dict[str, str]) -> float:
    """A metric sample from the manager's registry (0 when absent)."""
    value = manager.registry.get_sample_value(name, labels)
    return float(value or 0.0)
