"""A FakeApi-backed world for warm pool reconciler unit tests (imported by the test modules).

The Sandbox cache is a snapshot that changes only when a test says so (``sync``), so tests
can play a cache that lags behind, or never shows, the reconciler's own creates.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import datetime as dt
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import FakeApi, Obj, Request
from kube_agent_sandbox.extensions.common.ownership import controller_ref_to
from kube_agent_sandbox.extensions.warmpool.indexes import MEMBER_INDEX, member_index
from kube_agent_sandbox.extensions.warmpool.reconciler import (
    WarmPoolReconciler,
    WarmPoolSettings,
)

NS = "ns"
POOL = "pool"
TEMPLATE = "tpl"
T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class SnapshotReader:
    """A Sandbox cache that shows the API's objects as of the last :meth:`sync`."""

    def __init__(self, api: FakeApi) -> None:
        self._api = api
        self._objects: dict[tuple[str, str], Obj] = {}
        self.sync()

    def sync(self, *, hide: Collection[str] = ()) -> None:
        """Catch up with the API, except for the Sandboxes named in ``hide`` (their events are
        still on the way: a cache shows another watch's objects before them)."""
        self._objects = {
            key: copy.deepcopy(obj)
            for key, obj in self._api.contents(SANDBOXES).items()
            if key[1] not in hide
        }

    def get(self, namespace: str, name: str) -> Obj | None:
        found = self._objects.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(
        self, namespace: str | None = None, *, labels: Mapping[str, str] | None = None
    ) -> builtins.list[Obj]:
        return [
            copy.deepcopy(o)
            for (ns, _), o in sorted(self._objects.items())
            if namespace is None or ns == namespace
        ]

    def iterate(self, namespace: str | None = None) -> Iterator[Obj]:
        yield from self.list(namespace)

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        assert index == MEMBER_INDEX
        return [
            copy.deepcopy(o) for _, o in sorted(self._objects.items()) if value in member_index(o)
        ]


@dataclass
class Event:
    reason: str
    type_: str
    action: str
    note: str


@dataclass
class Recorder:
    events: list[Event] = field(default_factory=list)

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append(Event(reason, type_, action, note))


class CountingApi:
    """Delegates to a FakeApi, counting successful creates (a generated-name collision in
    the fake is a failed attempt, retried, not an extra Sandbox); optionally yields to the
    loop before each create, as a network round trip would."""

    def __init__(self, api: FakeApi, *, delay: float | None = None) -> None:
        self._api = api
        self._delay = delay
        self.created = 0

    async def create(self, *args: Any, **kwargs: Any) -> Obj:
        if self._delay is not None:
            await asyncio.sleep(self._delay)
        obj = await self._api.create(*args, **kwargs)
        self.created += 1
        return obj

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)


