"""FakeApi's write semantics, test controls and Reader views.

The informer, controller and leader election tests cover LIST/WATCH; these cover what the
reconciler and webhook tests lean on: merge patch, conflicts, preconditions, finalizers,
no-op writes, server defaults, failure injection, the request hook and the readers.
"""

from __future__ import annotations

import datetime as dt

import pytest

from kube_agent_sandbox.controller.runtime import ApiError, Call, FakeApi, Obj, Resource

THINGS = Resource(group="example.com", version="v1", plural="things", kind="Thing")
NODES = Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
WHEN = dt.datetime(2030, 4, 5, 6, 7, 8, tzinfo=dt.UTC)


def thing(name: str = "a", *, namespace: str = "ns", **extra: object) -> Obj:
    return {"metadata": {"name": name, "namespace": namespace}, **extra}


def rv(obj: Obj | None) -> str:
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


# --- seeding and changing the store -------------------------------------------------------------


def test_add_fills_server_fields_and_keeps_given_ones() -> None:
    api = FakeApi(clock=lambda: WHEN, default_namespace="dflt")
    added = api.add(THINGS, {"metadata": {"name": "a", "uid": "mine"}, "spec": {"x": 1}})
    meta = added["metadata"]
    assert (meta["namespace"], meta["uid"], meta["generation"]) == ("dflt", "mine", 1)
    assert meta["creationTimestamp"] == "2030-04-05T06:07:08Z"
    assert (added["kind"], added["apiVersion"]) == ("Thing", "example.com/v1")
    assert api.obj(THINGS, "a") == added
    assert api.calls == []


def test_add_of_a_cluster_scoped_object_has_no_namespace() -> None:
    api = FakeApi(default_namespace="dflt")
    added = api.add(NODES, {"metadata": {"name": "n1", "namespace": "ignored"}})
    assert "namespace" not in added["metadata"]
    assert api.obj(NODES, "n1") == added


def test_add_without_a_name_is_an_error() -> None:
    with pytest.raises(KeyError):
        FakeApi().add(THINGS, {"metadata": {}})


def test_mutate_bumps_the_resource_version() -> None:
    api = FakeApi()
    before = api.add(THINGS, thing())
    after = api.mutate(THINGS, "a", lambda o: o.update(status={"ok": True}), "ns")
    assert after["status"] == {"ok": True}
    assert int(rv(after)) > int(rv(before))
    assert api.obj(THINGS, "a", "ns") == after
    with pytest.raises(KeyError):
        api.mutate(THINGS, "missing", lambda o: None, "ns")


def test_contents_is_the_live_store() -> None:
    api = FakeApi()
    api.add(THINGS, thing())
    del api.contents(THINGS)[("ns", "a")]
    assert api.obj(THINGS, "a", "ns") is None


# --- create ---------------------------------------------------------------------------------------


async def test_create_applies_the_defaulter_and_records_the_body_sent() -> None:
    def pending(obj: Obj) -> None:
        obj.setdefault("status", {"phase": "Pending"})

    api = FakeApi(defaults={THINGS: pending})
    body = thing()
    created = await api.create(THINGS, "ns", body, field_manager="me")
    body["metadata"]["name"] = "changed-after-sending"

    assert created["status"] == {"phase": "Pending"}
    assert api.calls == [Call("create", "things", "ns", "a", thing(), None, "me")]
    assert api.calls[0][0] == "create"
    assert (await api.create(NODES, "", {"metadata": {"name": "n"}})).get("status") is None


async def test_create_errors() -> None:
    api = FakeApi()
    await api.create(THINGS, "ns", thing())
    with pytest.raises(ApiError) as exists:
        await api.create(THINGS, "ns", thing())
    assert exists.value.already_exists
    with pytest.raises(ApiError) as nameless:
        await api.create(THINGS, "ns", {"metadata": {}})
    assert nameless.value.status == 422


# --- patch and update -----------------------------------------------------------------------------


async def test_merge_patch_removes_nulls_and_leaves_status_alone() -> None:
    api = FakeApi()
    api.add(THINGS, thing(spec={"a": 1, "b": 2}, status={"s": 1}))
    patched = await api.patch(THINGS, "ns", "a", {"spec": {"a": None, "c": 3}, "status": {}})
    assert patched["spec"] == {"b": 2, "c": 3}
    assert patched["status"] == {"s": 1}
    assert patched["metadata"]["generation"] == 2


