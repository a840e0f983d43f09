"""The proxy streams both ways without buffering and reports unreachable pods."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from dataplane_fakes import ENVD_TOKEN, SANDBOX_ID, State, eventually, free_port, make_record, serve
from upstream_app import Upstream

from kube_agent_sandbox.gateway.dataplane.proxy import (
    ConnectFrames,
    end_stream_error,
    forward_headers,
    response_headers,
)
from kube_agent_sandbox.gateway.dataplane.router import DataPlane

HEADERS = {"E2b-Sandbox-Id": SANDBOX_ID, "E2b-Sandbox-Port": "49983", "X-Access-Token": ENVD_TOKEN}


@pytest.fixture
async def gateway(upstream: tuple[Upstream, int]) -> AsyncIterator[tuple[str, State]]:
    state = State()
    state.index.records[SANDBOX_ID] = make_record()
    state.index.ports = {49983: upstream[1], 49999: upstream[1]}
    plane = DataPlane(state)
    async with serve(plane) as port:
        yield f"http://127.0.0.1:{port}", state
    await plane.aclose()


async def test_first_chunk_reaches_the_client_before_the_upstream_finishes(
    upstream: tuple[Upstream, int], gateway: tuple[str, State]
) -> None:
    app, _ = upstream
    url, state = gateway
    async with (
        httpx.AsyncClient(base_url=url) as client,
        client.stream("GET", "/slow", headers=HEADERS) as response,
    ):
        assert response.status_code == 200
        chunks = response.aiter_raw()
        first = await asyncio.wait_for(anext(chunks), 5)
        assert first == b"first"
        assert not app.release.is_set()  # the upstream is still holding its second chunk
        assert state.activity is not None
        assert state.activity.opened == 1
        app.release.set()
        rest = b"".join([c async for c in chunks])
    assert rest == b"second"
    await eventually(lambda: state.activity is not None and state.activity.closed == 1)
    assert state.activity.requests == 1


async def test_request_body_is_streamed_not_buffered(
    upstream: tuple[Upstream, int], gateway: tuple[str, State]
) -> None:
    app, _ = upstream
    url, _ = gateway

    async def body() -> AsyncIterator[bytes]:
        yield b"part-one;"
        # Only a proxy that streams the request lets the first chunk arrive now.
        await asyncio.wait_for(app.first_chunk_in.wait(), 5)
        yield b"part-two"

    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.post("/echo-slow", headers=HEADERS, content=body())
    assert response.status_code == 201
    assert response.content == b"part-one;part-two"


async def test_headers_are_forwarded_and_hop_by_hop_dropped(
    upstream: tuple[Upstream, int], gateway: tuple[str, State]
) -> None:
    app, _ = upstream
    url, _ = gateway
    headers = {
        **HEADERS,
        "Authorization": "Basic dXNlcjo=",
        "Connect-Protocol-Version": "1",
        "Connect-Timeout-Ms": "60000",
        "Connection": "keep-alive, x-drop-me",
        "X-Drop-Me": "1",
        "Keep-Alive": "timeout=5",
        "TE": "trailers",
        "X-Forwarded-For": "1.2.3.4",
    }
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/headers?a=%2F&b=c%20d", headers=headers)
    assert response.status_code == 200
    seen = response.json()
    assert seen["authorization"] == "Basic dXNlcjo="
    assert seen["connect-protocol-version"] == "1"
    assert seen["connect-timeout-ms"] == "60000"
    assert seen["x-access-token"] == ENVD_TOKEN
    assert "x-drop-me" not in seen
    assert "keep-alive" not in seen
    assert "te" not in seen
    assert seen["x-forwarded-for"] == "1.2.3.4, 127.0.0.1"
    assert seen["host"].startswith("127.0.0.1")
    assert app.seen_target == b"/headers?a=%2F&b=c%20d"
    assert "x-secret-hop" not in response.headers
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]


async def test_refused_port_is_502_port_is_not_open(gateway: tuple[str, State]) -> None:
    url, state = gateway
    state.index.ports[3000] = free_port()
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.get(
            "/",
            headers={
                **HEADERS,
                "E2b-Sandbox-Port": "3000",
                "E2B-Traffic-Access-Token": "traffic-token-of-uid-1",
            },
        )
    assert response.status_code == 502
    assert "port is not open" in response.json()["message"]
    assert response.json()["code"] == 502


async def test_connect_stream_cut_between_frames_ends_with_an_error_frame(
    gateway: tuple[str, State],
) -> None:
    url, state = gateway
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.post(
            "/connect-drop",
            headers={**HEADERS, "Content-Type": "application/connect+json"},
            content=b"",
        )
    body = response.content
    first_len = int.from_bytes(body[1:5], "big")
    first, tail = body[5 : 5 + first_len], body[5 + first_len :]
    assert json.loads(first) == {"event": {"start": {"pid": 1}}}
    assert tail[0] == 0x02
    assert json.loads(tail[5:])["error"]["code"] == "unavailable"
    await eventually(lambda: state.activity is not None and state.activity.closed == 1)
    assert state.activity is not None
    assert state.activity.opened == 1


async def test_plain_response_cut_midway_is_aborted_not_shortened(
    gateway: tuple[str, State],
) -> None:
    url, _ = gateway
    async with httpx.AsyncClient(base_url=url) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get("/plain-drop", headers=HEADERS)


async def test_client_disconnect_closes_the_upstream_stream(
    upstream: tuple[Upstream, int], gateway: tuple[str, State]
) -> None:
    app, _ = upstream
    url, state = gateway
    async with (
        httpx.AsyncClient(base_url=url) as client,
        client.stream("GET", "/forever", headers=HEADERS) as response,
    ):
        assert await anext(response.aiter_raw()) == b"data: 1\n\n"
    await asyncio.wait_for(app.disconnected.wait(), 5)
    await eventually(lambda: state.activity is not None and state.activity.closed == 1)


async def test_delete_with_a_body_keeps_its_body(
    upstream: tuple[Upstream, int], gateway: tuple[str, State]
) -> None:
    url, _ = gateway

    async def chunked() -> AsyncIterator[bytes]:  # Transfer-Encoding: chunked, no length
        yield b"bo"
        yield b"dy"

    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.request(
            "DELETE", "/echo-slow", headers={**HEADERS, "Expect": "100-continue"}, content=chunked()
        )
    assert response.status_code == 201
    assert response.content == b"body"
    assert "expect" not in upstream[0].seen


def test_forward_headers_strip_connection_tokens_and_host() -> None:
    out = forward_headers(
        [
            (b"Host", b"gw"),
            (b"Connection", b"Upgrade, X-A"),
            (b"x-a", b"1"),
            (b"Upgrade", b"h2c"),
            (b"X-B", b"2"),
        ],
        client="10.1.1.1",
        scheme="https",
    )
    assert out == [
        (b"x-b", b"2"),
        (b"x-forwarded-for", b"10.1.1.1"),
        (b"x-forwarded-host", b"gw"),
        (b"x-forwarded-proto", b"https"),
    ]
    assert response_headers([(b"Transfer-Encoding", b"chunked"), (b"X-C", b"3")]) == [
        (b"x-c", b"3")
    ]


def test_connect_frames_track_boundaries_across_chunks() -> None:
    frames = ConnectFrames()
    data = b"\x00\x00\x00\x00\x03abc" + end_stream_error("unavailable", "x")
    for i in range(len(data)):
        frames.feed(data[i : i + 1])
        assert frames.at_boundary == (i + 1 in (8, len(data)))
    assert frames.ended
