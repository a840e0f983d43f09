"""The E2B control-plane create endpoint over a FakeApi: claims, auth, bad requests, idempotency."""

from __future__ import annotations

import asyncio
import json

from controlplane_helpers import create_sandbox as _create
from gateway_fakes import TENANT, Gateway, claim_of

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.gateway.annotations import (
    ANNOTATION_IDEMPOTENCY_KEY,
    ANNOTATION_METADATA,
    LABEL_GATEWAY_SANDBOX,
)
from kube_agent_sandbox.gateway.controlplane.ids import is_sandbox_id
from kube_agent_sandbox.gateway.controlplane.models import parse_time


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
    assert body["envdVersion"] == "0.6.3"
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


def test_the_advertised_envd_version_is_the_one_sandboxd_implements() -> None:
    """The SDKs gate features on the version: advertising less hides what sandboxd has."""
    from kube_agent_sandbox.gateway.daemon_client import ENVD_VERSION
    from kube_agent_sandbox.sandboxd.init_state import ENVD_VERSION as SANDBOXD_ENVD_VERSION

    assert ENVD_VERSION == SANDBOXD_ENVD_VERSION


async def test_network_allow_public_traffic_is_kept_on_the_claim(gateway: Gateway) -> None:
    """``allowPublicTraffic: false`` makes user ports need the traffic token (data plane)."""
    annotation = "kube-agent-sandbox.io/e2b-allow-public-traffic"
    for network, expected in (({"allowPublicTraffic": False}, "false"), (None, None), ({}, None)):
        body: dict[str, object] = {"templateID": "base", "timeout": 60}
        if network is not None:
            body["network"] = network
        response = await gateway.client.post("/v2/sandboxes", json=body, headers=gateway.headers())
        assert response.status_code == 201, response.text
        claim = claim_of(gateway.api, response.json()["sandboxID"])
        assert claim["metadata"]["annotations"].get(annotation) == expected
    for bad in ({"allowPublicTraffic": "no"}, ["x"]):
        refused = await gateway.client.post(
            "/v2/sandboxes",
            json={"templateID": "base", "network": bad},
            headers=gateway.headers(),
        )
        assert refused.status_code == 400, refused.text
        assert "network" in refused.json()["message"]
