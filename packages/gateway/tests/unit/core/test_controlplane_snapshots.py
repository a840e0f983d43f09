"""E2B's snapshot routes over a FakeApi, with a fake snapshot controller that marks new
SandboxSnapshots Ready (or Failed, or leaves them alone as a cluster without one does)."""

from __future__ import annotations

import pytest
from controlplane_helpers import create_sandbox as _create
from gateway_fakes import (
    OTHER,
    TENANT,
    Gateway,
    claim_of,
    snapshot_controller,
    started_gateway,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiError
from kube_agent_sandbox.gateway.annotations import LABEL_SNAPSHOT_SANDBOX


async def _snapshot(gw: Gateway, sid: str, body: dict[str, object] | None = None, key: str = ""):
    return await gw.client.post(
        f"/sandboxes/{sid}/snapshots", json=body or {}, headers=gw.headers(key or None)
    )


async def test_create_list_start_from_and_delete_a_snapshot(gateway: Gateway) -> None:
    sid = await _create(gateway)
    async with snapshot_controller(gateway.api):
        response = await _snapshot(gateway, sid, {"name": "before", "memory": False})
        assert response.status_code == 201, response.text
        assert response.json() == {"snapshotID": "before", "names": ["before"]}
        default = await _snapshot(gateway, sid)  # no mode: a filesystem snapshot, named for us
        assert default.status_code == 201, default.text
        generated = default.json()["snapshotID"]
        assert generated.startswith(f"{sid}-")
    stored = gateway.api.obj(SANDBOX_SNAPSHOTS, "before", TENANT)
    assert stored is not None
    sandbox = claim_of(gateway.api, sid)["status"]["sandbox"]["name"]
    assert stored["spec"] == {"sandboxName": sandbox, "mode": "Filesystem"}
    assert stored["metadata"]["annotations"][c.ANNOTATION_SNAPSHOT_WARM_POOL] == "base"
    assert stored["metadata"]["labels"][LABEL_SNAPSHOT_SANDBOX] == sid

    listed = await gateway.client.get("/snapshots", headers=gateway.headers())
    assert listed.status_code == 200
    assert sorted(s["snapshotID"] for s in listed.json()) == sorted(["before", generated])
    paged = await gateway.client.get("/snapshots?limit=1", headers=gateway.headers())
    assert len(paged.json()) == 1
    token = paged.headers["x-next-token"]
    rest = await gateway.client.get(
        f"/snapshots?limit=1&nextToken={token}", headers=gateway.headers()
    )
    assert len(rest.json()) == 1
    assert rest.json() != paged.json()
    named = await gateway.client.get("/snapshots?name=before", headers=gateway.headers())
    assert [s["snapshotID"] for s in named.json()] == ["before"]
    other_box = await gateway.client.get(
        "/snapshots?sandboxID=abcdefghijklmnopqrst", headers=gateway.headers()
    )
    assert other_box.json() == []
    of_box = await gateway.client.get(f"/snapshots?sandboxID={sid}", headers=gateway.headers())
    assert len(of_box.json()) == 2

    forked = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "before"}, headers=gateway.headers()
    )
    assert forked.status_code == 201, forked.text
    claim = claim_of(gateway.api, forked.json()["sandboxID"])
    assert claim["metadata"]["annotations"][c.ANNOTATION_SNAPSHOT] == "before"
    assert claim["spec"]["warmPoolRef"] == {"name": "base"}

    deleted = await gateway.client.delete("/templates/before", headers=gateway.headers())
    assert deleted.status_code == 204
    assert gateway.api.obj(SANDBOX_SNAPSHOTS, "before", TENANT) is None
    again = await gateway.client.delete("/templates/before", headers=gateway.headers())
    assert again.status_code == 404


async def test_another_tenant_sees_and_uses_none_of_them(gateway: Gateway) -> None:
    sid = await _create(gateway)
    async with snapshot_controller(gateway.api):
        assert (await _snapshot(gateway, sid, {"name": "mine"})).status_code == 201
    other = gateway.headers(gateway.other_key)
    assert (await _snapshot(gateway, sid, key=gateway.other_key)).status_code == 404
    assert (await gateway.client.get("/snapshots", headers=other)).json() == []
    created = await gateway.client.post("/v2/sandboxes", json={"templateID": "mine"}, headers=other)
    assert created.status_code == 404
    assert (await gateway.client.delete("/templates/mine", headers=other)).status_code == 404
    assert gateway.api.obj(SANDBOX_SNAPSHOTS, "mine", TENANT) is not None
    namespaces = {o["metadata"]["namespace"] for o in gateway.api.objects(SANDBOX_SNAPSHOTS)}
    assert namespaces == {TENANT}
    assert OTHER not in namespaces
    unauthorised = await gateway.client.get("/snapshots", headers={"X-API-KEY": "e2b_nope"})
    assert unauthorised.status_code == 401


async def test_memory_mode_takes_a_memory_snapshot(gateway: Gateway) -> None:
    sid = await _create(gateway)
    async with snapshot_controller(gateway.api):
        response = await _snapshot(gateway, sid, {"name": "live", "memory": True})
    assert response.status_code == 201, response.text
    assert response.json() == {"snapshotID": "live", "names": ["live"]}
    stored = gateway.api.obj(SANDBOX_SNAPSHOTS, "live", TENANT)
    assert stored is not None
    assert stored["spec"]["mode"] == "Memory"


