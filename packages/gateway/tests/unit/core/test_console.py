"""The web console's HTTP surface over a FakeApi: the page, the view, the long poll, actions.

The browser drives the same endpoints against the local cluster in
``tests/acceptance/test_console_browser.py``; here every branch gets a fast, exact test.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from controlplane_helpers import create_sandbox
from gateway_fakes import (
    OTHER,
    TENANT,
    Gateway,
    claim_of,
    ready_condition,
    snapshot_controller,
    started_gateway,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.gateway.console import routes, view
from kube_agent_sandbox.gateway.console.details import CORE_EVENTS, event_row

API = "/console/api"


def bare_sandbox(name: str, namespace: str = TENANT, *, pool: str | None = None) -> dict[str, Any]:
    """A Ready Sandbox made without the gateway (or a warm pool's member, with ``pool``)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "creationTimestamp": "2026-12-01T20:00:00Z",
    }
    if pool is not None:
        meta["ownerReferences"] = [{"kind": "SandboxWarmPool", "name": pool, "uid": "u"}]
    return {
        "metadata": meta,
        "spec": {"operatingMode": "Running"},
        "status": {"conditions": [ready_condition()]},
    }


async def state_of(gw: Gateway, key: str | None = None) -> dict[str, Any]:
    response = await gw.client.get(f"{API}/state", headers=gw.headers(key))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def row(body: dict[str, Any], sandbox_id: str) -> dict[str, Any]:
    (found,) = [r for r in body["sandboxes"] if r["id"] == sandbox_id]
    return found


