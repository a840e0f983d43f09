"""Issue 21: one tenant's credentials reach no other tenant's sandbox, through any path.

Tenants A and B (``tenant-a``/``tenant-b``) each create a sandbox on one gateway (all
namespaces, ``--domain``). What A holds (its API key, its sandbox's envd and traffic tokens,
file URLs signed with them) is tried against B's sandbox on every path: the control plane
(already covered in ``test_controlplane_create``/``test_domain_routing``, repeated here at
``api.<domain>``), the data plane by headers and by host name, signed file URLs, and resume on
traffic (a paused sandbox of B must not be resumed by A's traffic).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from gateway_fakes import OTHER, Gateway, started_gateway

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.gateway.dataplane.auth import file_signature
from kube_agent_sandbox.gateway.dataplane.router import auto_resumable

DOMAIN = "sbx.example.test"
API = f"api.{DOMAIN}"
ENVD = 49983
USER_PORT = 8000


@dataclass(frozen=True)
class Created:
    sandbox_id: str
    envd_token: str
    traffic_token: str


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    async with started_gateway(domain=DOMAIN, base_url=f"https://{API}") as gateway:
        yield gateway


async def _create(gw: Gateway, key: str, *, public: bool = True) -> Created:
    body: dict[str, object] = {"templateID": "base", "timeout": 60, "autoPause": True}
    if not public:
        body["network"] = {"allowPublicTraffic": False}
    response = await gw.client.post(
        "/v2/sandboxes", json=body, headers={"Host": API, **gw.headers(key)}
    )
    assert response.status_code == 201, response.text
    created = response.json()
    return Created(created["sandboxID"], created["envdAccessToken"], created["trafficAccessToken"])


async def _pair(gw: Gateway) -> tuple[Created, Created]:
    """A's sandbox and B's (B's user ports need its traffic token)."""
    return await _create(gw, gw.key), await _create(gw, gw.other_key, public=False)


def _by_header(sandbox_id: str, port: int) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(port)}


def _by_host(sandbox_id: str, port: int) -> dict[str, str]:
    return {"Host": f"{port}-{sandbox_id}.{DOMAIN}"}


Route = Callable[[str, int], dict[str, str]]
ROUTES = pytest.mark.parametrize("route", [_by_header, _by_host], ids=["header", "host"])


async def test_the_control_plane_answers_another_tenants_id_like_an_unknown_one(
    gw: Gateway,
) -> None:
    a, b = await _pair(gw)
    mine = {"Host": API, **gw.headers()}
    for method, path in (
        ("GET", "/sandboxes/{}"),
        ("POST", "/sandboxes/{}/timeout"),
        ("POST", "/sandboxes/{}/pause"),
        ("POST", "/sandboxes/{}/connect"),
        ("POST", "/v2/sandboxes/{}/connect"),
        ("GET", "/sandboxes/{}/metrics"),
        ("DELETE", "/sandboxes/{}"),
    ):
        theirs = await gw.client.request(
            method, path.format(b.sandbox_id), headers=mine, json={"timeout": 5}
        )
        unknown = await gw.client.request(
            method, path.format("z" * 20), headers=mine, json={"timeout": 5}
        )
        assert theirs.status_code == unknown.status_code == 404, (method, path)
    listed = await gw.client.get("/v2/sandboxes", headers=mine)
    assert [s["sandboxID"] for s in listed.json()] == [a.sandbox_id]
    # B's sandbox is untouched: still there for B
    assert (
        await gw.client.get(
            f"/sandboxes/{b.sandbox_id}", headers={"Host": API, **gw.headers(gw.other_key)}
        )
    ).status_code == 200


@ROUTES
async def test_the_data_plane_refuses_another_sandboxs_tokens(gw: Gateway, route: Route) -> None:
    a, b = await _pair(gw)
    attempts: list[tuple[int, dict[str, str]]] = [
        # A's envd token, A's traffic token, A's API key (no data-plane credential at all)
        (ENVD, {"X-Access-Token": a.envd_token}),
        (ENVD, {"X-Access-Token": a.traffic_token}),
        (ENVD, {"X-Access-Token": gw.key, **gw.headers()}),
        (USER_PORT, {"E2b-Traffic-Access-Token": a.traffic_token}),
        (USER_PORT, {"X-Access-Token": a.envd_token}),
        (USER_PORT, gw.headers()),
    ]
    for port, credentials in attempts:
        response = await gw.client.get(
            "/files?path=/etc/passwd", headers={**route(b.sandbox_id, port), **credentials}
        )
        assert response.status_code == 401, (port, credentials, response.text)


