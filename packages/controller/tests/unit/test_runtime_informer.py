"""Informer: list+watch into a cache, resume, relist on 410 with missed deletions, indexes."""

from __future__ import annotations

import asyncio

import pytest

from kube_agent_sandbox.controller.runtime import (
    OWNER_UID_INDEX,
    ApiError,
    EventHandler,
    FakeApi,
    Informer,
    Obj,
    Resource,
)
from kube_agent_sandbox.testing.waiting import eventually

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")


def cm(name: str, ns: str = "default", **labels: str) -> Obj:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "data": {"k": name}}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def handler(self) -> EventHandler:
        return EventHandler(
            on_add=lambda o: self.events.append(("add", o["metadata"]["name"])),
            on_update=lambda old, new: self.events.append(("update", new["metadata"]["name"])),
            on_delete=lambda o: self.events.append(("delete", o["metadata"]["name"])),
        )


@pytest.fixture
async def api() -> FakeApi:
    return FakeApi()


async def started(api: FakeApi, **kwargs: object) -> Informer:
    inf = Informer(api, CONFIGMAPS, retry_backoff=0.001, **kwargs)  # type: ignore[arg-type]
    inf.start()
    async with asyncio.timeout(5):
        await inf.wait_for_sync()
    await eventually(lambda: api.watch_count > 0)
    return inf


async def test_paginated_list_fills_cache_and_sets_synced(api: FakeApi) -> None:
    for i in range(1203):
        await api.create(CONFIGMAPS, "default" if i % 2 else "other", cm(f"c{i}"))
    inf = Informer(api, CONFIGMAPS, page_size=500)
    assert not inf.has_synced
    inf.start()
    async with asyncio.timeout(5):
        await inf.wait_for_sync()
    try:
        assert len(inf) == 1203
        lists = [c for c in api.calls if c[0] == "list"]
        assert len(lists) == 3  # 500 + 500 + 203
        assert inf.get("other", "c0") is not None
        assert inf.get("default", "c0") is None
        assert len(inf.list("default")) == 601
        assert len(inf.list()) == 1203
        # iterate() yields the same objects as list(), lazily
        scan = inf.iterate("default")
        assert not isinstance(scan, list)
        assert sorted(o["metadata"]["name"] for o in scan) == sorted(
            o["metadata"]["name"] for o in inf.list("default")
        )
        assert sum(1 for _ in inf.iterate()) == 1203
        # listed items lack kind/apiVersion on the wire; the cache fills them in
        assert inf.get("other", "c0")["kind"] == "ConfigMap"  # type: ignore[index]
        assert inf.get("other", "c0")["apiVersion"] == "v1"  # type: ignore[index]
    finally:
        await inf.stop()


async def test_watch_events_reach_cache_and_handlers(api: FakeApi) -> None:
    await api.create(CONFIGMAPS, "default", cm("before"))
    inf = await started(api)
    rec = Recorder()
    inf.add_event_handler(rec.handler())
    assert rec.events == [("add", "before")]  # replayed on registration
    try:
        await api.create(CONFIGMAPS, "default", cm("new"))
        await api.patch(CONFIGMAPS, "default", "new", {"data": {"k": "v2"}})
        await api.delete(CONFIGMAPS, "default", "before")
        await eventually(lambda: len(rec.events) == 4)
        assert rec.events[1:] == [("add", "new"), ("update", "new"), ("delete", "before")]
        assert inf.get("default", "new")["data"] == {"k": "v2"}  # type: ignore[index]
        assert inf.get("default", "before") is None
        assert inf.resource_version == str(api.last_rv)
    finally:
        await inf.stop()