async def test_page_and_static_files_are_served_with_a_strict_policy(gateway: Gateway) -> None:
    redirect = await gateway.client.get("/console")
    assert redirect.status_code == 308
    assert redirect.headers["location"] == "/console/"
    page = await gateway.client.get("/console/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert '<label for="api-key">API key</label>' in page.text
    for name, media in (("console.js", "text/javascript"), ("console.css", "text/css")):
        response = await gateway.client.get(f"/console/static/{name}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(media)
    for missing in ("nope.js", "..%2Froutes.py"):
        assert (await gateway.client.get(f"/console/static/{missing}")).status_code == 404


@pytest.mark.parametrize("key", [None, "", "e2b_" + "0" * 40, "not-a-key"])
async def test_every_api_call_needs_a_valid_key(gateway: Gateway, key: str | None) -> None:
    headers = {} if key is None else {"X-API-KEY": key}
    assert (await gateway.client.get(f"{API}/state", headers=headers)).status_code == 401
    assert (await gateway.client.get(f"{API}/sandboxes/x", headers=headers)).status_code == 401
    for action in ("suspend", "resume"):
        response = await gateway.client.post(f"{API}/sandboxes/x/{action}", headers=headers)
        assert response.status_code == 401
    assert (await gateway.client.delete(f"{API}/sandboxes/x", headers=headers)).status_code == 401


async def test_view_lists_the_tenants_sandboxes_and_pools_only(gateway: Gateway) -> None:
    sid = await create_sandbox(gateway)
    gateway.api.add(SANDBOXES, bare_sandbox("by-kubectl"))
    gateway.api.add(SANDBOXES, bare_sandbox("base-abcde", pool="base"))
    gateway.api.add(SANDBOXES, bare_sandbox("theirs", OTHER))
    body = await _until(gateway, lambda b: len(b["sandboxes"]) == 3)
    assert body["namespace"] == TENANT
    assert isinstance(body["tag"], str)
    mine = row(body, sid)
    assert mine["kind"] == view.KIND_GATEWAY
    assert mine["state"] == "Running"
    assert mine["claim"] == sid
    assert mine["sandbox"] == mine["pod"] == f"pool-{sid[:8]}"
    assert mine["template"] == "base"
    assert mine["actions"] == {
        "suspend": None,
        "resume": "Not suspended.",
        "snapshot": None,
        "delete": None,
    }
    bare = row(body, "by-kubectl")
    assert bare["kind"] == view.KIND_SANDBOX
    assert bare["actions"]["delete"] == view.NOT_GATEWAY_DELETE
    assert bare["actions"]["suspend"] is None
    assert bare["actions"]["snapshot"] == view.NOT_GATEWAY_SNAPSHOT
    member = row(body, "base-abcde")
    assert member["kind"] == view.KIND_POOL_MEMBER
    assert member["pool"] == "base"
    assert member["template"] == "base"  # the pool's
    assert set(member["actions"].values()) == {view.POOL_OWNED}
    assert [p["name"] for p in body["pools"]] == ["base"]
    assert body["pools"][0] | {"created": ""} == {
        "name": "base",
        "template": "base",
        "replicas": 1,
        "ready": 0,
        "state": "Filling",
        "created": "",
    }
    other = await state_of(gateway, gateway.other_key)
    assert other["namespace"] == OTHER
    assert [r["id"] for r in other["sandboxes"]] == ["theirs"]


async def _until(gw: Gateway, predicate: Any, key: str | None = None) -> dict[str, Any]:
    """The view once ``predicate`` holds (the long poll wakes on every change)."""
    body = await state_of(gw, key)
    async with asyncio.timeout(10):
        while not predicate(body):
            response = await gw.client.get(
                f"{API}/state", headers={**gw.headers(key), "X-Console-Known": body["tag"]}
            )
            if response.status_code == 200:
                body = response.json()
    return body


async def test_long_poll_answers_when_the_view_changes(gateway: Gateway) -> None:
    before = await state_of(gateway)
    headers = {**gateway.headers(), "X-Console-Known": before["tag"]}
    waiting = asyncio.create_task(gateway.client.get(f"{API}/state", headers=headers))
    await asyncio.sleep(0)
    assert not waiting.done()
    gateway.api.add(SANDBOXES, bare_sandbox("late"))
    async with asyncio.timeout(10):
        response = await waiting
    assert response.status_code == 200
    after = response.json()
    assert after["tag"] != before["tag"]
    assert [r["id"] for r in after["sandboxes"]] == ["late"]


async def test_long_poll_ends_with_204_when_nothing_changes(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routes, "POLL_SECONDS", 0.2)
    before = await state_of(gateway)
    # another tenant's change wakes the poll but does not change this tenant's view
    gateway.api.add(SANDBOXES, bare_sandbox("theirs", OTHER))
    response = await gateway.client.get(
        f"{API}/state", headers={**gateway.headers(), "X-Console-Known": before["tag"]}
    )
    assert response.status_code == 204


async def test_suspend_resume_and_delete_a_gateway_sandbox(gateway: Gateway) -> None:
    sid = await create_sandbox(gateway, {"templateID": "base", "timeout": 300})
    sandbox_name = f"pool-{sid[:8]}"
    response = await gateway.client.post(
        f"{API}/sandboxes/{sid}/suspend", headers=gateway.headers()
    )
    assert response.status_code == 204, response.text
    stored = gateway.api.obj(SANDBOXES, sandbox_name, TENANT)
    assert stored is not None
    assert stored["spec"]["operatingMode"] == c.OPERATING_MODE_SUSPENDED
    assert "lifecycle" not in claim_of(gateway.api, sid)["spec"]  # paused: no deadline
    body = await _until(gateway, lambda b: row(b, sid)["state"] != "Running")
    assert row(body, sid)["actions"]["suspend"] == "Not running."
    again = await gateway.client.post(f"{API}/sandboxes/{sid}/suspend", headers=gateway.headers())
    assert again.status_code == 409
    response = await gateway.client.post(f"{API}/sandboxes/{sid}/resume", headers=gateway.headers())
    assert response.status_code == 204, response.text
    stored = gateway.api.obj(SANDBOXES, sandbox_name, TENANT)
    assert stored is not None
    assert stored["spec"]["operatingMode"] == c.OPERATING_MODE_RUNNING
    assert claim_of(gateway.api, sid)["spec"]["lifecycle"]["shutdownTime"]  # deadline is back
    response = await gateway.client.delete(f"{API}/sandboxes/{sid}", headers=gateway.headers())
    assert response.status_code == 204
    assert gateway.api.obj(SANDBOX_CLAIMS, sid, TENANT) is None


async def test_another_tenant_gets_404_and_changes_nothing(gateway: Gateway) -> None:
    sid = await create_sandbox(gateway)
    before = claim_of(gateway.api, sid)["metadata"]["resourceVersion"]
    other = gateway.headers(gateway.other_key)
    assert (await gateway.client.get(f"{API}/sandboxes/{sid}", headers=other)).status_code == 404
    for action in ("suspend", "resume"):
        response = await gateway.client.post(f"{API}/sandboxes/{sid}/{action}", headers=other)
        assert response.status_code == 404
    assert (await gateway.client.delete(f"{API}/sandboxes/{sid}", headers=other)).status_code == 404
    assert claim_of(gateway.api, sid)["metadata"]["resourceVersion"] == before
    assert sid not in [r["id"] for r in (await state_of(gateway, gateway.other_key))["sandboxes"]]


async def test_bare_sandboxes_suspend_and_resume_but_are_not_deleted(gateway: Gateway) -> None:
    gateway.api.add(SANDBOXES, bare_sandbox("by-kubectl"))
    gateway.api.add(SANDBOXES, bare_sandbox("base-abcde", pool="base"))
    await _until(gateway, lambda b: len(b["sandboxes"]) == 2)
    url = f"{API}/sandboxes/by-kubectl"
    assert (
        await gateway.client.post(f"{url}/suspend", headers=gateway.headers())
    ).status_code == 204
    stored = gateway.api.obj(SANDBOXES, "by-kubectl", TENANT)
    assert stored is not None
    assert stored["spec"]["operatingMode"] == c.OPERATING_MODE_SUSPENDED
    await _until(gateway, lambda b: row(b, "by-kubectl")["state"] != "Running")
    assert (
        await gateway.client.post(f"{url}/resume", headers=gateway.headers())
    ).status_code == 204
    stored = gateway.api.obj(SANDBOXES, "by-kubectl", TENANT)
    assert stored is not None
    assert stored["spec"]["operatingMode"] == c.OPERATING_MODE_RUNNING
    refused = await gateway.client.delete(url, headers=gateway.headers())
    assert refused.status_code == 409
    assert view.NOT_GATEWAY_DELETE in refused.json()["message"]
    assert gateway.api.obj(SANDBOXES, "by-kubectl", TENANT) is not None
    member = await gateway.client.post(
        f"{API}/sandboxes/base-abcde/suspend", headers=gateway.headers()
    )
    assert member.status_code == 409
    assert view.POOL_OWNED in member.json()["message"]


async def test_snapshot_action_takes_a_snapshot_and_says_what_it_is(gateway: Gateway) -> None:
    sid = await create_sandbox(gateway)
    async with snapshot_controller(gateway.api):
        response = await gateway.client.post(
            f"{API}/sandboxes/{sid}/snapshot", headers=gateway.headers()
        )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["snapshotID"].startswith(f"{sid}-")
    assert body["image"].startswith("reg.example/")
    assert body["size"] == 42
    stored = gateway.api.obj(SANDBOX_SNAPSHOTS, body["snapshotID"], TENANT)
    assert stored is not None
    assert stored["spec"]["sandboxName"] == f"pool-{sid[:8]}"
    other = await gateway.client.post(
        f"{API}/sandboxes/{sid}/snapshot", headers=gateway.headers(gateway.other_key)
    )
    assert other.status_code == 404


async def test_snapshot_action_refusals_say_why(gateway: Gateway) -> None:
    sid = await create_sandbox(gateway)
    paused = await gateway.client.post(f"/sandboxes/{sid}/pause", headers=gateway.headers())
    assert paused.status_code == 204
    await gateway.state.index.wait_for(
        sid, lambda r: r is not None and r.suspended, namespace=TENANT, within=2
    )
    refused = await gateway.client.post(
        f"{API}/sandboxes/{sid}/snapshot", headers=gateway.headers()
    )
    assert refused.status_code == 409
    assert "Not running" in refused.json()["message"]
    gateway.api.add(SANDBOXES, bare_sandbox("by-kubectl"))
    await _until(gateway, lambda b: any(r["id"] == "by-kubectl" for r in b["sandboxes"]))
    bare = await gateway.client.post(
        f"{API}/sandboxes/by-kubectl/snapshot", headers=gateway.headers()
    )
    assert bare.status_code == 409
    assert "agent-sandbox snapshot create" in bare.json()["message"]
    assert gateway.api.objects(SANDBOX_SNAPSHOTS) == []


async def test_snapshot_action_without_a_controller_says_what_to_run() -> None:
    async with started_gateway(snapshot_ack_seconds=0.3) as gw:
        sid = await create_sandbox(gw)
        response = await gw.client.post(f"{API}/sandboxes/{sid}/snapshot", headers=gw.headers())
    assert response.status_code == 400
    assert "--snapshot-registry" in response.json()["message"]


async def test_details_carry_events_and_say_why_logs_are_missing(gateway: Gateway) -> None:
    sid = await create_sandbox(gateway)
    sandbox_name = f"pool-{sid[:8]}"
    for i, (kind, name) in enumerate(
        [("Sandbox", sandbox_name), ("SandboxClaim", sid), ("Sandbox", "unrelated")]
    ):
        gateway.api.add(
            CORE_EVENTS,
            {
                "metadata": {"name": f"ev-{i}", "namespace": TENANT},
                "involvedObject": {"kind": kind, "name": name},
                "type": "Normal",
                "reason": f"Reason{i}",
                "message": f"message {i}",
                "lastTimestamp": f"2026-12-01T21:0{i}:00Z",
            },
        )
    response = await gateway.client.get(f"{API}/sandboxes/{sid}", headers=gateway.headers())
    assert response.status_code == 200
    body = response.json()
    assert body["sandbox"]["id"] == sid
    assert [e["reason"] for e in body["events"]] == ["Reason1", "Reason0"]  # newest first
    assert body["events"][0]["object"] == f"SandboxClaim/{sid}"
    assert body["eventsError"] == ""
    # the FakeApi has no cluster connection: the reason is shown instead of lines
    assert body["log"] == {
        "lines": [],
        "unavailable": "The gateway has no cluster connection for logs.",
    }
    missing = await gateway.client.get(f"{API}/sandboxes/nope", headers=gateway.headers())
    assert missing.status_code == 404


def test_event_row_prefers_the_series_time_and_count() -> None:
    event = {
        "metadata": {"creationTimestamp": "2026-12-01T20:00:00Z"},
        "involvedObject": {"kind": "Pod", "name": "p"},
        "series": {"lastObservedTime": "2026-12-01T21:00:00Z", "count": 4},
        "reason": "BackOff",
    }
    assert event_row(event) == {
        "time": "2026-12-01T21:00:00Z",
        "type": "",
        "reason": "BackOff",
        "object": "Pod/p",
        "message": "",
        "count": 4,
    }
