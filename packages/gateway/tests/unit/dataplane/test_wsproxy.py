"""WebSocket upgrades are relayed to sandbox ports, after the same checks as HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from dataplane_fakes import (
    ENVD_TOKEN,
    SANDBOX_ID,
    TRAFFIC_TOKEN,
    State,
    eventually,
    make_record,
    serve,
    serve_hypercorn,
)

from kube_agent_sandbox.gateway.dataplane.router import DataPlane
from kube_agent_sandbox.gateway.dataplane.wsproxy import upgrade_headers


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echoes messages; tells the client which subprotocols and token header it saw."""
    if scope["type"] != "websocket":
        return
    await receive()  # websocket.connect
    protocols = scope.get("subprotocols") or []
    await send({"type": "websocket.accept", "subprotocol": protocols[0] if protocols else None})
    headers = dict(scope["headers"])
    await send(
        {
            "type": "websocket.send",
            "text": "token=" + headers.get(b"e2b-traffic-access-token", b"").decode(),
        }
    )
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") == "bye":
            await send({"type": "websocket.close", "code": 4001})
            return
        if message.get("bytes") is not None:
            await send({"type": "websocket.send", "bytes": message["bytes"][::-1]})
        else:
            await send({"type": "websocket.send", "text": message["text"].upper()})


@pytest.fixture(params=["uvicorn", "hypercorn"])
async def gateway(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, State]]:
    """The data plane under uvicorn (``serve``) and under hypercorn (``serve --http2``)."""
    serve_gateway = serve if request.param == "uvicorn" else serve_hypercorn
    async with serve(echo_app) as upstream_port:
        state = State()
        state.index.records[SANDBOX_ID] = make_record(public_traffic=False)
        state.index.ports = {3000: upstream_port}
        plane = DataPlane(state)
        async with serve_gateway(plane) as port:
            yield f"http://127.0.0.1:{port}", state
        await plane.aclose()


ROUTE = {"E2b-Sandbox-Id": SANDBOX_ID, "E2b-Sandbox-Port": "3000"}


async def test_websocket_messages_and_close_codes_are_relayed(gateway: tuple[str, State]) -> None:
    url, state = gateway
    headers = {**ROUTE, "E2B-Traffic-Access-Token": TRAFFIC_TOKEN}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url + "/ws?x=1", headers=headers, protocols=("jupyter", "other")) as ws,
    ):
        assert ws.protocol == "jupyter"
        assert (await ws.receive_str(timeout=5)) == f"token={TRAFFIC_TOKEN}"
        await ws.send_str("hello")
        assert (await ws.receive_str(timeout=5)) == "HELLO"
        await ws.send_bytes(b"\x00\x01\x02")
        assert (await ws.receive_bytes(timeout=5)) == b"\x02\x01\x00"
        assert state.activity is not None
        assert state.activity.opened == 1
        await ws.send_str("bye")
        closing = await ws.receive(timeout=5)
        assert closing.type == aiohttp.WSMsgType.CLOSE
        assert ws.close_code == 4001
    await eventually(lambda: state.activity is not None and state.activity.closed == 1)


@pytest.mark.parametrize(
    "headers",
    [
        ROUTE,  # no token
        {**ROUTE, "E2B-Traffic-Access-Token": "wrong"},
        {
            "E2b-Sandbox-Id": "unknownsandbox",
            "E2b-Sandbox-Port": "3000",
            "X-Access-Token": ENVD_TOKEN,
        },
        {"E2b-Sandbox-Id": "Bad!", "E2b-Sandbox-Port": "3000"},
    ],
)
async def test_refused_websockets_never_reach_the_pod(
    gateway: tuple[str, State], headers: dict[str, str]
) -> None:
    url, state = gateway
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(url + "/ws", headers=headers)
    assert refused.value.status == 403
    assert state.activity is not None
    assert state.activity.opened == 0


async def test_unreachable_port_closes_the_handshake(gateway: tuple[str, State]) -> None:
    from dataplane_fakes import free_port

    url, state = gateway
    state.index.ports[3000] = free_port()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await session.ws_connect(url + "/ws", headers={**ROUTE, "X-Access-Token": ENVD_TOKEN})


def test_upgrade_headers_drop_the_handshake() -> None:
    out = upgrade_headers(
        [
            (b"Sec-WebSocket-Key", b"abc"),
            (b"Upgrade", b"websocket"),
            (b"Connection", b"Upgrade"),
            (b"Origin", b"https://evil.example"),
            (b"X-Access-Token", b"t"),
        ]
    )
    assert out == [("x-access-token", "t")]
