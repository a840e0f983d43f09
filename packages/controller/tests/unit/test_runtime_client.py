"""API client against a scripted HTTP server: paths, verbs, bodies, errors, watch parsing.

The real API server is exercised by the integration tests; this checks the wire details that
are hard to provoke there (chunk boundaries, 429 with Retry-After, non-Status error bodies).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
import pytest
from aiohttp import web

from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ApiError,
    ClusterConfig,
    Resource,
    RuntimeMetrics,
    parse_watch_line,
)
from kube_agent_sandbox.controller.runtime.client import resource_path
from kube_agent_sandbox.controller.runtime.ratelimit import TokenBucket

PODS = Resource("", "v1", "pods", "Pod")
THINGS = Resource("example.com", "v1beta1", "things", "Thing")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Server:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes, dict[str, str]]] = []
        self.handler: Handler | None = None

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            (request.method, request.path, dict(request.query), body, dict(request.headers))
        )
        assert self.handler is not None
        return await self.handler(request)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, ApiClient, RuntimeMetrics]]:
    srv = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", srv.dispatch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    metrics = RuntimeMetrics()
    config = ClusterConfig(host=f"http://127.0.0.1:{port}", static_headers={"X-Test": "1"})
    client = ApiClient(config, metrics=metrics)
    try:
        yield srv, client, metrics
    finally:
        await client.close()
        await runner.cleanup()


def json_response(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def test_resource_paths() -> None:
    assert resource_path(PODS, "ns") == "/api/v1/namespaces/ns/pods"
    assert resource_path(PODS) == "/api/v1/pods"
    assert resource_path(PODS, "ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert resource_path(THINGS, "ns", "t") == "/apis/example.com/v1beta1/namespaces/ns/things/t"
    assert resource_path(NODES, "ignored", "n1") == "/api/v1/nodes/n1"
    with pytest.raises(ValueError, match="namespace is required"):
        resource_path(PODS, "", "p")
    with pytest.raises(ValueError, match="subresource"):
        resource_path(PODS, "ns", None, "status")
    with pytest.raises(ValueError, match="empty"):
        resource_path(PODS, "ns", "")


def test_client_rejects_bad_burst() -> None:
    with pytest.raises(ValueError, match="burst"):
        ApiClient(ClusterConfig(host="http://x"), burst=0)


async def test_get_create_update_delete_wire_format(
    server: tuple[Server, ApiClient, RuntimeMetrics],
) -> None:
    srv, client, metrics = server

    async def echo(request: web.Request) -> web.StreamResponse:
        if request.method == "DELETE":
            return json_response({"kind": "Status", "status": "Success"})
        body = await request.read()
        return json_response(orjson.loads(body) if body else {"kind": "Pod", "x": 1})

    srv.handler = echo
    assert await client.get(PODS, "ns", "p") == {"kind": "Pod", "x": 1}
    created = await client.create(PODS, "ns", {"metadata": {"name": "p"}}, field_manager="me")
    assert created == {"metadata": {"name": "p"}}
    await client.update(THINGS, "ns", "t", {"status": {}}, subresource="status")
    assert (
        await client.delete(
            PODS, "ns", "p", propagation_policy="Foreground", preconditions={"uid": "u1"}
        )
        is None
    )
    methods = [(r[0], r[1]) for r in srv.requests]
    assert methods == [
        ("GET", "/api/v1/namespaces/ns/pods/p"),
        ("POST", "/api/v1/namespaces/ns/pods"),
        ("PUT", "/apis/example.com/v1beta1/namespaces/ns/things/t/status"),
        ("DELETE", "/api/v1/namespaces/ns/pods/p"),
    ]
    assert srv.requests[1][2] == {"fieldManager": "me"}
    assert orjson.loads(srv.requests[3][3]) == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": "u1"},
    }
    assert srv.requests[0][4]["X-Test"] == "1"
    assert srv.requests[0][4]["Accept"] == "application/json"
    sample = metrics.registry.get_sample_value(
        "rest_client_requests_total",
        {"code": "200", "method": "GET", "host": client.config.host.removeprefix("http://")},
    )
    assert sample == 1


@pytest.mark.parametrize(
    ("patch_type", "patch", "content_type"),
    [
        ("merge", {"a": 1}, "application/merge-patch+json"),
        ("strategic", {"a": 1}, "application/strategic-merge-patch+json"),
        ("json", [{"op": "add", "path": "/a", "value": 1}], "application/json-patch+json"),
        ("apply", {"a": 1}, "application/apply-patch+yaml"),
    ],
)
async def test_patch_content_types(
    server: tuple[Server, ApiClient, RuntimeMetrics],
    patch_type: str,
    patch: object,
    content_type: str,
) -> None:
    srv, client, _ = server

    async def ok(request: web.Request) -> web.StreamResponse:
        return json_response({"kind": "Pod"})

    srv.handler = ok
    await client.patch(
        PODS,
        "ns",
        "p",
        patch,  # type: ignore[arg-type]
        patch_type=patch_type,  # type: ignore[arg-type]
        field_manager="mgr",
        force=patch_type == "apply",
    )
    method, _, query, body, headers = srv.requests[0]
    assert method == "PATCH"
    assert headers["Content-Type"] == content_type
    assert orjson.loads(body) == patch
    expected = (
        {"fieldManager": "mgr", "force": "true"}
        if patch_type == "apply"
        else {"fieldManager": "mgr"}
    )
    assert query == expected


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"patch_type": "bogus"}, "unknown patch type"),
        ({"patch_type": "apply"}, "field_manager"),
        ({"patch_type": "merge", "force": True}, "force"),
    ],
)
async def test_patch_rejects_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    client = ApiClient(ClusterConfig(host="http://127.0.0.1:1"))
    with pytest.raises(ValueError, match=match):
        await client.patch(PODS, "ns", "p", {"a": 1}, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="list of operations"):
        await client.patch(PODS, "ns", "p", {"a": 1}, patch_type="json")
    await client.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"propagation_policy": "Sometimes"}, "propagation"), ({"preconditions": {"x": "1"}}, "x")],
)
async def test_delete_rejects_bad_options(kwargs: dict[str, object], match: str) -> None:
    client = ApiClient(ClusterConfig(host="http://127.0.0.1:1"))
    with pytest.raises(ValueError, match=match):
        await client.delete(PODS, "ns", "p", **kwargs)  # type: ignore[arg-type]


async def test_status_errors_become_api_errors(
    server: tuple[Server, ApiClient, RuntimeMetrics],
) -> None:
    srv, client, _ = server

    async def conflict(request: web.Request) -> web.StreamResponse:
        return json_response(
            {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "exists"}, 409
        )

    srv.handler = conflict
    with pytest.raises(ApiError) as info:
        await client.create(PODS, "ns", {"metadata": {"name": "p"}})
    assert info.value.status == 409
    assert info.value.already_exists
    assert info.value.message == "exists"

    async def plain(request: web.Request) -> web.StreamResponse:
        return web.Response(status=503, text="upstream down")

    srv.handler = plain
    with pytest.raises(ApiError) as info2:
        await client.get(PODS, "ns", "p")
    assert info2.value.status == 503
    assert "upstream down" in info2.value.message


async def test_429_with_retry_after_is_retried(
    server: tuple[Server, ApiClient, RuntimeMetrics],
) -> None:
    srv, client, _ = server
    answers = [
        web.Response(status=429, headers={"Retry-After": "0"}, text="slow down"),
        json_response({"kind": "Pod"}),
    ]

    async def throttled(request: web.Request) -> web.StreamResponse:
        return answers.pop(0)

    srv.handler = throttled
    assert await client.get(PODS, "ns", "p") == {"kind": "Pod"}
    assert len(srv.requests) == 2


async def test_list_query_parameters(server: tuple[Server, ApiClient, RuntimeMetrics]) -> None:
    srv, client, _ = server

    async def ok(request: web.Request) -> web.StreamResponse:
        return json_response({"kind": "PodList", "metadata": {}, "items": []})

    srv.handler = ok
    await client.list(PODS, None, label_selector="a=b,c", limit=500, continue_token="tok")
    _, path, query, _, _ = srv.requests[0]
    assert path == "/api/v1/pods"
    assert query == {"labelSelector": "a=b,c", "limit": "500", "continue": "tok"}


async def test_watch_stream_split_across_chunks_and_large_lines(
    server: tuple[Server, ApiClient, RuntimeMetrics],
) -> None:
    srv, client, _ = server
    big = "x" * 300_000  # larger than aiohttp's default line limit
    events = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "1"}}},
        {"type": "MODIFIED", "object": {"metadata": {"name": "a"}, "data": {"big": big}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
        {"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "10"}}},
    ]
    payload = b"".join(orjson.dumps(e) + b"\n" for e in events)

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(0, len(payload), 7777):  # boundaries inside lines
            await resp.write(payload[i : i + 7777])
            await asyncio.sleep(0)
        await resp.write_eof()
        return resp

    srv.handler = stream
    got = [e async for e in client.watch(PODS, "ns", resource_version="5", timeout_seconds=30)]
    assert [e.type for e in got] == ["ADDED", "MODIFIED", "BOOKMARK", "DELETED"]
    assert got[1].object["data"]["big"] == big
    _, path, query, _, _ = srv.requests[0]
    assert path == "/api/v1/namespaces/ns/pods"
    assert query == {
        "watch": "true",
        "resourceVersion": "5",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "30",
    }


async def test_watch_error_event_raises_gone(
    server: tuple[Server, ApiClient, RuntimeMetrics],
) -> None:
    srv, client, _ = server

    async def expired(request: web.Request) -> web.StreamResponse:
        status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        return web.Response(body=orjson.dumps({"type": "ERROR", "object": status}) + b"\n")

    srv.handler = expired
    with pytest.raises(ApiError) as info:
        async for _ in client.watch(PODS, "ns", resource_version="1"):
            pass
    assert info.value.gone
    assert info.value.reason == "Expired"


@pytest.mark.parametrize(
    "line",
    [b"not json", b"[1,2]", b'{"type":"WHAT","object":{}}', b'{"type":"ADDED","object":3}'],
)
def test_malformed_watch_lines_raise(line: bytes) -> None:
    with pytest.raises(ApiError, match="watch"):
        parse_watch_line(line)


async def test_client_side_rate_limit_spaces_requests(
    server: tuple[Server, ApiClient, RuntimeMetrics],
) -> None:
    srv, _, metrics = server

    async def ok(request: web.Request) -> web.StreamResponse:
        return json_response({"kind": "Pod"})

    srv.handler = ok
    limited = ApiClient(server[1].config, qps=50.0, burst=1, metrics=metrics)
    # A clock that never advances makes the reservations exact: the bucket holds one token,
    # so the 2nd request must wait 1/50 s and the 3rd 2/50 s, whatever the machine's load.
    limited.bucket = TokenBucket(50.0, 1, clock=lambda: 100.0)
    try:
        for _ in range(3):
            await limited.get(PODS, "ns", "p")
    finally:
        await limited.close()
    labels = {"verb": "GET", "host": limited.config.host.removeprefix("http://")}
    waited = metrics.registry.get_sample_value(
        "rest_client_rate_limiter_duration_seconds_sum", labels
    )
    count = metrics.registry.get_sample_value(
        "rest_client_rate_limiter_duration_seconds_count", labels
    )
    assert count == 3
    assert waited == pytest.approx(0.02 + 0.04)
