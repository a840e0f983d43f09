"""Shared harness of the SandboxClaim reconciler tests: a recording in-memory API, lagging
caches and a World that wires a ClaimReconciler to them."""

from __future__ import annotations

import builtins
import copy
import datetime as dt
from collections.abc import Mapping
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.controller.runtime import FakeApi, Obj, Request, Result
from kube_agent_sandbox.extensions.claim.reconciler import ClaimReconciler
from kube_agent_sandbox.extensions.claim.warmqueue import WarmQueue, feed_upsert

NS = "ns"
NOW = dt.datetime(2026, 8, 1, 12, 0, 0, tzinfo=dt.UTC)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((reason, action, note))


class Api(FakeApi):
    """FakeApi that also remembers delete propagation policies."""

    def __init__(self) -> None:
        super().__init__(default_namespace=NS, clock=lambda: NOW)
        self.propagation: list[str | None] = []

    async def delete(
        self,
        resource: Any,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> Obj | None:
        self.propagation.append(propagation_policy)
        return await super().delete(resource, namespace, name, preconditions=preconditions)


class LaggingReader:
    """A cache frozen at the objects given to it."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}

    def get(self, namespace: str, name: str) -> Obj | None:
        found = self.objects.get((namespace, name))
        return copy.deepcopy(found) if found else None

    def list(self, namespace: str | None = None, *, labels: Any = None) -> builtins.list[Obj]:
        return builtins.list(self.objects.values())

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        return []

    def iterate(self, namespace: str | None = None) -> Any:
        return iter(self.list())


def _pod_template() -> Obj:
    return {"spec": {"containers": [{"name": "main", "image": "pause"}]}}


def _ready(sandbox: Obj, *, ips: bool = True, ready: bool = True) -> None:
    sandbox["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "DependenciesReady" if ready else "DependenciesNotReady",
                "message": "Pod is Ready" if ready else "Pod is Pending",
                "observedGeneration": 1,
                "lastTransitionTime": "2026-08-01T11:00:00Z",
            }
        ]
    }
    if ips:
        sandbox["status"]["podIPs"] = ["10.0.0.7"]


class World:
    """A FakeApi with a template, a pool and a reconciler reading it."""

    def __init__(self, *, clock: dt.datetime = NOW, persist: bool = True) -> None:
        self.api = Api()
        self.recorder = Recorder()
        self.queue = WarmQueue()
        self.now = clock
        self.template = self.api.add(
            SANDBOX_TEMPLATES,
            {"metadata": {"name": "tmpl"}, "spec": {"podTemplate": _pod_template()}},
        )
        self.pool = self.api.add(
            SANDBOX_WARM_POOLS,
            {"metadata": {"name": "pool"}, "spec": {"sandboxTemplateRef": {"name": "tmpl"}}},
        )
        self.claims_reader: Any = self.api.reader(SANDBOX_CLAIMS)
        self.sandboxes_reader: Any = self.api.reader(SANDBOXES)
        self.reconciler = self._make(persist)

    def _make(self, persist: bool) -> ClaimReconciler:
        return ClaimReconciler(
            self.api,
            claims=self.claims_reader,
            sandboxes=self.sandboxes_reader,
            pools=self.api.reader(SANDBOX_WARM_POOLS),
            templates=self.api.reader(SANDBOX_TEMPLATES),
            queue=self.queue,
            recorder=self.recorder,
            persist_observability=persist,
            clock=lambda: self.now,
            clock_ns=lambda: int(self.now.timestamp() * 1e9) + 123,
        )

    def claim(self, name: str = "claim", **spec: Any) -> Obj:
        body: Obj = {"warmPoolRef": {"name": "pool"}}
        body.update(spec)
        return self.api.add(
            SANDBOX_CLAIMS,
            {"metadata": {"name": name, "creationTimestamp": "2026-08-01T11:59:59Z"}, "spec": body},
        )

    def member(self, name: str, *, ready: bool = True, ips: bool = True) -> Obj:
        sandbox: Obj = {
            "metadata": {
                "name": name,
                "labels": {
                    c.LABEL_WARM_POOL_SANDBOX: name_hash("pool"),
                    c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tmpl"),
                    c.LABEL_SANDBOX_TEMPLATE_HASH: "gohash",
                    c.LABEL_LAUNCH_TYPE: "warm",
                },
                "annotations": {c.ANNOTATION_SANDBOX_TEMPLATE_REF: "tmpl"},
                "ownerReferences": [
                    {
                        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                        "kind": "SandboxWarmPool",
                        "name": "pool",
                        "uid": self.pool["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "podTemplate": {
                    "metadata": {
                        "labels": {c.LABEL_WARM_POOL_SANDBOX: name_hash("pool")},
                        "annotations": {c.ANNOTATION_SAFE_TO_EVICT: "true"},
                    },
                    "spec": {"containers": [{"name": "main", "image": "pause"}]},
                }
            },
        }
        _ready(sandbox, ips=ips, ready=ready)
        added = self.api.add(SANDBOXES, sandbox)
        feed_upsert(self.queue, None, added)
        return added

    async def reconcile(self, name: str = "claim") -> Result:
        return await self.reconciler.reconcile(Request(NS, name))

    def get(self, resource: Any, name: str) -> Obj:
        found = self.api.obj(resource, name)
        assert found is not None
        return found


def _ready_cond(claim: Obj) -> Obj:
    return {cond["type"]: cond for cond in claim["status"]["conditions"]}["Ready"]
