"""Hostname routing (``<port>-<id>.<domain>``) through the app's dispatch and the data plane.

The E2B SDK without ``sandbox_url`` calls ``https://<port>-<id>.<domain>`` and still sends the
``E2b-Sandbox-Id``/``E2b-Sandbox-Port`` headers; these tests pin what the gateway answers for
the host names a client (or an attacker) can send: the Host decides under the configured
domain, other hosts leave the headers in charge, malformed sandbox hosts are 400 before any
lookup, and an unknown id answers exactly as it does by header.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from dataplane_fakes import ENVD_TOKEN, SANDBOX_ID, TRAFFIC_TOKEN, State, make_record
from upstream_app import Upstream

from kube_agent_sandbox.gateway.app import is_data_plane
from kube_agent_sandbox.gateway.dataplane.router import DataPlane
from kube_agent_sandbox.gateway.state import HEARTBEAT_PATH

DOMAIN = "sbx.example.test"
HOST = f"49983-{SANDBOX_ID}.{DOMAIN}"
UNKNOWN = "zzzzzzzzzzzzzzzzzzzz"


@pytest.fixture
def state(upstream: tuple[Upstream, int]) -> State:
    st = State()
    st.index.records[SANDBOX_ID] = make_record()
    st.index.ports = {49983: upstream[1], 3000: upstream[1]}
    return st


@pytest.fixture
async def client(state: State) -> AsyncIterator[httpx.AsyncClient]:
    plane = DataPlane(state, resume_hold_seconds=0.5)
    transport = httpx.ASGITransport(app=plane)
    async with httpx.AsyncClient(transport=transport, base_url=f"https://{DOMAIN}") as c:
        yield c
    await plane.aclose()


async def test_host_alone_reaches_the_sandbox(
    client: httpx.AsyncClient, upstream: tuple[Upstream, int]
) -> None:
    response = await client.get("/headers", headers={"Host": HOST, "X-Access-Token": ENVD_TOKEN})
    assert response.status_code == 200
    assert upstream[0].seen["x-forwarded-host"] == HOST


async def test_uppercase_host_is_the_same_sandbox(client: httpx.AsyncClient) -> None:
    host = f"49983-{SANDBOX_ID.upper()}.SBX.Example.TEST:443"
    response = await client.get("/headers", headers={"Host": host, "X-Access-Token": ENVD_TOKEN})
    assert response.status_code == 200


async def test_the_host_decides_not_a_contradicting_header(
    client: httpx.AsyncClient, state: State
) -> None:
    # The SDK sends both; an attacker on one sandbox's origin could add a header naming
    # another sandbox. The name connected to wins either way.
    to_known = await client.get(
        "/health",
        headers={"Host": HOST, "E2b-Sandbox-Id": UNKNOWN, "E2b-Sandbox-Port": "3000"},
    )
    assert to_known.status_code == 204
    to_unknown = await client.get(
        "/health",
        headers={
            "Host": f"49983-{UNKNOWN}.{DOMAIN}",
            "E2b-Sandbox-Id": SANDBOX_ID,
            "E2b-Sandbox-Port": "49983",
        },
    )
    assert to_unknown.status_code == 502
    assert to_unknown.json()["message"] == f"The sandbox was not found: {UNKNOWN}"


async def test_unknown_id_by_host_answers_as_by_header(client: httpx.AsyncClient) -> None:
    by_host = await client.get("/health", headers={"Host": f"49983-{UNKNOWN}.{DOMAIN}"})
    by_header = await client.get(
        "/health",
        headers={"Host": "gateway.local", "E2b-Sandbox-Id": UNKNOWN, "E2b-Sandbox-Port": "49983"},
    )
    assert by_host.status_code == by_header.status_code == 502
    assert (
        by_host.json()
        == by_header.json()
        == {
            "code": 502,
            "message": f"The sandbox was not found: {UNKNOWN}",
        }
    )


@pytest.mark.parametrize(
    ("host", "message"),
    [
        (f"49983-{SANDBOX_ID}.other.test", "no sandbox named"),  # wrong domain
        (f"49983-{SANDBOX_ID}.evil-{DOMAIN}", "no sandbox named"),  # suffix look-alike
        (f"49983-{SANDBOX_ID}.{DOMAIN}.evil.test", "no sandbox named"),
        (f"0-{SANDBOX_ID}.{DOMAIN}", "invalid sandbox port"),
        (f"65536-{SANDBOX_ID}.{DOMAIN}", "invalid sandbox port"),
        (f"049983-{SANDBOX_ID}.{DOMAIN}", "invalid sandbox port"),
        (f"49983-{SANDBOX_ID}x{'y' * 50}.{DOMAIN}", "invalid sandbox id"),
        (f"49983-a_b.{DOMAIN}", "invalid Host"),
    ],
)
async def test_bad_sandbox_hosts_are_400_before_any_lookup(
    client: httpx.AsyncClient, state: State, host: str, message: str
) -> None:
    response = await client.get("/health", headers={"Host": host})
    assert response.status_code == 400
    assert message in response.json()["message"]
    assert state.index.lookups == 0


async def test_a_token_of_another_sandbox_is_refused_like_none(
    client: httpx.AsyncClient, state: State
) -> None:
    """The data plane knows no tenants: only the sandbox's own token opens it."""
    other = await client.post(
        "/process.Process/Start", headers={"Host": HOST, "X-Access-Token": "token-of-another"}
    )
    missing = await client.post("/process.Process/Start", headers={"Host": HOST})
    assert other.status_code == missing.status_code == 401
    assert other.json() == missing.json()
    assert state.activity is not None
    assert state.activity.requests == 0


