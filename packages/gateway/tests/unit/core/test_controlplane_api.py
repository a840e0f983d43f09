"""The E2B control-plane endpoints over a FakeApi, with a fake controller binding claims."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from typing import Any

import httpx
from gateway_fakes import TENANT, Gateway, claim_of
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import ApiError
from kube_agent_sandbox.gateway.annotations import (
    ANNOTATION_IDEMPOTENCY_KEY,
    ANNOTATION_METADATA,
    LABEL_GATEWAY_SANDBOX,
)
from kube_agent_sandbox.gateway.controlplane.ids import is_sandbox_id
from kube_agent_sandbox.gateway.controlplane.models import parse_time
from kube_agent_sandbox.gateway.envvars import decode_env


async def _create(gw: Gateway, body: dict[str, Any] | None = None, **headers: str) -> str:
    response = await gw.client.post(
        "/v2/sandboxes",
        json=body or {"templateID": "base"},
        headers={**gw.headers(), **headers},
    )
    assert response.status_code == 201, response.text
    sandbox_id = response.json()["sandboxID"]
    assert isinstance(sandbox_id, str)
    return sandbox_id


async def test_create_makes_a_claim_and_answers_the_sandbox_body(gateway: Gateway) -> None:
    response = await gateway.client.post(
        "/v2/sandboxes",
        json={
            "templateID": "base",
            "timeout": 120,
            "metadata": {"owner": "me", "idle_timeout": "900", "kube-agent-sandbox.io/x": "y"},
            "envVars": {"SECRET": "value"},
        },
        headers=gateway.headers(),
    )
    assert response.status_code == 201, response.text
    body = response.json()
    sid = body["sandboxID"]
    assert is_sandbox_id(sid)
    assert body["clientID"] == ""
    assert body["envdVersion"] == "0.5.7"
    assert body["templateID"] == "base"
    assert body["envdAccessToken"] == gateway.state.tokens.envd_access_token(
        claim_of(gateway.api, sid)["metadata"]["uid"]
    )
    assert body["trafficAccessToken"] != body["envdAccessToken"]
    claim = claim_of(gateway.api, sid)
    assert claim["spec"]["warmPoolRef"] == {"name": "base"}
    assert "env" not in claim["spec"]
    assert "SECRET" not in json.dumps(claim)
    assert claim["metadata"]["labels"][LABEL_GATEWAY_SANDBOX] == "true"
    assert json.loads(claim["metadata"]["annotations"][ANNOTATION_METADATA]) == {"owner": "me"}
    lifecycle = claim["spec"]["lifecycle"]
    assert lifecycle["shutdownPolicy"] == "Delete"
    created = parse_time(claim["metadata"]["creationTimestamp"])
    shutdown = parse_time(lifecycle["shutdownTime"])
    assert created is not None
    assert shutdown is not None
    assert 110 <= (shutdown - created).total_seconds() <= 130
    # the idle policy is on the claim and copied onto the bound Sandbox
    assert claim["metadata"]["annotations"][c.ANNOTATION_IDLE_TIMEOUT] == "15m"
    sandbox = gateway.api.obj(SANDBOXES, f"pool-{sid[:8]}", TENANT)
    assert sandbox is not None
    assert sandbox["metadata"]["annotations"][c.ANNOTATION_IDLE_TIMEOUT] == "15m"


async def test_v1_create_with_default_timeout_and_auto_pause(gateway: Gateway) -> None:
    response = await gateway.client.post(
        "/sandboxes",
        json={
            "templateID": "base",
            "autoPause": True,
            "autoResume": {"enabled": True},
            "secure": True,
            "allow_internet_access": True,
        },
        headers={"x-api-key": gateway.key},
    )
    assert response.status_code == 201, response.text
    sid = response.json()["sandboxID"]
    claim = claim_of(gateway.api, sid)
    assert "lifecycle" not in claim["spec"]
    annotations = claim["metadata"]["annotations"]
    pause_at = parse_time(annotations[c.ANNOTATION_PAUSE_AT])
    created = parse_time(claim["metadata"]["creationTimestamp"])
    assert pause_at is not None
    assert created is not None
    assert 290 <= (pause_at - created).total_seconds() <= 310
    assert annotations[c.ANNOTATION_AUTO_RESUME] == "true"
    sandbox = gateway.api.obj(SANDBOXES, f"pool-{sid[:8]}", TENANT)
    assert sandbox is not None
    assert (
        sandbox["metadata"]["annotations"][c.ANNOTATION_PAUSE_AT]
        == annotations[c.ANNOTATION_PAUSE_AT]
    )
    detail = (await gateway.client.get(f"/sandboxes/{sid}", headers=gateway.headers())).json()
    assert detail["lifecycle"] == {"autoResume": True, "onTimeout": "pause"}


async def test_auth_is_required_and_tenants_are_isolated(gateway: Gateway) -> None:
    sid = await _create(gateway)
    for headers in ({}, {"X-API-KEY": "e2b_" + "0" * 40}, {"X-API-KEY": "nonsense"}):
        response = await gateway.client.get(f"/sandboxes/{sid}", headers=headers)
        assert response.status_code == 401
        assert response.json()["code"] == 401
        assert "message" in response.json()
    other = gateway.headers(gateway.other_key)
    unknown = "a" * 20
    for method, path in (
        ("GET", f"/sandboxes/{sid}"),
        ("DELETE", f"/sandboxes/{sid}"),
        ("POST", f"/sandboxes/{sid}/timeout"),
        ("POST", f"/sandboxes/{sid}/pause"),
        ("POST", f"/v2/sandboxes/{sid}/connect"),
        ("GET", f"/sandboxes/{sid}/metrics"),
    ):
        theirs = await gateway.client.request(method, path, headers=other, json={"timeout": 5})
        missing = await gateway.client.request(
            method, path.replace(sid, unknown), headers=gateway.headers(), json={"timeout": 5}
        )
        assert theirs.status_code == missing.status_code == 404, (method, path)
        assert theirs.json()["code"] == 404
    listed = await gateway.client.get("/v2/sandboxes", headers=other)
    assert listed.json() == []
    assert claim_of(gateway.api, sid)  # untouched


async def test_bad_create_requests_are_400_and_never_retried(gateway: Gateway) -> None:
    bad_bodies = [
        {},
        {"templateID": ""},
        {"templateID": "Bad_Name!"},
        {"templateID": "base", "timeout": "60"},
        {"templateID": "base", "timeout": -1},
        {"templateID": "base", "timeout": 1.5},
        {"templateID": "base", "metadata": {"a": 1}},
        {"templateID": "base", "envVars": ["A"]},
        {"templateID": "base", "envVars": {"1BAD": "x"}},
        {"templateID": "base", "autoPause": "yes"},
        {"templateID": "base", "metadata": {"idle_timeout": "10"}},
        {"templateID": "base", "metadata": {"idle_timeout": "soon"}},
        [],
    ]
    for body in bad_bodies:
        response = await gateway.client.post("/v2/sandboxes", json=body, headers=gateway.headers())
        assert response.status_code == 400, body
        assert response.headers["should-retry"] == "false"
    raw = await gateway.client.post(
        "/v2/sandboxes", content=b"{not json", headers=gateway.headers()
    )
    assert raw.status_code == 400
    bad_key = await gateway.client.post(
        "/v2/sandboxes",
        json={"templateID": "base"},
        headers={**gateway.headers(), "Idempotency-Key": "Not Valid"},
    )
    assert bad_key.status_code == 400
    assert gateway.api.objects(SANDBOX_CLAIMS) == []


async def test_unknown_template_is_404(gateway: Gateway) -> None:
    response = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "nope"}, headers=gateway.headers()
    )
    assert response.status_code == 404
    assert "nope" in response.json()["message"]
    assert gateway.api.objects(SANDBOX_CLAIMS) == []


async def test_template_without_pool_gets_a_zero_replica_shadow_pool(gateway: Gateway) -> None:
    gateway.api.add(
        SANDBOX_TEMPLATES,
        {"metadata": {"name": "cold", "namespace": TENANT}, "spec": {"podTemplate": {}}},
    )
    sid = await _create(gateway, {"templateID": "cold"})
    pool = gateway.api.obj(SANDBOX_WARM_POOLS, "shadow-pool-cold", TENANT)
    assert pool is not None
    assert pool["spec"] == {"replicas": 0, "sandboxTemplateRef": {"name": "cold"}}
    assert claim_of(gateway.api, sid)["spec"]["warmPoolRef"] == {"name": "shadow-pool-cold"}
    detail = (await gateway.client.get(f"/sandboxes/{sid}", headers=gateway.headers())).json()
    assert detail["templateID"] == "cold"


async def test_create_timeout_deletes_the_claim_and_answers_503(gateway: Gateway) -> None:
    gateway.controller.mode = "pending"
    response = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "base"}, headers=gateway.headers()
    )
    assert response.status_code == 503
    assert response.headers["should-retry"] == "true"
    assert response.headers["retry-after"] == "1"
    assert gateway.api.objects(SANDBOX_CLAIMS) == []


async def test_terminal_claim_failure_is_400_and_cleaned_up(gateway: Gateway) -> None:
    gateway.controller.mode = "fail"
    response = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "base"}, headers=gateway.headers()
    )
    assert response.status_code == 400
    assert "no template" in response.json()["message"]
    assert gateway.api.objects(SANDBOX_CLAIMS) == []


async def test_idempotency_key_deduplicates_per_tenant(gateway: Gateway) -> None:
    key = {"Idempotency-Key": "create-1"}
    first, second = await asyncio.gather(_create(gateway, **key), _create(gateway, **key))
    assert first == second
    third = await _create(gateway, **key)
    assert third == first
    claims = gateway.api.objects(SANDBOX_CLAIMS)
    assert len(claims) == 1
    assert claims[0]["metadata"]["annotations"][ANNOTATION_IDEMPOTENCY_KEY] == "create-1"
    # another tenant with the same key gets its own sandbox
    response = await gateway.client.post(
        "/v2/sandboxes",
        json={"templateID": "base"},
        headers={**gateway.headers(gateway.other_key), **key},
    )
    assert response.status_code == 201
    assert response.json()["sandboxID"] != first


async def test_idempotent_create_keeps_a_slow_claim_for_the_retry(gateway: Gateway) -> None:
    gateway.controller.mode = "pending"
    headers = {**gateway.headers(), "Idempotency-Key": "slow"}
    response = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "base"}, headers=headers
    )
    assert response.status_code == 503
    assert response.headers["should-retry"] == "true"
    (claim,) = gateway.api.objects(SANDBOX_CLAIMS)
    gateway.controller.mode = "ready"
    gateway.controller.bind(claim)
    retry = await gateway.client.post("/v2/sandboxes", json={"templateID": "base"}, headers=headers)
    assert retry.status_code == 201
    assert retry.json()["sandboxID"] == claim["metadata"]["name"]


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
    assert detail["envdVersion"] == "0.5.7"
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


async def test_pause_then_connect_resumes(gateway: Gateway) -> None:
    sid = await _create(gateway)
    sandbox_name = f"pool-{sid[:8]}"
    response = await gateway.client.post(f"/sandboxes/{sid}/pause", headers=gateway.headers())
    assert response.status_code == 204
    sandbox = gateway.api.obj(SANDBOXES, sandbox_name, TENANT)
    assert sandbox is not None
    assert sandbox["spec"]["operatingMode"] == "Suspended"
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
    assert await gateway.state.init_sandbox(record, env_vars=None)
    assert inits[-1]["envVars"] == {"TOKEN": "s3cret"}
    # without envVars no Secret is written
    plain = await _create(gateway)
    assert gateway.api.obj(SECRETS, f"{plain}-env", TENANT) is None
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
