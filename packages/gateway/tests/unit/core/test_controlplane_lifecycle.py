"""The E2B control-plane endpoints after create over a FakeApi: detail, timeouts, pause, list."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from typing import Any

import httpx
import pytest
from controlplane_helpers import create_sandbox as _create
from gateway_fakes import TENANT, Gateway, claim_of, started_gateway
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import ApiError
from kube_agent_sandbox.gateway.controlplane.models import parse_time
from kube_agent_sandbox.gateway.envvars import decode_env, load_env


async def test_get_detail(gateway: Gateway) -> None:
    sid = await _create(gateway, {"templateID": "base", "metadata": {"a": "b"}, "timeout": 60})
    response = await gateway.client.get(f"/sandboxes/{sid}", headers=gateway.headers())
    assert response.status_code == 200
    detail = response.json()
    assert detail["sandboxID"] == sid
    assert detail["state"] == "running"
    assert detail["metadata"] == {"a": "b"}
    assert detail["cpuCount"] == 2
    assert detail["memoryMB"] == 1024
    assert detail["envdVersion"] == "0.6.3"
    assert detail["lifecycle"] == {"autoResume": False, "onTimeout": "kill"}
    started, ended = parse_time(detail["startedAt"]), parse_time(detail["endAt"])
    assert started is not None
    assert ended is not None
    assert ended > started


async def test_set_timeout_overwrites_and_connect_only_extends(gateway: Gateway) -> None:
    sid = await _create(gateway, {"templateID": "base", "timeout": 600})

    def shutdown() -> float:
        text = claim_of(gateway.api, sid)["spec"]["lifecycle"]["shutdownTime"]
        moment = parse_time(text)
        assert moment is not None
        return moment.timestamp()

    before = shutdown()
    response = await gateway.client.post(
        f"/sandboxes/{sid}/timeout", json={"timeout": 30}, headers=gateway.headers()
    )
    assert response.status_code == 204
    shortened = shutdown()
    assert before - shortened >= 500
    connected = await gateway.client.post(
        f"/v2/sandboxes/{sid}/connect", json={"timeout": 10}, headers=gateway.headers()
    )
    assert connected.status_code == 200
    assert connected.json()["sandboxID"] == sid
    assert shutdown() == shortened  # never shortened
    v1 = await gateway.client.post(
        f"/sandboxes/{sid}/connect", json={"timeout": 900}, headers=gateway.headers()
    )
    assert v1.status_code == 200
    assert shutdown() - shortened >= 800
    for bad in ({}, {"timeout": "x"}, {"timeout": -5}):
        response = await gateway.client.post(
            f"/sandboxes/{sid}/timeout", json=bad, headers=gateway.headers()
        )
        assert response.status_code == 400, bad


async def test_claims_ask_their_suspends_to_keep_the_files(gateway: Gateway) -> None:
    sid = await _create(gateway)
    annotations = claim_of(gateway.api, sid)["metadata"]["annotations"]
    assert annotations[keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND] == keepstate.MODE_FILESYSTEM


def _pauses(gateway: Gateway, memory: str, kept: str) -> float:
    return float(gateway.state.metrics.pauses_total.labels(memory=memory, kept=kept)._value.get())


def _opt_in(obj: Any) -> tuple[str | None, str | None]:
    annotations = obj["metadata"].get("annotations") or {}
    return (
        annotations.get(keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND),
        annotations.get(keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK),
    )


FILES = (keepstate.MODE_FILESYSTEM, None)
MEMORY = (keepstate.MODE_MEMORY, keepstate.MODE_FILESYSTEM)


@pytest.mark.parametrize("body", [{"memory": True}, {}])
async def test_pause_asking_for_memory_keeps_the_files_and_says_so(
    gateway: Gateway, body: dict[str, Any]
) -> None:
    # --pause-keeps-memory is off by default; E2B's JavaScript SDK before 2.46 sends
    # memory: true on every pause(), and E2B's API reads no memory as true
    sid = await _create(gateway)
    before = _pauses(gateway, "true", "filesystem")
    response = await gateway.client.post(
        f"/sandboxes/{sid}/pause", json=body, headers=gateway.headers()
    )
    assert response.status_code == 204
    assert response.headers["X-Agent-Sandbox-Kept"] == "filesystem"
    assert _pauses(gateway, "true", "filesystem") == before + 1
    sandbox = gateway.api.obj(SANDBOXES, f"pool-{sid[:8]}", TENANT)
    assert sandbox is not None
    assert sandbox["spec"]["operatingMode"] == "Suspended"
    assert _opt_in(sandbox) == FILES
    assert _opt_in(claim_of(gateway.api, sid)) == FILES


@pytest.mark.parametrize(
    ("body", "header", "wanted"),
    [
        ({"memory": True}, "memory", MEMORY),
        ({}, "memory", MEMORY),  # E2B: a pause keeps the memory unless told not to
        ({"memory": None}, "memory", MEMORY),
        ({"memory": False}, "filesystem", FILES),
    ],
)
async def test_with_pause_keeps_memory_a_pause_asks_for_memory_with_the_files_as_fallback(
    body: dict[str, Any], header: str, wanted: tuple[str | None, str | None]
) -> None:
    async with started_gateway(pause_keeps_memory=True) as gateway:
        sid = await _create(gateway, {"templateID": "base", "autoPause": True})
        assert _opt_in(claim_of(gateway.api, sid)) == MEMORY  # what its auto-pause keeps
        response = await gateway.client.post(
            f"/sandboxes/{sid}/pause", json=body, headers=gateway.headers()
        )
        assert response.status_code == 204
        assert response.headers["X-Agent-Sandbox-Kept"] == header
        memory = "false" if body.get("memory") is False else "true"
        assert _pauses(gateway, memory, header) == 1
        sandbox = gateway.api.obj(SANDBOXES, f"pool-{sid[:8]}", TENANT)
        assert sandbox is not None
        assert sandbox["spec"]["operatingMode"] == "Suspended"
        assert _opt_in(sandbox) == wanted


async def test_auto_pause_memory_false_makes_the_claim_keep_the_files_only() -> None:
    async with started_gateway(pause_keeps_memory=True) as gateway:
        sid = await _create(
            gateway, {"templateID": "base", "autoPause": True, "autoPauseMemory": False}
        )
        assert _opt_in(claim_of(gateway.api, sid)) == (keepstate.MODE_FILESYSTEM, None)
        bad = await gateway.client.post(
            "/sandboxes",
            json={"templateID": "base", "autoPauseMemory": "no"},
            headers=gateway.headers(),
        )
        assert bad.status_code == 400
        assert "autoPauseMemory" in bad.json()["message"]


async def test_without_pause_keeps_filesystem_only_volumes_are_kept() -> None:
    async with started_gateway(pause_keeps_filesystem=False) as gateway:
        sid = await _create(gateway)
        assert _opt_in(claim_of(gateway.api, sid)) == (None, None)
        response = await gateway.client.post(
            f"/sandboxes/{sid}/pause", json={}, headers=gateway.headers()
        )
        assert response.headers["X-Agent-Sandbox-Kept"] == "volumes"
        sandbox = gateway.api.obj(SANDBOXES, f"pool-{sid[:8]}", TENANT)
        assert sandbox is not None
        assert _opt_in(sandbox) == (None, None)


@pytest.mark.parametrize("body", [b"[1]", b'{"memory": "yes"}', b'{"memory": 1}'])
async def test_pause_with_a_bad_body_is_refused_and_changes_nothing(
    gateway: Gateway, body: bytes
) -> None:
    sid = await _create(gateway)
    bad = await gateway.client.post(
        f"/sandboxes/{sid}/pause",
        content=body,
        headers={**gateway.headers(), "content-type": "application/json"},
    )
    assert bad.status_code == 400
    sandbox = gateway.api.obj(SANDBOXES, f"pool-{sid[:8]}", TENANT)
    assert sandbox is not None
    assert sandbox["spec"].get("operatingMode") != "Suspended"
    ok = await gateway.client.post(
        f"/sandboxes/{sid}/pause", json={"memory": False}, headers=gateway.headers()
    )
    assert ok.status_code == 204


async def test_pause_then_connect_resumes(gateway: Gateway) -> None:
    sid = await _create(gateway)
    sandbox_name = f"pool-{sid[:8]}"
    response = await gateway.client.post(f"/sandboxes/{sid}/pause", headers=gateway.headers())
    assert response.status_code == 204
    sandbox = gateway.api.obj(SANDBOXES, sandbox_name, TENANT)
    assert sandbox is not None
    assert sandbox["spec"]["operatingMode"] == "Suspended"
    # the pause keeps the files (where the controller runs the state keeper)
    assert sandbox["metadata"]["annotations"][keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND] == (
        keepstate.MODE_FILESYSTEM
    )
    assert "lifecycle" not in claim_of(gateway.api, sid)["spec"]  # paused: no expiry
    # the fake "controller" suspends: Suspended=True, pod gone
    from kube_agent_sandbox.api.rest import PODS

    def suspended(obj: dict[str, object]) -> None:
        obj["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}

    gateway.api.mutate(SANDBOXES, sandbox_name, suspended, namespace=TENANT)
    await gateway.api.delete(PODS, TENANT, sandbox_name)
    await asyncio.sleep(0.05)
    again = await gateway.client.post(f"/sandboxes/{sid}/pause", headers=gateway.headers())
    assert again.status_code == 409
    listed = await gateway.client.get("/v2/sandboxes?state=paused", headers=gateway.headers())
    assert [s["sandboxID"] for s in listed.json()] == [sid]
    assert listed.json()[0]["state"] == "paused"

    async def resume_soon() -> None:
        for _ in range(200):
            obj = gateway.api.obj(SANDBOXES, sandbox_name, TENANT)
            if obj and obj["spec"].get("operatingMode") == "Running":
                break
            await asyncio.sleep(0.01)

        def running(obj: dict[str, object]) -> None:
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}

        gateway.api.mutate(SANDBOXES, sandbox_name, running, namespace=TENANT)
        gateway.api.add(
            PODS,
            {
                "metadata": {
                    "name": sandbox_name,
                    "namespace": TENANT,
                    "labels": {c.LABEL_SANDBOX_NAME_HASH: "abc"},
                },
                "status": {"podIP": "10.0.0.8"},
            },
        )

    helper = asyncio.create_task(resume_soon())
    response = await gateway.client.post(
        f"/v2/sandboxes/{sid}/connect", json={"timeout": 60}, headers=gateway.headers()
    )
    await helper
    assert response.status_code == 201, response.text
    assert "lifecycle" in claim_of(gateway.api, sid)["spec"]


async def test_kill(gateway: Gateway) -> None:
    sid = await _create(gateway)
    response = await gateway.client.delete(f"/sandboxes/{sid}", headers=gateway.headers())
    assert response.status_code == 204
    assert gateway.api.obj(SANDBOX_CLAIMS, sid, TENANT) is None
    # read-your-writes: the answer comes after the gateway's own cache has seen the delete
    detail = await gateway.client.get(f"/sandboxes/{sid}", headers=gateway.headers())
    assert detail.status_code == 404
    again = await gateway.client.delete(f"/sandboxes/{sid}", headers=gateway.headers())
    assert again.status_code == 404


async def test_list_filters_and_pages(gateway: Gateway) -> None:
    ids = []
    for i in range(5):
        ids.append(
            await _create(
                gateway,
                {"templateID": "base", "metadata": {"team": "x" if i % 2 else "y", "n": str(i)}},
            )
        )
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        params = {"limit": "2", **({"nextToken": token} if token else {})}
        response = await gateway.client.get(
            "/v2/sandboxes", params=params, headers=gateway.headers()
        )
        assert response.status_code == 200
        assert response.headers["x-total-running"] == "5"
        pages += 1
        seen.extend(s["sandboxID"] for s in response.json())
        token = response.headers.get("x-next-token")
        if not token:
            break
    assert pages == 3
    assert sorted(seen) == sorted(ids)
    # the SDK's metadata encoding: quote each part, urlencode, then the query string
    quoted = urllib.parse.urlencode({urllib.parse.quote("team"): urllib.parse.quote("x")})
    response = await gateway.client.get(
        "/v2/sandboxes", params={"metadata": quoted}, headers=gateway.headers()
    )
    got = {s["sandboxID"] for s in response.json()}
    assert got == {ids[1], ids[3]}
    both = urllib.parse.urlencode({"team": "y", "n": "2"})
    response = await gateway.client.get(
        "/v2/sandboxes", params={"metadata": both}, headers=gateway.headers()
    )
    assert [s["sandboxID"] for s in response.json()] == [ids[2]]
    none = await gateway.client.get(
        "/v2/sandboxes", params={"state": "paused"}, headers=gateway.headers()
    )
    assert none.json() == []
    for params in (
        {"limit": "0"},
        {"limit": "x"},
        {"state": "gone"},
        {"nextToken": "!!"},
        {"metadata": "novalue"},
        {"order": "up"},
    ):
        bad = await gateway.client.get("/v2/sandboxes", params=params, headers=gateway.headers())
        assert bad.status_code == 400, params


async def test_metrics_come_from_the_daemon(gateway: Gateway) -> None:
    seen: list[httpx.Request] = []
    answer: dict[str, Any] = {
        "ts": 1764626400,
        "cpu_count": 2,
        "cpu_used_pct": 12.5,
        "mem_total": 2048,
        "mem_used": 1024,
        "mem_cache": 10,
        "disk_total": 100,
        "disk_used": 50,
    }

    def daemon(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/metrics":
            return httpx.Response(200, json=answer)
        return httpx.Response(204)

    gateway.state.http = httpx.AsyncClient(transport=httpx.MockTransport(daemon))
    sid = await _create(gateway)
    response = await gateway.client.get(f"/sandboxes/{sid}/metrics", headers=gateway.headers())
    assert response.status_code == 200
    (sample,) = response.json()
    assert sample["timestampUnix"] == 1764626400
    assert sample["timestamp"] == "2025-12-01T22:00:00Z"
    assert (sample["cpuCount"], sample["cpuUsedPct"], sample["memUsed"]) == (2, 12.5, 1024)
    assert (sample["memTotal"], sample["memCache"], sample["diskUsed"]) == (2048, 10, 50)
    uid = claim_of(gateway.api, sid)["metadata"]["uid"]
    assert seen[-1].headers["x-access-token"] == gateway.state.tokens.envd_access_token(uid)
    for garbage in ({}, {"ts": "x"}, {"ts": True}):
        answer.clear()
        answer.update(garbage)
        response = await gateway.client.get(f"/sandboxes/{sid}/metrics", headers=gateway.headers())
        assert response.json() == [], garbage
    await gateway.state.http.aclose()
    # no daemon at all: no samples
    gateway.state.http = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda r: httpx.Response(502))
    )
    response = await gateway.client.get(f"/sandboxes/{sid}/metrics", headers=gateway.headers())
    assert response.json() == []
    await gateway.state.http.aclose()


async def test_data_plane_requests_go_to_the_data_plane(gateway: Gateway) -> None:
    seen: list[str] = []

    async def data_plane(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["path"])
        await PlainTextResponse("data plane", status_code=299)(scope, receive, send)

    gateway.state.data_plane = data_plane
    sid = await _create(gateway)
    by_header = await gateway.client.get(
        "/sandboxes", headers={**gateway.headers(), "E2b-Sandbox-Id": sid}
    )
    assert by_header.status_code == 299
    by_host = await gateway.client.get("/health", headers={"Host": f"49983-{sid}.example.org"})
    assert by_host.status_code == 299
    assert seen == ["/sandboxes", "/health"]
    control = await gateway.client.get("/health", headers={"Host": "api.example.org"})
    assert control.json() == {"status": "ok"}


async def test_heartbeat_path_is_served_by_the_gateway(gateway: Gateway) -> None:
    async def data_plane(scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse("data plane", status_code=299)(scope, receive, send)

    gateway.state.data_plane = data_plane
    sid = await _create(gateway)
    uid = claim_of(gateway.api, sid)["metadata"]["uid"]
    headers = {"E2b-Sandbox-Id": sid}
    wrong = await gateway.client.post(
        "/_gateway/heartbeat", headers={**headers, "X-Access-Token": "nope"}
    )
    assert wrong.status_code == 401
    right = await gateway.client.post(
        "/_gateway/heartbeat",
        headers={**headers, "X-Access-Token": gateway.state.tokens.envd_access_token(uid)},
    )
    assert right.status_code == 204
    other_path = await gateway.client.post("/_gateway/other", headers=headers)
    assert other_path.status_code == 299


async def test_env_vars_are_kept_in_a_claim_owned_secret_for_reinits(gateway: Gateway) -> None:
    inits: list[dict[str, Any]] = []

    def daemon(request: httpx.Request) -> httpx.Response:
        inits.append(json.loads(request.content))
        return httpx.Response(204)

    gateway.state.http = httpx.AsyncClient(transport=httpx.MockTransport(daemon))
    sid = await _create(gateway, {"templateID": "base", "envVars": {"TOKEN": "s3cret"}})
    assert inits[-1]["envVars"] == {"TOKEN": "s3cret"}
    claim = claim_of(gateway.api, sid)
    secret = gateway.api.obj(SECRETS, f"{sid}-env", TENANT)
    assert secret is not None
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "SandboxClaim",
        sid,
        claim["metadata"]["uid"],
    )
    assert decode_env(secret) == {"TOKEN": "s3cret"}
    assert "s3cret" not in json.dumps(claim)
    record = gateway.state.index.lookup(sid)
    assert record is not None
    # what a resume re-inits a new pod with
    assert await gateway.state.init_sandbox(
        record, env_vars=await load_env(gateway.api, TENANT, claim)
    )
    assert inits[-1]["envVars"] == {"TOKEN": "s3cret"}
    # without envVars no Secret is written, and the claim says none is needed
    plain = await _create(gateway)
    assert gateway.api.obj(SECRETS, f"{plain}-env", TENANT) is None
    assert await load_env(gateway.api, TENANT, claim_of(gateway.api, plain)) == {}
    await gateway.state.http.aclose()


async def test_hostile_bodies_are_bounded_and_refused(gateway: Gateway) -> None:
    huge = b'{"templateID": "base", "metadata": {"a": "' + b"x" * (2 << 20) + b'"}}'
    response = await gateway.client.post("/v2/sandboxes", content=huge, headers=gateway.headers())
    assert response.status_code == 413
    assert response.headers["should-retry"] == "false"
    big_meta = {"templateID": "base", "metadata": {f"k{i}": "v" * 100 for i in range(1000)}}
    response = await gateway.client.post("/v2/sandboxes", json=big_meta, headers=gateway.headers())
    assert response.status_code == 400
    assert "metadata" in response.json()["message"]
    assert gateway.api.objects(SANDBOX_CLAIMS) == []
    sid = await _create(gateway)
    for path in (f"/sandboxes/{sid}/timeout", f"/v2/sandboxes/{sid}/connect"):
        for content in (b"[1]", b"{bad", b'"s"'):
            bad = await gateway.client.post(path, content=content, headers=gateway.headers())
            assert bad.status_code == 400, (path, content)
    for path in ("/sandboxes/..%2F..%2Fx", "/sandboxes/%00", "/sandboxes/" + "a" * 300):
        response = await gateway.client.get(path, headers=gateway.headers())
        assert response.status_code == 404, path
    # the gateway still serves after all that
    assert (await gateway.client.get(f"/sandboxes/{sid}", headers=gateway.headers())).is_success


async def test_cluster_refusals_map_to_e2b_errors(gateway: Gateway) -> None:
    gateway.api.fail(
        "create", "sandboxclaims", ApiError(422, "Invalid", "metadata.annotations: Too long")
    )
    refused = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "base"}, headers=gateway.headers()
    )
    assert refused.status_code == 400
    assert "Too long" in refused.json()["message"]
    gateway.api.fail("create", "sandboxclaims", ApiError(503, "ServiceUnavailable", "etcd"))
    busy = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "base"}, headers=gateway.headers()
    )
    assert busy.status_code == 503
    assert busy.headers["should-retry"] == "true"
    gateway.api.fail("create", "sandboxclaims", ApiError(403, "Forbidden", "no"))
    forbidden = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "base"}, headers=gateway.headers()
    )
    assert forbidden.status_code == 500
    assert forbidden.headers["should-retry"] == "false"
    assert gateway.api.objects(SANDBOX_CLAIMS) == []
    assert (
        await gateway.client.post(
            "/v2/sandboxes", json={"templateID": "base"}, headers=gateway.headers()
        )
    ).status_code == 201


async def test_set_timeout_and_connect_are_signs_of_life(gateway: Gateway) -> None:
    class Recorder:
        def __init__(self) -> None:
            self.kept: list[str] = []

        def keepalive(self, record: Any) -> None:
            self.kept.append(record.sandbox_id)

        def request_started(self, record: Any) -> None:
            raise AssertionError("keepalive is preferred")

    recorder = Recorder()
    gateway.state.activity = recorder
    sid = await _create(gateway)
    await gateway.client.post(
        f"/sandboxes/{sid}/timeout", json={"timeout": 60}, headers=gateway.headers()
    )
    await gateway.client.post(f"/sandboxes/{sid}/connect", json={}, headers=gateway.headers())
    assert recorder.kept == [sid, sid]
    # a refused request is no sign of life
    await gateway.client.post(f"/sandboxes/{sid}/timeout", json={}, headers=gateway.headers())
    await gateway.client.post(
        f"/sandboxes/{sid}/timeout", json={"timeout": 5}, headers=gateway.headers(gateway.other_key)
    )
    assert recorder.kept == [sid, sid]


async def test_unexpected_failures_answer_an_e2b_error(gateway: Gateway) -> None:
    gateway.api.fail("create", "sandboxclaims", RuntimeError("boom"))
    transport = httpx.ASGITransport(app=gateway.app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        response = await client.post(
            "/v2/sandboxes", json={"templateID": "base"}, headers=gateway.headers()
        )
    assert response.status_code == 500
    assert response.json() == {"code": 500, "message": "internal gateway error"}
    assert response.headers["should-retry"] == "false"
    assert (await gateway.client.get("/health")).status_code == 200
