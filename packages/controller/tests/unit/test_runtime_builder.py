"""ControllerBuilder: the fluent way to the same Controller, added to the manager."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from kube_agent_sandbox.controller import runtime
from kube_agent_sandbox.controller.runtime import (
    ControllerBuilder,
    ControllerHandle,
    EventHandler,
    FakeApi,
    HandlerFactory,
    Manager,
    Obj,
    Request,
    Resource,
    Result,
    generation_changed,
)

THINGS = Resource("example.com", "v1", "things", "Thing")
PARTS = Resource("example.com", "v1", "parts", "Part")
NOTES = Resource("", "v1", "configmaps", "ConfigMap")


class Recording:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.seen = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.requests.append(request)
        self.seen.set()
        return Result()


def manager(api: FakeApi | None = None) -> Manager:
    return Manager(api or FakeApi(), metrics_bind_address="0", health_bind_address="0")


def labelled(old: Obj | None, new: Obj | None) -> bool:
    obj = new if new is not None else old
    return bool(obj and (obj.get("metadata") or {}).get("labels"))


def note_to_thing(obj: Obj) -> list[Request]:
    return [Request(obj["metadata"]["namespace"], obj["metadata"]["name"])]


def test_builder_sets_up_the_same_controller() -> None:
    mgr = manager()
    rec = Recording()
    ctrl = (
        ControllerBuilder(mgr, "things")
        .for_resource(THINGS, predicate=labelled)
        .owns(PARTS)
        .watches(NOTES, note_to_thing)
        .with_workers(3)
        .complete(rec)
    )
    assert mgr.controllers == (ctrl,)
    assert ctrl.name == "things"
    assert ctrl.reconciler is rec
    assert ctrl.for_resource == THINGS
    assert ctrl.for_predicate is labelled
    assert ctrl.owns == [(PARTS, None)]
    assert ctrl.watches == [(NOTES, note_to_thing)]
    assert ctrl.workers == 3
    assert ctrl._metrics is mgr.metrics
    assert set(mgr._informers) == {THINGS, PARTS, NOTES}


def test_complete_without_a_primary_resource_fails() -> None:
    mgr = manager()
    with pytest.raises(ValueError, match=r"for_resource\(\) was not called"):
        ControllerBuilder(mgr, "x").owns(PARTS).complete(Recording())
    assert mgr.controllers == ()


def test_a_second_primary_resource_fails() -> None:
    with pytest.raises(ValueError, match="primary resource set twice"):
        ControllerBuilder(manager(), "x").for_resource(THINGS).for_resource(PARTS)


@pytest.mark.parametrize("workers", [0, -1])
def test_workers_must_be_positive(workers: int) -> None:
    with pytest.raises(ValueError, match="workers must be positive"):
        ControllerBuilder(manager(), "x").with_workers(workers)


def test_names_are_required_and_unique() -> None:
    mgr = manager()
    with pytest.raises(ValueError, match="needs a name"):
        ControllerBuilder(mgr, "")
    ControllerBuilder(mgr, "x").for_resource(THINGS).complete(Recording())
    with pytest.raises(ValueError, match="already added"):
        ControllerBuilder(mgr, "x").for_resource(PARTS).complete(Recording())


async def test_a_built_controller_reconciles_owners_and_mapped_objects() -> None:
    api = FakeApi()
    mgr = manager(api)
    rec = Recording()
    ControllerBuilder(mgr, "things").for_resource(THINGS).owns(PARTS).watches(
        NOTES, note_to_thing
    ).complete(rec)
    run = asyncio.create_task(mgr.run())
    try:
        await asyncio.wait_for(mgr.controllers_started.wait(), 10)
        owner = await api.create(THINGS, "ns", {"metadata": {"name": "owner"}})
        await asyncio.wait_for(rec.seen.wait(), 10)
        rec.requests.clear()
        rec.seen.clear()
        ref = {
            "apiVersion": "example.com/v1",
            "kind": "Thing",
            "name": "owner",
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
        await api.create(PARTS, "ns", {"metadata": {"name": "p", "ownerReferences": [ref]}})
        await asyncio.wait_for(rec.seen.wait(), 10)
        assert rec.requests[-1] == Request("ns", "owner")
        rec.seen.clear()
        await api.create(NOTES, "ns", {"metadata": {"name": "mapped"}})
        await asyncio.wait_for(rec.seen.wait(), 10)
        assert rec.requests[-1] == Request("ns", "mapped")
    finally:
        mgr.request_stop()
        await asyncio.wait_for(run, 10)


def test_public_classes_and_functions_are_documented() -> None:
    documented = [
        getattr(runtime, name)
        for name in runtime.__all__
        if inspect.isclass(getattr(runtime, name)) or inspect.isfunction(getattr(runtime, name))
    ]
    assert len(documented) >= 20
    for obj in documented:
        assert (obj.__doc__ or "").strip(), f"{obj.__name__} has no docstring"
        for member_name, member in vars(obj).items():
            if member_name.startswith("_") or not callable(member):
                continue
            assert (member.__doc__ or "").strip(), f"{obj.__name__}.{member_name} has no docstring"


NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


def test_a_manager_namespace_scopes_namespaced_informers_only() -> None:
    mgr = Manager(FakeApi(), metrics_bind_address="0", health_bind_address="0", namespace="team-a")
    ControllerBuilder(mgr, "things").for_resource(THINGS).watches(NODES, note_to_thing).complete(
        Recording()
    )
    assert mgr.informer(THINGS).namespace == "team-a"
    assert mgr.informer(NODES).namespace is None
    assert mgr.informer(PARTS, namespace="other").namespace == "other"
    # asking again with the defaults, or with the manager's namespace spelled out, is the same
    assert mgr.informer(THINGS, namespace="team-a") is mgr.informer(THINGS)
    with pytest.raises(ValueError, match="already exists with other options"):
        mgr.informer(THINGS, namespace="elsewhere")


async def test_a_handler_watch_feeds_the_controller_through_its_handle_after_its_own() -> None:
    mgr = manager()
    built: list[tuple[str, ControllerHandle]] = []

    def factory(name: str) -> HandlerFactory:
        def make(handle: ControllerHandle) -> EventHandler:
            built.append((name, handle))

            def on_add(obj: Obj) -> None:
                handle.add(Request("ns", f"{name}-now"))
                handle.add_after(Request("ns", f"{name}-later"), 5.0)

            return EventHandler(on_add=on_add)

        return make

    ctrl = (
        ControllerBuilder(mgr, "things")
        .for_resource(THINGS)
        .watches(NOTES, note_to_thing)
        .watches_handler(NOTES, factory("first"))
        .watches_handler(PARTS, factory("second"))
        .complete(Recording())
    )
    assert [name for name, _ in built] == ["first", "second"]
    notes = mgr.informer(NOTES)
    # the controller's own mapped handler first, then the declared ones in order
    assert len(notes._handlers) == 2
    first = notes._handlers[1].on_add
    assert first is not None
    first({"metadata": {"name": "n", "namespace": "ns"}})
    assert len(ctrl.queue) == 1
    assert ctrl.queue.delayed() == frozenset({Request("ns", "first-later")})
    part = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "ownerReferences": [
                {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t", "controller": True}
            ],
        }
    }
    assert built[1][1].owner_request(part) == Request("ns", "t") == ctrl.owner_request(part)
    await ctrl.queue.shutdown_with_drain(0.1)


@pytest.mark.parametrize(
    ("old", "new", "passes"),
    [
        (None, {"metadata": {"generation": 1}}, True),
        ({"metadata": {"generation": 1}}, None, True),
        ({"metadata": {"generation": 1}}, {"metadata": {"generation": 1}, "status": {}}, False),
        ({"metadata": {"generation": 1}}, {"metadata": {"generation": 2}}, True),
    ],
)
def test_generation_changed(old: Obj | None, new: Obj | None, passes: bool) -> None:
    assert generation_changed(old, new) is passes