async def test_memory_mode_on_a_node_that_cannot_names_what_is_missing(gateway: Gateway) -> None:
    sid = await _create(gateway)
    missing = "the kubelet on node n1 has no checkpoint API (404)"
    async with snapshot_controller(gateway.api, "MemorySnapshotUnsupported", missing):
        response = await _snapshot(gateway, sid, {"name": "live", "memory": True})
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == "snapshot_memory_unsupported"
    assert missing in body["message"]
    assert "filesystem" in body["message"]
    assert gateway.api.objects(SANDBOX_SNAPSHOTS) == []


@pytest.mark.parametrize(
    "body", [{"name": "Bad_Name"}, {"name": 5}, {"memory": "yes"}, {"name": "x" * 64}]
)
async def test_bad_requests_are_refused(gateway: Gateway, body: dict[str, object]) -> None:
    sid = await _create(gateway)
    response = await _snapshot(gateway, sid, body)
    assert response.status_code == 400, body
    assert gateway.api.objects(SANDBOX_SNAPSHOTS) == []


async def test_a_taken_name_and_a_paused_sandbox_are_conflicts(gateway: Gateway) -> None:
    sid = await _create(gateway)
    async with snapshot_controller(gateway.api):
        assert (await _snapshot(gateway, sid, {"name": "once"})).status_code == 201
        taken = await _snapshot(gateway, sid, {"name": "once"})
        assert taken.status_code == 409
        assert "exists" in taken.json()["message"]
        paused = await gateway.client.post(f"/sandboxes/{sid}/pause", headers=gateway.headers())
        assert paused.status_code == 204
        sandbox = claim_of(gateway.api, sid)["status"]["sandbox"]["name"]

        await gateway.state.index.wait_for(
            sid, lambda r: r is not None and r.suspended, namespace=TENANT, within=2
        )
        refused = await _snapshot(gateway, sid)
        assert refused.status_code == 409
        assert "not running" in refused.json()["message"]
        assert gateway.api.obj(SANDBOXES, sandbox, TENANT) is not None


async def test_a_failed_snapshot_is_answered_and_removed(gateway: Gateway) -> None:
    sid = await _create(gateway)
    async with snapshot_controller(gateway.api, outcome="PushFailed"):
        response = await _snapshot(gateway, sid, {"name": "broken"})
    assert response.status_code == 500
    assert "PushFailed" in response.json()["message"]
    assert "registry down" in response.json()["message"]
    assert gateway.api.obj(SANDBOX_SNAPSHOTS, "broken", TENANT) is None


async def test_without_a_snapshot_controller_the_answer_says_what_to_run() -> None:
    async with started_gateway(snapshot_ack_seconds=0.3) as gw:
        sid = await _create(gw)
        response = await _snapshot(gw, sid, {"name": "nobody"})
        assert response.status_code == 400
        assert response.json()["error_code"] == "snapshots_unavailable"
        assert "--snapshot-registry" in response.json()["message"]
        assert gw.api.obj(SANDBOX_SNAPSHOTS, "nobody", TENANT) is None


async def test_without_the_snapshot_api_the_answer_says_so(gateway: Gateway) -> None:
    sid = await _create(gateway)
    missing = ApiError(404, "NotFound", "the server could not find the requested resource")
    gateway.api.fail("create", SANDBOX_SNAPSHOTS.plural, missing)
    response = await _snapshot(gateway, sid)
    assert response.status_code == 400
    assert "no SandboxSnapshot API" in response.json()["message"]
    gateway.api.fail("list", SANDBOX_SNAPSHOTS.plural, missing)
    listed = await gateway.client.get("/snapshots", headers=gateway.headers())
    assert listed.status_code == 400
    assert "sandboxsnapshots.extensions.agents.x-k8s.io" in listed.json()["message"]


async def test_a_snapshot_without_a_recorded_pool_cannot_start_a_sandbox(gateway: Gateway) -> None:
    gateway.api.add(
        SANDBOX_SNAPSHOTS,
        {
            "metadata": {"name": "by-kubectl", "namespace": TENANT},
            "spec": {"sandboxName": "somebox"},
            "status": {"phase": "Ready"},
        },
    )
    response = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "by-kubectl"}, headers=gateway.headers()
    )
    assert response.status_code == 400
    assert c.ANNOTATION_SNAPSHOT_WARM_POOL in response.json()["message"]


async def test_fork_snapshots_once_and_starts_each_fork_from_it(gateway: Gateway) -> None:
    sid = await _create(gateway)
    async with snapshot_controller(gateway.api) as seen:
        response = await gateway.client.post(
            f"/sandboxes/{sid}/fork", json={"count": 2, "timeout": 60}, headers=gateway.headers()
        )
    assert response.status_code == 201, response.text
    forks = response.json()
    assert len(forks) == 2
    assert len(seen) == 1  # one snapshot for both
    (snapshot,) = gateway.api.objects(SANDBOX_SNAPSHOTS)
    ids = {f["sandbox"]["sandboxID"] for f in forks}
    assert len(ids) == 2
    assert sid not in ids
    for fork_id in ids:
        claim = claim_of(gateway.api, fork_id)
        assert (
            claim["metadata"]["annotations"][c.ANNOTATION_SNAPSHOT] == snapshot["metadata"]["name"]
        )


@pytest.mark.parametrize("body", [{"count": 0}, {"count": 21}, {"count": "2"}, {"timeout": -1}])
async def test_fork_refuses_bad_counts_and_other_tenants(
    gateway: Gateway, body: dict[str, object]
) -> None:
    sid = await _create(gateway)
    bad = await gateway.client.post(f"/sandboxes/{sid}/fork", json=body, headers=gateway.headers())
    assert bad.status_code == 400
    other = await gateway.client.post(
        f"/sandboxes/{sid}/fork", json={}, headers=gateway.headers(gateway.other_key)
    )
    assert other.status_code == 404
    assert gateway.api.objects(SANDBOX_SNAPSHOTS) == []
