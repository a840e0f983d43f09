"""Routing, authorization, error bodies and resume-on-traffic of the data plane."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from dataplane_fakes import (
    ENVD_TOKEN,
    SANDBOX_ID,
    TRAFFIC_TOKEN,
    Resumer,
    State,
    auto_resume_annotations,
    make_record,
    serve,
)
from upstream_app import Upstream

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.gateway.dataplane.router import DataPlane, auto_resumable, wants_exec

ROUTE = {"E2b-Sandbox-Id": SANDBOX_ID, "E2b-Sandbox-Port": "49983"}
AUTH = {**ROUTE, "X-Access-Token": ENVD_TOKEN}


@pytest.fixture
async def upstream_port() -> AsyncIterator[int]:
    async with serve(Upstream()) as port:
        yield port


@pytest.fixture
def state(upstream_port: int) -> State:
    st = State()
    st.index.records[SANDBOX_ID] = make_record()
    st.index.ports = {49983: upstream_port, 3000: upstream_port}
    return st


@pytest.fixture
async def client(state: State) -> AsyncIterator[httpx.AsyncClient]:
    plane = DataPlane(state, resume_hold_seconds=0.5)
    transport = httpx.ASGITransport(app=plane)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway.local") as c:
        yield c
    await plane.aclose()


async def test_forwards_with_the_envd_token(client: httpx.AsyncClient, state: State) -> None:
    response = await client.get("/headers", headers=AUTH)
    assert response.status_code == 200
    assert response.json()["x-access-token"] == ENVD_TOKEN
    assert state.activity is not None
    assert state.activity.requests == 1


async def test_unknown_sandbox_is_502_not_found(client: httpx.AsyncClient, state: State) -> None:
    response = await client.get("/health", headers={**AUTH, "E2b-Sandbox-Id": "nosuchsandbox"})
    assert response.status_code == 502
    assert response.json() == {"code": 502, "message": "The sandbox was not found: nosuchsandbox"}
    assert state.activity is not None
    assert state.activity.requests == 0


async def test_missing_or_wrong_token_is_401_and_nothing_is_recorded(
    client: httpx.AsyncClient, state: State
) -> None:
    for headers in (
        ROUTE,
        {**ROUTE, "X-Access-Token": "nope"},
        {**ROUTE, "X-API-Key": "e2b_" + "0" * 40},
    ):
        response = await client.post("/process.Process/Start", headers=headers)
        assert response.status_code == 401
        assert "access token" in response.json()["message"]
    assert state.activity is not None
    assert state.activity.requests == 0


async def test_health_needs_no_token(client: httpx.AsyncClient) -> None:
    response = await client.get("/health", headers=ROUTE)
    assert response.status_code == 204


async def test_user_ports_are_public_by_default(client: httpx.AsyncClient) -> None:
    """E2B's default: a ``get_host(port)`` URL works without the traffic token..."""
    headers = {**ROUTE, "E2b-Sandbox-Port": "3000"}
    assert (await client.get("/headers", headers=headers)).status_code == 200
    # ...while envd's port still needs the envd token
    assert (await client.post("/process.Process/Start", headers=ROUTE)).status_code == 401


async def test_a_private_sandboxs_user_port_takes_the_traffic_token(
    client: httpx.AsyncClient, state: State
) -> None:
    state.index.records[SANDBOX_ID] = make_record(public_traffic=False)
    headers = {**ROUTE, "E2b-Sandbox-Port": "3000"}
    assert (await client.get("/headers", headers=headers)).status_code == 401
    ok = await client.get(
        "/headers", headers={**headers, "E2B-Traffic-Access-Token": TRAFFIC_TOKEN}
    )
    assert ok.status_code == 200


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"E2b-Sandbox-Id": "Bad-Id", "E2b-Sandbox-Port": "49983"}, "invalid sandbox id"),
        ({"E2b-Sandbox-Id": SANDBOX_ID, "E2b-Sandbox-Port": "70000"}, "invalid sandbox port"),
        ({"E2b-Sandbox-Id": SANDBOX_ID}, "missing E2b-Sandbox-Port"),
        ({"Host": "gateway.local"}, "no sandbox named"),
        ({"Host": f"49983-{SANDBOX_ID}.sbx.example.test:1:2"}, "invalid Host"),
    ],
)
async def test_malformed_targets_are_400(
    client: httpx.AsyncClient, state: State, headers: dict[str, str], message: str
) -> None:
    response = await client.get("/health", headers=headers)
    assert response.status_code == 400
    assert message in response.json()["message"]
    assert state.index.lookups == 0


async def test_host_routing(client: httpx.AsyncClient) -> None:
    host = {"Host": f"49983-{SANDBOX_ID}.sbx.example.test", "X-Access-Token": ENVD_TOKEN}
    response = await client.get("/headers", headers=host)
    assert response.status_code == 200
    assert response.json()["x-forwarded-host"] == f"49983-{SANDBOX_ID}.sbx.example.test"


