"""``--api-connections``: N independent connection pools taken round-robin, watches included.

The server records the client's source port of every request: each pool keeps its own
keep-alive connection, so N pools show up as N distinct ports, taken in turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from kube_agent_sandbox.controller.runtime import ApiClient, ClusterConfig, Resource, RuntimeMetrics

PODS = Resource("", "v1", "pods", "Pod")


class PortRecorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []  # (kind of request, client source port)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        assert peer is not None
        watch = request.query.get("watch") == "true"
        self.seen.append(("watch" if watch else "request", int(peer[1])))
        if not watch:
            return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})
        response = web.StreamResponse()
        await response.prepare(request)
        event = {"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "p"}}}
        await response.write(orjson.dumps(event) + b"\n")
        await response.write_eof()
        return response

    def ports(self, kind: str | None = None) -> list[int]:
        return [port for k, port in self.seen if kind is None or k == kind]


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[PortRecorder, str]]:
    rec = PortRecorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", rec.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield rec, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _client(host: str, **kwargs: object) -> ApiClient:
    return ApiClient(ClusterConfig(host=host), metrics=RuntimeMetrics(), **kwargs)  # type: ignore[arg-type]


async def _watch_once(client: ApiClient) -> None:
    events = [event async for event in client.watch(PODS, "ns")]
    assert [event.type for event in events] == ["ADDED"]


async def test_requests_spread_round_robin_over_the_pools(
    recorder: tuple[PortRecorder, str],
) -> None:
    rec, host = recorder
    async with _client(host, pools=3) as client:
        assert client.pool_count == 3
        for _ in range(9):
            await client.get(PODS, "ns", "p")
    ports = rec.ports()
    assert len(set(ports)) == 3  # three pools, three connections
    assert ports[:3] * 3 == ports  # taken in turn: a, b, c, a, b, c, ...


async def test_one_pool_uses_one_connection(recorder: tuple[PortRecorder, str]) -> None:
    rec, host = recorder
    async with _client(host) as client:
        assert client.pool_count == 1
        for _ in range(4):
            await client.get(PODS, "ns", "p")
    assert len(set(rec.ports())) == 1


async def test_watches_take_their_turn_without_a_separate_pool(
    recorder: tuple[PortRecorder, str],
) -> None:
    rec, host = recorder
    async with _client(host, pools=3, separate_watch_pool=False) as client:
        for _ in range(3):
            await client.get(PODS, "ns", "p")
        await _watch_once(client)  # 4th turn: pool a again
        await client.get(PODS, "ns", "p")  # 5th turn: pool b
    ports = rec.ports()
    assert rec.seen[3][0] == "watch"
    assert len(set(ports)) == 3
    assert ports[3] == ports[0]  # the watch used pool a's connection
    assert ports[4] == ports[1]  # and the next request moved on to pool b


async def test_separate_watch_pool_keeps_watches_apart(
    recorder: tuple[PortRecorder, str],
) -> None:
    rec, host = recorder
    async with _client(host, pools=2, separate_watch_pool=True) as client:
        await client.get(PODS, "ns", "p")  # pool a
        await _watch_once(client)  # watch pool: does not take a turn
        await client.get(PODS, "ns", "p")  # pool b
        await client.get(PODS, "ns", "p")  # pool a
    requests, watches = rec.ports("request"), rec.ports("watch")
    assert len(set(requests)) == 2
    assert requests[0] == requests[2] != requests[1]
    assert watches[0] not in requests


def test_pools_must_be_positive() -> None:
    with pytest.raises(ValueError, match="pools must be positive"):
        _client("http://127.0.0.1:1", pools=0)