async def test_status_patch_changes_only_status() -> None:
    api = FakeApi()
    api.add(THINGS, thing(spec={"a": 1}, status={"s": 1, "t": 2}))
    patched = await api.patch(
        THINGS, "ns", "a", {"spec": {"a": 9}, "status": {"t": None}}, subresource="status"
    )
    assert (patched["spec"], patched["status"]) == ({"a": 1}, {"s": 1})
    assert patched["metadata"]["generation"] == 1


async def test_a_no_op_write_keeps_the_resource_version() -> None:
    api = FakeApi()
    added = api.add(THINGS, thing(spec={"a": 1}))
    same = await api.patch(THINGS, "ns", "a", {"spec": {"a": 1}})
    assert same == added
    assert api.last_rv == int(rv(added))
    changed = await api.patch(THINGS, "ns", "a", {"spec": {"a": 2}})
    assert int(rv(changed)) == int(rv(added)) + 1


async def test_stale_resource_version_is_a_conflict() -> None:
    api = FakeApi()
    old = api.add(THINGS, thing())
    api.mutate(THINGS, "a", lambda o: None, "ns")
    with pytest.raises(ApiError) as patch_conflict:
        await api.patch(THINGS, "ns", "a", {"metadata": {"resourceVersion": rv(old)}})
    with pytest.raises(ApiError) as update_conflict:
        await api.update(THINGS, "ns", "a", old)
    for info in (patch_conflict, update_conflict):
        assert info.value.conflict
        assert 'on things "a": the object has been modified' in info.value.message


async def test_update_keeps_identity_and_status() -> None:
    api = FakeApi()
    old = api.add(THINGS, thing(spec={"a": 1}, status={"s": 1}))
    body = thing(spec={"a": 2}, status={"s": 2})
    body["metadata"]["uid"] = "forged"
    new = await api.update(THINGS, "ns", "a", body)
    assert new["metadata"]["uid"] == old["metadata"]["uid"]
    assert (new["spec"], new["status"]) == ({"a": 2}, {"s": 1})


async def test_writes_to_missing_objects_are_not_found() -> None:
    api = FakeApi()
    for call in (
        api.get(THINGS, "ns", "x"),
        api.update(THINGS, "ns", "x", thing("x")),
        api.patch(THINGS, "ns", "x", {}),
        api.delete(THINGS, "ns", "x"),
    ):
        with pytest.raises(ApiError) as info:
            await call
        assert info.value.not_found


async def test_bad_patches_are_rejected() -> None:
    api = FakeApi()
    api.add(THINGS, thing())
    with pytest.raises(ApiError) as not_an_object:
        await api.patch(THINGS, "ns", "a", [{"op": "add", "path": "/x", "value": 1}])
    assert not_an_object.value.status == 400
    with pytest.raises(ApiError) as bad_op:
        await api.patch(THINGS, "ns", "a", [{"op": "move", "path": "/x"}], patch_type="json")
    assert bad_op.value.status == 422


# --- delete ---------------------------------------------------------------------------------------


async def test_delete_uid_precondition() -> None:
    api = FakeApi()
    added = api.add(THINGS, thing())
    with pytest.raises(ApiError) as info:
        await api.delete(THINGS, "ns", "a", preconditions={"uid": "other"})
    assert info.value.conflict
    assert info.value.message == (
        f"Precondition failed: UID in precondition: other, "
        f"UID in object meta: {added['metadata']['uid']}"
    )
    assert api.obj(THINGS, "a", "ns") == added
    await api.delete(THINGS, "ns", "a", preconditions={"uid": added["metadata"]["uid"]})
    assert api.obj(THINGS, "a", "ns") is None
    assert api.calls[-1].preconditions == {"uid": added["metadata"]["uid"]}


async def test_finalizers_hold_a_deletion_until_removed() -> None:
    api = FakeApi(clock=lambda: WHEN)
    api.add(THINGS, thing(metadata={"name": "a", "namespace": "ns", "finalizers": ["f"]}))
    held = await api.delete(THINGS, "ns", "a")
    assert held is not None
    assert held["metadata"]["deletionTimestamp"] == "2030-04-05T06:07:08Z"
    assert api.obj(THINGS, "a", "ns") == held
    await api.patch(THINGS, "ns", "a", {"metadata": {"finalizers": None}})
    assert api.obj(THINGS, "a", "ns") is None