async def test_suspended_without_auto_resume_is_not_found(
    client: httpx.AsyncClient, state: State
) -> None:
    state.index.records[SANDBOX_ID] = make_record(ready=False, suspended=True, mode="Suspended")
    state.resumer = Resumer(state.index)
    response = await client.get("/health", headers=AUTH)
    assert response.status_code == 502
    assert "was not found" in response.json()["message"]
    assert state.resumer.calls == 0


async def test_manual_suspend_never_auto_resumes(client: httpx.AsyncClient, state: State) -> None:
    annotations = {constants.ANNOTATION_AUTO_RESUME: "true"}  # no suspended-by: manual
    state.index.records[SANDBOX_ID] = make_record(
        ready=False, suspended=True, mode="Suspended", annotations=annotations
    )
    state.resumer = Resumer(state.index)
    assert (await client.get("/health", headers=AUTH)).status_code == 502
    assert state.resumer.calls == 0


async def test_idle_suspended_sandbox_resumes_and_the_request_goes_through(
    client: httpx.AsyncClient, state: State
) -> None:
    state.index.records[SANDBOX_ID] = make_record(
        ready=False, suspended=True, mode="Suspended", annotations=auto_resume_annotations()
    )
    state.resumer = Resumer(state.index, delay=0.05)
    response = await client.get("/headers", headers=AUTH)
    assert response.status_code == 200
    assert state.resumer.calls == 1


async def test_resume_over_the_hold_budget_is_503_retry(
    client: httpx.AsyncClient, state: State
) -> None:
    state.index.records[SANDBOX_ID] = make_record(
        ready=False,
        suspended=True,
        mode="Suspended",
        annotations=auto_resume_annotations("timeout"),
    )
    state.resumer = Resumer(state.index, delay=5)
    response = await client.get("/headers", headers=AUTH)
    assert response.status_code == 503
    assert response.headers["Should-Retry"] == "true"
    assert int(response.headers["Retry-After"]) >= 1
    assert response.json()["code"] == 503


async def test_wrong_token_cannot_wake_a_sandbox(client: httpx.AsyncClient, state: State) -> None:
    state.index.records[SANDBOX_ID] = make_record(
        ready=False, suspended=True, mode="Suspended", annotations=auto_resume_annotations()
    )
    state.resumer = Resumer(state.index)
    assert (await client.post("/files", headers=ROUTE)).status_code == 401
    assert state.resumer.calls == 0


async def test_failing_resumer_is_503_not_a_crash(client: httpx.AsyncClient, state: State) -> None:
    class Broken:
        async def resume(self, record: object) -> object:
            raise RuntimeError("apiserver down")

    state.index.records[SANDBOX_ID] = make_record(
        ready=False, suspended=True, mode="Suspended", annotations=auto_resume_annotations()
    )
    state.resumer = Broken()  # type: ignore[assignment]
    assert (await client.get("/health", headers=AUTH)).status_code == 503


async def test_resumer_policy_refusal_or_vanished_sandbox_is_not_found(
    client: httpx.AsyncClient, state: State
) -> None:
    calls: list[bool] = []

    class Refusing:
        async def resume(self, record: object, *, on_traffic: bool = False) -> object:
            calls.append(on_traffic)
            raise LookupError("may not be resumed by traffic")

    state.index.records[SANDBOX_ID] = make_record(
        ready=False, suspended=True, mode="Suspended", annotations=auto_resume_annotations()
    )
    state.resumer = Refusing()  # type: ignore[assignment]
    response = await client.get("/health", headers=AUTH)
    assert response.status_code == 502
    assert "was not found" in response.json()["message"]
    assert calls == [True]  # the resumer is told the request is traffic


async def test_not_ready_sandbox_is_not_found(client: httpx.AsyncClient, state: State) -> None:
    state.index.records[SANDBOX_ID] = make_record(ready=False)
    assert (await client.get("/health", headers=AUTH)).status_code == 502


async def test_hostile_paths_are_refused(state: State) -> None:
    plane = DataPlane(state)
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    for raw in (b"//evil.example/x", b"http://evil.example/x", b"*"):
        sent.clear()
        scope = {
            "type": "http",
            "method": "GET",
            "path": raw.decode(),
            "raw_path": raw,
            "query_string": b"",
            "headers": [(k.lower().encode(), v.encode()) for k, v in AUTH.items()],
        }
        await plane(scope, receive, send)
        assert sent[0]["status"] == 400
    await plane.aclose()


async def test_websocket_without_target_is_refused(state: State) -> None:
    plane = DataPlane(state)
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    await plane({"type": "websocket", "headers": [], "path": "/"}, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}]  # no target named


def test_auto_resumable_joins_a_resume_in_flight() -> None:
    annotations = {constants.ANNOTATION_AUTO_RESUME: "true"}
    assert auto_resumable(
        make_record(ready=False, suspended=True, mode="Running", annotations=annotations)
    )
    assert not auto_resumable(make_record(ready=False, suspended=True, mode="Running"))
    assert not auto_resumable(make_record(ready=True, annotations=annotations))


def test_wants_exec_from_annotations() -> None:
    assert wants_exec(make_record(annotations={"kube-agent-sandbox.io/envd": "exec"}))
    assert wants_exec(make_record(pod_annotations={"kube-agent-sandbox.io/envd": "exec"}))
    assert not wants_exec(make_record())