async def test_a_private_user_port_by_host_takes_the_traffic_token(
    client: httpx.AsyncClient, state: State
) -> None:
    host = f"3000-{SANDBOX_ID}.{DOMAIN}"
    assert (await client.get("/headers", headers={"Host": host})).status_code == 200  # public
    state.index.records[SANDBOX_ID] = make_record(public_traffic=False)
    assert (await client.get("/headers", headers={"Host": host})).status_code == 401
    ok = await client.get(
        "/headers", headers={"Host": host, "E2B-Traffic-Access-Token": TRAFFIC_TOKEN}
    )
    assert ok.status_code == 200


def _scope(
    host: str | None, *, header_id: bool = False, path: str = "/health"
) -> dict[str, object]:
    headers = [] if host is None else [(b"host", host.encode())]
    if header_id:
        headers.append((b"e2b-sandbox-id", SANDBOX_ID.encode()))
    return {"type": "http", "path": path, "headers": headers}


@pytest.mark.parametrize(
    "host",
    [
        HOST,
        HOST.upper(),
        f"{HOST}:443",
        f"3000-{SANDBOX_ID}.{DOMAIN}",
        # Malformed sandbox names under the domain still go to the data plane (400 there),
        # never to the control plane, whose /health would answer 200.
        f"70000-{SANDBOX_ID}.{DOMAIN}",
        f"0-{SANDBOX_ID}.{DOMAIN}",
        f"49983-bad-id.{DOMAIN}",
    ],
)
def test_sandbox_hosts_are_dispatched_to_the_data_plane(host: str) -> None:
    assert is_data_plane(_scope(host), DOMAIN)


@pytest.mark.parametrize(
    "host",
    [
        f"api.{DOMAIN}",
        f"my-gateway.{DOMAIN}",
        DOMAIN,
        f"49983-{SANDBOX_ID}.other.test",
        "127.0.0.1:8080",
        "[::1]:8080",
        f"49983-a_b.{DOMAIN}",  # not a DNS name at all
        None,
    ],
)
def test_other_hosts_are_the_control_plane(host: str | None) -> None:
    assert not is_data_plane(_scope(host), DOMAIN)
    # ...unless the request names its sandbox by header.
    assert is_data_plane(_scope(host, header_id=True), DOMAIN)


def test_the_heartbeat_stays_with_the_gateway_unless_the_host_names_a_sandbox() -> None:
    assert not is_data_plane(_scope("gateway.local", header_id=True, path=HEARTBEAT_PATH), DOMAIN)
    assert is_data_plane(_scope(HOST, header_id=True, path=HEARTBEAT_PATH), DOMAIN)
