"""The runtime against a real kube-apiserver: client verbs, informer list+watch, 410, leases."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
from informer_events import record_events

from kube_agent_sandbox.api.rest import EVENTS, LEASES
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ApiError,
    Controller,
    EventSink,
    Informer,
    LeaderElectionConfig,
    Manager,
    Obj,
    Request,
    Resource,
    Result,
    RuntimeMetrics,
    load_kubeconfig,
)
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.waiting import eventually

pytestmark = pytest.mark.integration

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
PODS = Resource("", "v1", "pods", "Pod")


@pytest.fixture
async def client(cluster: ClusterAccess) -> AsyncIterator[ApiClient]:
    api = ApiClient(load_kubeconfig(str(cluster.kubeconfig)), metrics=RuntimeMetrics())
    try:
        yield api
    finally:
        await api.close()


def cm(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": labels}, "data": {"v": "1"}}


async def test_client_verbs(client: ApiClient, namespace: str) -> None:
    created = await client.create(CONFIGMAPS, namespace, cm("a", app="x"), field_manager="t")
    assert created["metadata"]["uid"]
    got = await client.get(CONFIGMAPS, namespace, "a")
    assert got["data"] == {"v": "1"}

    stale = dict(got)
    got["data"] = {"v": "2"}
    updated = await client.update(CONFIGMAPS, namespace, "a", got)
    assert updated["data"] == {"v": "2"}
    stale["data"] = {"v": "3"}
    with pytest.raises(ApiError) as conflict:
        await client.update(CONFIGMAPS, namespace, "a", stale)
    assert conflict.value.conflict

    merged = await client.patch(CONFIGMAPS, namespace, "a", {"data": {"m": "1"}})
    assert merged["data"] == {"v": "2", "m": "1"}
    strategic = await client.patch(
        CONFIGMAPS, namespace, "a", {"data": {"s": "1"}}, patch_type="strategic"
    )
    assert strategic["data"]["s"] == "1"
    jsonp = await client.patch(
        CONFIGMAPS,
        namespace,
        "a",
        [{"op": "remove", "path": "/data/m"}],
        patch_type="json",
    )
    assert "m" not in jsonp["data"]
    applied = await client.patch(
        CONFIGMAPS,
        namespace,
        "a",
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"v": "applied"}},
        patch_type="apply",
        field_manager="applier",
        force=True,
    )
    assert applied["data"]["v"] == "applied"

    with pytest.raises(ApiError) as exists:
        await client.create(CONFIGMAPS, namespace, cm("a"))
    assert exists.value.already_exists
    with pytest.raises(ApiError) as missing:
        await client.get(CONFIGMAPS, namespace, "nope")
    assert missing.value.not_found
    with pytest.raises(ApiError) as precondition:
        await client.delete(CONFIGMAPS, namespace, "a", preconditions={"uid": "wrong"})
    assert precondition.value.status == 409
    await client.delete(
        CONFIGMAPS,
        namespace,
        "a",
        propagation_policy="Background",
        preconditions={"uid": created["metadata"]["uid"]},
    )
    with pytest.raises(ApiError) as gone:
        await client.get(CONFIGMAPS, namespace, "a")
    assert gone.value.not_found


async def test_status_subresource(client: ApiClient, namespace: str) -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]},
    }
    await client.create(PODS, namespace, pod)
    patched = await client.patch(
        PODS,
        namespace,
        "p",
        {"status": {"conditions": [{"type": "Custom", "status": "True"}]}},
        subresource="status",
    )
    assert any(c["type"] == "Custom" for c in patched["status"]["conditions"])
    # a status write through the main resource is ignored by the API server
    ignored = await client.patch(
        PODS, namespace, "p", {"status": {"conditions": [{"type": "Main", "status": "True"}]}}
    )
    assert not any(c["type"] == "Main" for c in ignored["status"].get("conditions", []))


async def test_paginated_list(client: ApiClient, namespace: str) -> None:
    await asyncio.gather(
        *(client.create(CONFIGMAPS, namespace, cm(f"c{i}", page="yes")) for i in range(25))
    )
    page = await client.list(CONFIGMAPS, namespace, label_selector="page=yes", limit=10)
    assert len(page["items"]) == 10
    assert page["metadata"]["continue"]
    names = [i["metadata"]["name"] for i in page["items"]]
    while page["metadata"].get("continue"):
        page = await client.list(
            CONFIGMAPS,
            namespace,
            label_selector="page=yes",
            limit=10,
            continue_token=page["metadata"]["continue"],
        )
        names += [i["metadata"]["name"] for i in page["items"]]
    assert sorted(names) == sorted(f"c{i}" for i in range(25))


async def test_informer_list_then_watch(client: ApiClient, namespace: str) -> None:
    await asyncio.gather(
        *(client.create(CONFIGMAPS, namespace, cm(f"pre{i}", app="x")) for i in range(1100))
    )
    await client.create(CONFIGMAPS, namespace, cm("other", app="y"))
    inf = Informer(client, CONFIGMAPS, namespace=namespace, label_selector="app=x")
    events = record_events(inf)
    inf.start()
    try:
        async with asyncio.timeout(60):
            await inf.wait_for_sync()
        assert len(inf) == 1100
        assert inf.get(namespace, "other") is None
        cached = inf.get(namespace, "pre0")
        assert cached is not None
        assert "managedFields" not in cached["metadata"]
        assert cached["kind"] == "ConfigMap"
        gets = client.metrics.registry.get_sample_value(
            "rest_client_requests_total",
            {"code": "200", "method": "GET", "host": urlsplit(client.config.host).netloc},
        )
        assert gets is not None
        assert gets >= 3  # 1100 objects in pages of 500
        events.clear()
        await client.create(CONFIGMAPS, namespace, cm("new", app="x"))
        await client.patch(CONFIGMAPS, namespace, "pre1", {"data": {"v": "2"}})
        await client.delete(CONFIGMAPS, namespace, "pre2")
        await eventually(lambda: len(events) == 3, within=30)
        assert events == [("add", "new"), ("update", "pre1"), ("delete", "pre2")]
        assert inf.get(namespace, "pre1")["data"] == {"v": "2"}  # type: ignore[index]
    finally:
        await inf.stop()


class Counting:
    def __init__(self) -> None:
        self.seen: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        return Result()


async def test_leader_election_with_two_managers(cluster: ClusterAccess, namespace: str) -> None:
    clients = [
        ApiClient(load_kubeconfig(str(cluster.kubeconfig)), metrics=RuntimeMetrics())
        for _ in range(2)
    ]
    recs = [Counting(), Counting()]
    managers = []
    for i, (api, rec) in enumerate(zip(clients, recs, strict=True)):
        mgr = Manager(
            api,
            leader_election=LeaderElectionConfig(
                lease_name="runtime-test",
                lease_namespace=namespace,
                identity=f"m{i}",
                lease_duration=4.0,
                renew_deadline=3.0,
                retry_period=0.5,
            ),
            metrics_bind_address="0",
            health_bind_address="0",
            metrics=RuntimeMetrics(),
        )
        inf_resource = CONFIGMAPS
        mgr.informer(inf_resource, namespace=namespace)
        mgr.add_controller(Controller(f"cm-{i}", for_resource=inf_resource, reconciler=rec))
        managers.append(mgr)
    await clients[0].create(CONFIGMAPS, namespace, cm("watched"))
    first = asyncio.create_task(managers[0].run())
    try:
        await eventually(managers[0].controllers_started.is_set, within=30)
        second = asyncio.create_task(managers[1].run())
        await asyncio.sleep(1.5)  # several retry periods: the standby must not take over
        assert not managers[1].leading.is_set()
        lease = await clients[0].get(LEASES, namespace, "runtime-test")
        assert lease["spec"]["holderIdentity"] == "m0"
        assert lease["spec"]["leaseDurationSeconds"] == 4
        assert Request(namespace, "watched") in recs[0].seen
        assert recs[1].seen == []

        managers[0].request_stop()
        await asyncio.wait_for(first, 30)
        # released on a clean stop: the standby takes over without waiting 4 s of expiry
        await eventually(managers[1].controllers_started.is_set, within=10)
        await eventually(lambda: Request(namespace, "watched") in recs[1].seen, within=30)
        lease = await clients[1].get(LEASES, namespace, "runtime-test")
        assert lease["spec"]["holderIdentity"] == "m1"
        assert lease["spec"]["leaseTransitions"] >= 1
        managers[1].request_stop()
        await asyncio.wait_for(second, 30)
        lease = await clients[1].get(LEASES, namespace, "runtime-test")
        assert lease["spec"]["holderIdentity"] in ("", None)
    finally:
        for mgr in managers:
            mgr.request_stop()
        for api in clients:
            await api.close()


async def test_events_are_accepted_and_aggregated(client: ApiClient, namespace: str) -> None:
    subject = await client.create(CONFIGMAPS, namespace, cm("subject"))
    subject.setdefault("kind", "ConfigMap")
    subject.setdefault("apiVersion", "v1")
    sink = EventSink(client, hostname="it-host")
    rec = sink.recorder("runtime-test-controller")
    rec.event(subject, type_="Normal", reason="Tested", action="Test", note="first")
    await sink.flush()
    for _ in range(2):
        rec.event(subject, type_="Normal", reason="Tested", action="Test", note="first")
    rec.event(subject, type_="Warning", reason="Broken", action="Test", note="second")
    await sink.flush()
    page = await client.list(EVENTS, namespace)
    events = {e["reason"]: e for e in page["items"]}
    assert set(events) == {"Tested", "Broken"}
    tested = events["Tested"]
    assert tested["regarding"]["uid"] == subject["metadata"]["uid"]
    assert tested["reportingController"] == "runtime-test-controller"
    assert tested["reportingInstance"] == "runtime-test-controller-it-host"
    assert tested["action"] == "Test"
    assert tested["series"]["count"] == 3
    assert events["Broken"]["type"] == "Warning"