async def test_managed_fields_stripped_and_transform_applied(api: FakeApi) -> None:
    body = cm("a")
    body["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}]
    await api.create(CONFIGMAPS, "default", body)

    def drop_data(obj: Obj) -> Obj:
        obj.pop("data", None)
        return obj

    inf = await started(api, transform=drop_data)
    try:
        cached = inf.get("default", "a")
        assert cached is not None
        assert "managedFields" not in cached["metadata"]
        assert "data" not in cached
        body2 = cm("b")
        body2["metadata"]["managedFields"] = [{"manager": "x"}]
        await api.create(CONFIGMAPS, "default", body2)
        await eventually(lambda: inf.get("default", "b") is not None)
        assert "managedFields" not in inf.get("default", "b")["metadata"]  # type: ignore[index]
        assert "data" not in inf.get("default", "b")  # type: ignore[operator]
    finally:
        await inf.stop()


async def test_resumes_from_last_resource_version_after_disconnect(api: FakeApi) -> None:
    inf = await started(api)
    rec = Recorder()
    inf.add_event_handler(rec.handler())
    try:
        await api.create(CONFIGMAPS, "default", cm("a"))
        await eventually(lambda: inf.get("default", "a") is not None)
        seen_rv = inf.resource_version
        api.drop_watches()
        # changes while no watch is open
        await api.create(CONFIGMAPS, "default", cm("b"))
        await api.delete(CONFIGMAPS, "default", "a")
        await eventually(
            lambda: inf.get("default", "b") is not None and inf.get("default", "a") is None
        )
        assert inf.relists == 1  # resumed, no relist
        assert ("add", "b") in rec.events
        assert ("delete", "a") in rec.events
        watches = [c for c in api.calls if c[0] == "watch"]
        assert len(watches) == 2
        assert seen_rv is not None
    finally:
        await inf.stop()


async def test_relist_on_410_delivers_missed_deletions_adds_and_updates(api: FakeApi) -> None:
    for name in ("keep", "change", "vanish"):
        await api.create(CONFIGMAPS, "default", cm(name))
    inf = await started(api)
    rec = Recorder()
    inf.add_event_handler(rec.handler())
    rec.events.clear()
    try:
        api.drop_watches()
        # the watch is gone; history is compacted before the informer reconnects
        api.errors[("watch", "configmaps")] = ApiError(503, "ServiceUnavailable", "restarting")
        await api.delete(CONFIGMAPS, "default", "vanish")
        await api.patch(CONFIGMAPS, "default", "change", {"data": {"k": "changed"}})
        await api.create(CONFIGMAPS, "default", cm("born"))
        api.compact()
        await eventually(lambda: inf.relists == 2)
        await eventually(lambda: api.watch_count > 0)
        assert sorted(rec.events) == [("add", "born"), ("delete", "vanish"), ("update", "change")]
        assert inf.get("default", "vanish") is None
        assert inf.get("default", "change")["data"] == {"k": "changed"}  # type: ignore[index]
        assert len(inf) == 3
    finally:
        await inf.stop()


async def test_error_event_410_in_stream_triggers_relist(api: FakeApi) -> None:
    await api.create(CONFIGMAPS, "default", cm("a"))
    inf = await started(api)
    try:
        api.expire_watches()
        await eventually(lambda: inf.relists == 2)
    finally:
        await inf.stop()


async def test_bookmark_advances_resource_version_without_events(api: FakeApi) -> None:
    inf = await started(api)
    rec = Recorder()
    inf.add_event_handler(rec.handler())
    other = Resource("", "v1", "secrets", "Secret")
    try:
        await api.create(other, "default", {"metadata": {"name": "s"}})
        api.bookmark(CONFIGMAPS)
        await eventually(lambda: inf.resource_version == str(api.last_rv))
        assert rec.events == []
    finally:
        await inf.stop()


async def test_label_selector_is_sent_to_server(api: FakeApi) -> None:
    await api.create(CONFIGMAPS, "default", cm("yes", app="x"))
    await api.create(CONFIGMAPS, "default", cm("no", app="y"))
    inf = await started(api, label_selector="app=x")
    try:
        assert [o["metadata"]["name"] for o in inf.list()] == ["yes"]
        await api.create(CONFIGMAPS, "default", cm("yes2", app="x"))
        await api.create(CONFIGMAPS, "default", cm("no2", app="y"))
        await eventually(lambda: len(inf) == 2)
        assert inf.get("default", "no2") is None
    finally:
        await inf.stop()


async def test_reader_label_filter_and_indexes(api: FakeApi) -> None:
    owned = cm("child", team="a")
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "X", "name": "p", "uid": "u-1", "controller": True},
        {"apiVersion": "v1", "kind": "Y", "name": "q", "uid": "u-2"},
    ]
    await api.create(CONFIGMAPS, "default", owned)
    await api.create(CONFIGMAPS, "default", cm("lonely", team="b"))
    inf = await started(api)
    try:
        assert [o["metadata"]["name"] for o in inf.list(labels={"team": "a"})] == ["child"]
        assert inf.list("default", labels={"team": "zzz"}) == []
        assert [o["metadata"]["name"] for o in inf.by_index(OWNER_UID_INDEX, "u-1")] == ["child"]
        assert inf.by_index(OWNER_UID_INDEX, "u-2") == []  # not the controller ref
        inf.add_index("team", lambda o: [o["metadata"]["labels"]["team"]])
        assert [o["metadata"]["name"] for o in inf.by_index("team", "b")] == ["lonely"]
        await api.patch(CONFIGMAPS, "default", "lonely", {"metadata": {"labels": {"team": "a"}}})
        await eventually(lambda: inf.by_index("team", "b") == [])
        assert len(inf.by_index("team", "a")) == 2
        await api.delete(CONFIGMAPS, "default", "child")
        await eventually(lambda: inf.by_index(OWNER_UID_INDEX, "u-1") == [])
        with pytest.raises(ValueError, match="already exists"):
            inf.add_index("team", lambda o: [])
        with pytest.raises(KeyError):
            inf.by_index("nope", "x")
    finally:
        await inf.stop()