# --- failure injection and the request hook -------------------------------------------------------


async def test_queued_failures_are_raised_in_order_then_requests_pass() -> None:
    api = FakeApi()
    api.add(THINGS, thing())
    api.fail("get", "things", ApiError(500, "InternalError", "one"), ConnectionResetError("two"))
    with pytest.raises(ApiError, match="one"):
        await api.get(THINGS, "ns", "a")
    with pytest.raises(ConnectionResetError):
        await api.get(THINGS, "ns", "a")
    assert (await api.get(THINGS, "ns", "a"))["metadata"]["name"] == "a"
    assert [c.verb for c in api.calls] == ["get", "get", "get"]


async def test_failures_of_a_subresource_do_not_hit_the_main_resource() -> None:
    api = FakeApi()
    api.add(THINGS, thing())
    api.fail("patch", "things/status", ApiError(404, "NotFound", "gone"))
    await api.patch(THINGS, "ns", "a", {"spec": {"a": 1}})
    with pytest.raises(ApiError, match="gone"):
        await api.patch(THINGS, "ns", "a", {"status": {"s": 1}}, subresource="status")


async def test_errors_map_fails_one_request() -> None:
    api = FakeApi()
    api.errors[("list", "things")] = ApiError(503, "ServiceUnavailable", "later")
    with pytest.raises(ApiError, match="later"):
        await api.list(THINGS)
    assert (await api.list(THINGS))["items"] == []


async def test_request_hook_can_act_between_two_calls() -> None:
    api = FakeApi()

    def racer(verb: str, resource: Resource, namespace: str | None, name: str | None) -> None:
        if verb == "create":
            api.on_request = None
            api.add(resource, thing(str(name), namespace=str(namespace)))

    api.on_request = racer
    with pytest.raises(ApiError) as info:
        await api.create(THINGS, "ns", thing())
    assert info.value.already_exists


async def test_writes_and_clear_calls() -> None:
    api = FakeApi()
    await api.create(THINGS, "ns", thing())
    await api.create(NODES, "", {"metadata": {"name": "n"}})
    await api.get(THINGS, "ns", "a")
    await api.patch(THINGS, "ns", "a", {"spec": {}}, subresource="status")
    assert [(w.verb, w.plural) for w in api.writes()] == [
        ("create", "things"),
        ("create", "nodes"),
        ("patch", "things"),
    ]
    assert [w.subresource for w in api.writes(THINGS)] == [None, "status"]
    assert [w.verb for w in api.writes("nodes")] == ["create"]
    api.clear_calls()
    assert api.calls == []


# --- readers --------------------------------------------------------------------------------------


def test_reader_views_follow_the_store() -> None:
    api = FakeApi()

    def strip(obj: Obj) -> Obj:
        obj.pop("spec", None)
        return obj

    reader = api.reader(
        THINGS,
        indexes={"by-x": lambda o: [o["metadata"].get("labels", {}).get("x", "")]},
        transform=strip,
    )
    api.add(THINGS, thing("b", metadata={"name": "b", "namespace": "ns", "labels": {"x": "1"}}))
    api.add(THINGS, thing("a", spec={"big": True}))
    api.add(THINGS, thing("c", namespace="other"))

    got = reader.get("ns", "a")
    assert got is not None
    assert "spec" not in got
    assert reader.get("ns", "missing") is None
    assert [o["metadata"]["name"] for o in reader.list()] == ["a", "b", "c"]
    assert [o["metadata"]["name"] for o in reader.list("ns")] == ["a", "b"]
    assert [o["metadata"]["name"] for o in reader.list(labels={"x": "1"})] == ["b"]
    assert [o["metadata"]["name"] for o in reader.by_index("by-x", "1")] == ["b"]
    with pytest.raises(KeyError):
        reader.by_index("unknown", "1")

    api.mutate(THINGS, "b", lambda o: o["metadata"].update(labels={}), "ns")
    assert reader.by_index("by-x", "1") == []
    got["metadata"]["name"] = "edited"  # views are copies
    assert [o["metadata"]["name"] for o in reader.list("ns")] == ["a", "b"]