@ROUTES
async def test_a_file_url_signed_with_another_sandboxs_token_is_refused(
    gw: Gateway, route: Route
) -> None:
    a, b = await _pair(gw)
    for operation, method in (("read", "GET"), ("write", "POST")):
        signature = file_signature("/home/user/a.txt", operation, "", a.envd_token, None)
        query = {"path": "/home/user/a.txt", "signature": signature}
        response = await gw.client.request(
            method, "/files", params=query, headers=route(b.sandbox_id, ENVD)
        )
        assert response.status_code == 401, (operation, response.text)


async def test_a_signed_url_without_sandbox_headers_reaches_only_its_own_sandbox() -> None:
    """``E2B_SANDBOX_URL`` form: the signature alone picks the sandbox; A's never picks B's."""
    async with started_gateway() as gw:
        a, b = await _pair(gw)
        for token, sandbox_id in ((a.envd_token, a.sandbox_id), (b.envd_token, b.sandbox_id)):
            signature = file_signature("/x", "read", "", token, None)
            routed = await gw.client.get("/files", params={"path": "/x", "signature": signature})
            # the data plane answered for the signer's sandbox (no pod runs here: 502)
            assert routed.status_code == 502, routed.text
            assert sandbox_id in routed.json()["message"]


def _suspend_by_idle(gw: Gateway, sandbox_id: str, namespace: str) -> str:
    """Suspend a sandbox as the idle policy does (auto-resume on); returns its name."""
    record = gw.state.index.lookup(sandbox_id)
    assert record is not None
    assert record.sandbox is not None
    name: str = record.sandbox["metadata"]["name"]

    def suspended(obj: Obj) -> None:
        annotations = obj["metadata"].setdefault("annotations", {})
        annotations[c.ANNOTATION_AUTO_RESUME] = "true"
        annotations[c.ANNOTATION_SUSPENDED_BY] = c.SUSPENDED_BY_IDLE
        obj["spec"]["operatingMode"] = c.OPERATING_MODE_SUSPENDED
        obj["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}

    gw.api.mutate(SANDBOXES, name, suspended, namespace=namespace)
    return name


@ROUTES
async def test_traffic_with_another_sandboxs_token_does_not_resume_a_paused_one(
    gw: Gateway, route: Route
) -> None:
    a, b = await _pair(gw)
    name = _suspend_by_idle(gw, b.sandbox_id, OTHER)
    await gw.api.delete(PODS, OTHER, name)
    record = await gw.state.index.wait_for(
        b.sandbox_id,
        lambda r: r is not None and r.suspended and r.pod is None,
        namespace=OTHER,
        within=5,
    )
    assert record is not None
    assert auto_resumable(record)  # B's own traffic would resume it
    for port, credentials in (
        (ENVD, {"X-Access-Token": a.envd_token}),
        (ENVD, gw.headers()),
        (USER_PORT, {"E2b-Traffic-Access-Token": a.traffic_token}),
    ):
        response = await gw.client.get(
            "/files?path=/x", headers={**route(b.sandbox_id, port), **credentials}
        )
        assert response.status_code == 401, (port, response.text)
    signature = file_signature("/x", "read", "", a.envd_token, None)
    signed = await gw.client.get(
        "/files", params={"path": "/x", "signature": signature}, headers=route(b.sandbox_id, ENVD)
    )
    assert signed.status_code == 401
    # a resume starts (and patches) before an answer goes out: none was ever started
    assert gw.state.resumer.attempts == 0
    sandbox = gw.api.obj(SANDBOXES, name, OTHER)
    assert sandbox is not None
    assert sandbox["spec"]["operatingMode"] == c.OPERATING_MODE_SUSPENDED
    assert sandbox["metadata"]["annotations"][c.ANNOTATION_SUSPENDED_BY] == c.SUSPENDED_BY_IDLE