async def test_failing_handler_does_not_stop_others(api: FakeApi) -> None:
    inf = await started(api)
    rec = Recorder()

    def boom(obj: Obj) -> None:
        raise RuntimeError("handler bug")

    inf.add_event_handler(EventHandler(on_add=boom))
    inf.add_event_handler(rec.handler())
    try:
        await api.create(CONFIGMAPS, "default", cm("a"))
        await eventually(lambda: rec.events == [("add", "a")])
    finally:
        await inf.stop()


async def test_list_errors_are_retried(api: FakeApi) -> None:
    await api.create(CONFIGMAPS, "default", cm("a"))
    api.errors[("list", "configmaps")] = ApiError(500, "InternalError", "etcd down")
    inf = await started(api)
    try:
        assert inf.get("default", "a") is not None
        assert [c[0] for c in api.calls].count("list") == 2
    finally:
        await inf.stop()


async def test_expired_continue_token_restarts_list(api: FakeApi) -> None:
    for i in range(6):
        await api.create(CONFIGMAPS, "default", cm(f"c{i}"))
    lists = 0

    def expire_during_second_page(verb: str, *_: object) -> None:
        nonlocal lists
        if verb != "list":
            return
        lists += 1
        if lists == 2:  # the continue token of page 1 is now older than the compaction
            api.last_rv += 1
            api.compact()

    api.on_request = expire_during_second_page
    inf = Informer(api, CONFIGMAPS, page_size=2, retry_backoff=0.001)
    inf.start()
    try:
        async with asyncio.timeout(5):
            await inf.wait_for_sync()
        assert len(inf) == 6
        assert lists == 5  # page 1, expired page 2, then 3 fresh pages
        assert inf.relists == 1
    finally:
        await inf.stop()


@pytest.mark.parametrize("compact", [True, False])
async def test_storage_modes_return_equal_objects(api: FakeApi, compact: bool) -> None:
    await api.create(CONFIGMAPS, "default", cm("a", team="x"))
    inf = await started(api, compact=compact)
    try:
        first = inf.get("default", "a")
        assert first is not None
        assert first["data"] == {"k": "a"}
        assert inf.list(labels={"team": "x"}) == [first]
        first["data"]["k"] = "mutated by a careless caller"
        again = inf.get("default", "a")
        assert again is not None
        if compact:  # every read decodes its own copy: the cache is unharmed
            assert again["data"] == {"k": "a"}
            assert again is not first
        else:  # shared dicts: the documented reason not to mutate
            assert again is first
    finally:
        await inf.stop()


async def test_relist_without_changes_dispatches_nothing(api: FakeApi) -> None:
    for name in ("a", "b"):
        await api.create(CONFIGMAPS, "default", cm(name))
    inf = await started(api)
    rec = Recorder()
    inf.add_event_handler(rec.handler())
    rec.events.clear()
    try:
        api.expire_watches()
        await eventually(lambda: inf.relists == 2)
        assert rec.events == []
    finally:
        await inf.stop()


async def test_too_large_resource_version_triggers_relist(api: FakeApi) -> None:
    await api.create(CONFIGMAPS, "default", cm("a"))
    api.errors[("watch", "configmaps")] = ApiError(
        504, "Timeout", "Too large resource version: 900, current: 12"
    )
    inf = Informer(api, CONFIGMAPS, retry_backoff=0.001)
    inf.start()
    try:
        await eventually(lambda: inf.relists == 2)
        await eventually(lambda: api.watch_count > 0)
    finally:
        await inf.stop()


async def test_watches_ended_at_once_are_retried_with_backoff(api: FakeApi) -> None:
    def end_every_watch(verb: str, *_: object) -> None:
        if verb == "watch":
            asyncio.get_running_loop().call_soon(api.drop_watches)

    api.on_request = end_every_watch
    inf = Informer(api, CONFIGMAPS, retry_backoff=30.0)
    inf.start()
    try:
        async with asyncio.timeout(5):
            await inf.wait_for_sync()
        for _ in range(200):
            await asyncio.sleep(0)
        # the first empty, instantly closed watch puts the informer to sleep (30 s backoff)
        assert [c[0] for c in api.calls].count("watch") == 1
    finally:
        await inf.stop()
    assert api.watch_count == 0  # the stream was closed when the informer stopped
