"""A gateway with ``--domain``: responses carry the domain, host names route through the app.

The E2B SDK builds ``https://<port>-<id>.<domain>`` from the ``domain`` of the create/connect
response (``E2B_DOMAIN`` is only its fallback), so every response must carry the gateway's
domain. Requests then arrive with ``Host: api.<domain>`` (control plane) or
``<port>-<id>.<domain>`` (data plane); these tests send them through the whole ASGI app.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from gateway_fakes import Gateway, started_gateway

from kube_agent_sandbox.gateway.dataplane.auth import file_signature

DOMAIN = "sbx.example.test"
API = f"api.{DOMAIN}"


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    async with started_gateway(domain=DOMAIN, base_url=f"https://{API}") as gateway:
        yield gateway


async def _create(gw: Gateway, path: str = "/v2/sandboxes") -> dict[str, object]:
    body = {"templateID": "base", "timeout": 60}
    if path == "/sandboxes":
        body |= {"secure": True, "allow_internet_access": True}
    response = await gw.client.post(path, json=body, headers=gw.headers())
    assert response.status_code == 201, response.text
    created: dict[str, object] = response.json()
    return created


@pytest.mark.parametrize("path", ["/v2/sandboxes", "/sandboxes"])
async def test_create_returns_the_domain(gw: Gateway, path: str) -> None:
    created = await _create(gw, path)
    assert created["domain"] == DOMAIN


async def test_connect_get_and_list_return_the_domain(gw: Gateway) -> None:
    sid = (await _create(gw))["sandboxID"]
    for path in (f"/v2/sandboxes/{sid}/connect", f"/sandboxes/{sid}/connect"):
        connected = await gw.client.post(path, json={"timeout": 60}, headers=gw.headers())
        assert connected.status_code == 200, connected.text
        assert connected.json()["domain"] == DOMAIN
    detail = await gw.client.get(f"/sandboxes/{sid}", headers=gw.headers())
    assert detail.status_code == 200
    assert detail.json()["domain"] == DOMAIN


async def test_without_a_domain_the_response_has_none() -> None:
    async with started_gateway() as gw:
        assert (await _create(gw))["domain"] is None


async def test_the_control_plane_answers_at_api_domain_and_isolates_tenants(gw: Gateway) -> None:
    sid = (await _create(gw))["sandboxID"]
    mine = await gw.client.get(f"/sandboxes/{sid}", headers={"Host": API, **gw.headers()})
    assert mine.status_code == 200
    theirs = await gw.client.get(
        f"/sandboxes/{sid}", headers={"Host": API, **gw.headers(gw.other_key)}
    )
    unknown = await gw.client.get(
        "/sandboxes/zzzzzzzzzzzzzzzzzzzz", headers={"Host": API, **gw.headers()}
    )
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json() == {"code": 404, "message": f"sandbox '{sid}' not found"}
    assert unknown.json() == {"code": 404, "message": "sandbox 'zzzzzzzzzzzzzzzzzzzz' not found"}


async def test_sandbox_hosts_reach_the_data_plane_not_the_control_plane(gw: Gateway) -> None:
    # The control plane's own /health answers 200 at api.<domain>...
    assert (await gw.client.get("/health", headers={"Host": API})).status_code == 200
    # ...a sandbox name under the domain never gets it, whatever its shape.
    unknown = await gw.client.get("/health", headers={"Host": f"49983-zzzzzzzzzz.{DOMAIN}"})
    assert unknown.status_code == 502
    assert "The sandbox was not found" in unknown.json()["message"]
    for host in (f"70000-abc.{DOMAIN}", f"0-abc.{DOMAIN}", f"49983-a-b.{DOMAIN}"):
        response = await gw.client.get("/health", headers={"Host": host})
        assert response.status_code == 400, host
        assert "invalid sandbox" in response.json()["message"], host


async def test_a_host_of_another_domain_is_the_control_plane(gw: Gateway) -> None:
    sid = (await _create(gw))["sandboxID"]
    response = await gw.client.get("/health", headers={"Host": f"49983-{sid}.other.test"})
    assert response.status_code == 200  # the gateway's own health, not the sandbox's 204
    files = await gw.client.get(
        "/files?path=/etc/passwd", headers={"Host": f"49983-{sid}.other.test"}
    )
    assert files.status_code == 404  # no such control-plane route: nothing of the sandbox


async def test_a_signed_file_url_without_sandbox_headers_reaches_its_sandbox() -> None:
    """``E2B_SANDBOX_URL`` form: ``<gateway>/files?…&signature=…`` names no sandbox."""
    async with started_gateway() as gw:
        created = await _create(gw)
        sid, token = str(created["sandboxID"]), str(created["envdAccessToken"])
        signature = file_signature("/home/user/a.txt", "read", "", token, None)
        query = {"path": "/home/user/a.txt", "signature": signature}
        routed = await gw.client.get("/files", params=query)
        # The data plane answered for this sandbox (the fake cluster runs no pod, so it
        # cannot be reached), not the control plane's 404 for an unknown route.
        assert routed.status_code == 502, routed.text
        assert sid in routed.json()["message"]
        forged = await gw.client.get("/files", params={**query, "signature": "v1_forged"})
        assert forged.status_code == 401
        unsigned = await gw.client.get("/files", params={"path": "/home/user/a.txt"})
        assert unsigned.status_code == 404