class Clock:
    """Monotonic and wall clock that only move when told."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = T0

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += dt.timedelta(seconds=seconds)

    def monotonic(self) -> float:
        return self.mono

    def now(self) -> dt.datetime:
        return self.wall


def template_obj(image: str = "busybox", **spec: Any) -> Obj:
    body: Obj = {
        "podTemplate": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }
    }
    body.update(spec)
    return {"metadata": {"name": TEMPLATE, "namespace": NS}, "spec": body}


class World:
    """A FakeApi with a pool and its template, and a reconciler over it."""

    def __init__(
        self,
        *,
        replicas: int | None = 3,
        strategy: str | None = None,
        settings: WarmPoolSettings | None = None,
        with_template: bool = True,
        slow: bool = False,
    ) -> None:
        self.clock = Clock()
        self.api = FakeApi(default_namespace=NS, clock=self.clock.now)
        spec: Obj = {"sandboxTemplateRef": {"name": TEMPLATE}}
        if replicas is not None:
            spec["replicas"] = replicas
        if strategy is not None:
            spec["updateStrategy"] = {"type": strategy}
        self.pool = self.api.add(
            SANDBOX_WARM_POOLS, {"metadata": {"name": POOL, "namespace": NS}, "spec": spec}
        )
        if with_template:
            self.api.add(SANDBOX_TEMPLATES, template_obj())
        self.sandboxes = SnapshotReader(self.api)
        self.recorder = Recorder()
        self.jitter = 0.0
        self.client = CountingApi(self.api, delay=0.0 if slow else None)
        self.reconciler = WarmPoolReconciler(
            self.client,  # type: ignore[arg-type]
            pools=self.api.reader(SANDBOX_WARM_POOLS),
            sandboxes=self.sandboxes,
            templates=self.api.reader(SANDBOX_TEMPLATES),
            pods=self.api.reader(PODS),
            recorder=self.recorder,
            settings=settings or WarmPoolSettings(),
            clock=self.clock.monotonic,
            now=self.clock.now,
            jitter=lambda: self.jitter,
        )
        self.key = Request(NS, POOL)

    async def reconcile(self) -> Any:
        return await self.reconciler.reconcile(self.key)

    def creates(self) -> int:
        """Sandboxes the reconciler created (successful create requests)."""
        return self.client.created

    def create_calls(self) -> int:
        return sum(1 for call in self.api.writes(SANDBOXES) if call.verb == "create")

    def deletes(self) -> list[str]:
        return [str(call.name) for call in self.api.writes(SANDBOXES) if call.verb == "delete"]

    def members(self) -> list[Obj]:
        return self.api.objects(SANDBOXES)

    def sync(self, *, observe: bool = True, hide: Collection[str] = ()) -> None:
        """Let the cache catch up (but for ``hide``), delivering add/delete events to the
        reconciler."""
        before = {(o["metadata"]["name"]): o for o in self.sandboxes.list()}
        self.sandboxes.sync(hide=hide)
        after = {o["metadata"]["name"]: o for o in self.sandboxes.list()}
        if observe:
            for name, obj in after.items():
                if name not in before:
                    self.reconciler.observe_added(obj)
            for name, obj in before.items():
                if name not in after:
                    self.reconciler.observe_deleted(obj)

    def set_pool(self, **spec: Any) -> None:
        def change(pool: Obj) -> None:
            pool["spec"].update(spec)
            pool["metadata"]["generation"] = pool["metadata"].get("generation", 1) + 1

        self.api.mutate(SANDBOX_WARM_POOLS, POOL, change)

    def set_template(self, template: Obj) -> None:
        self.api.add(SANDBOX_TEMPLATES, template)

    def status(self) -> Obj:
        found = self.api.obj(SANDBOX_WARM_POOLS, POOL)
        assert found is not None
        return dict(found.get("status") or {})

    def add_member(
        self,
        name: str,
        *,
        ready: bool = True,
        created: dt.datetime | None = None,
        owned: bool = True,
        spec: Obj | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Obj:
        """Seed a Sandbox as the pool would have made it from the current template."""
        from kube_agent_sandbox.extensions.warmpool.blueprint import build_member, hashes_of

        template = self.api.obj(SANDBOX_TEMPLATES, TEMPLATE) or template_obj()
        body = build_member(self.pool, template, hashes=hashes_of(template), enable_eviction=True)
        m = body["metadata"]
        m.pop("generateName")
        m["name"] = name
        m["creationTimestamp"] = stamp(created or self.clock.now())
        if not owned:
            m.pop("ownerReferences")
        if labels is not None:
            m["labels"].update(labels)
        if spec is not None:
            body["spec"] = spec
        if ready:
            body["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        obj = self.api.add(SANDBOXES, body)
        self.sandboxes.sync()
        return obj


def pool_hash() -> str:
    return name_hash(POOL)


def owner_ref(pool: Obj) -> Obj:
    return controller_ref_to(pool, kind=c.KIND_SANDBOX_WARM_POOL)
