"""The gateway's metrics middleware and its /metrics route, through a real ASGI app."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from kube_agent_sandbox.gateway.app import plane_classifier
from kube_agent_sandbox.gateway.metrics import GatewayMetrics, MetricsMiddleware


def _app(metrics: GatewayMetrics, seen: list[float]) -> MetricsMiddleware:
    async def ok(_request: Request) -> Response:
        return PlainTextResponse("ok")

    async def boom(_request: Request) -> Response:
        raise RuntimeError("handler bug")

    async def stream(_request: Request) -> Response:
        async def body():  # type: ignore[no-untyped-def]
            yield b"a"
            seen.append(metrics.inflight_requests.labels("data")._value.get())
            yield b"b"

        return StreamingResponse(body())

    inner = Starlette(
        routes=[
            Route("/ok", ok),
            Route("/boom", boom),
            Route("/stream", stream),
            metrics.route(),
        ]
    )
    return MetricsMiddleware(inner, metrics=metrics, plane_of=plane_classifier(None))


def _sample(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_requests_are_counted_and_timed_by_plane_method_and_code() -> None:
    metrics = GatewayMetrics()
    seen: list[float] = []
    transport = httpx.ASGITransport(app=_app(metrics, seen), raise_app_exceptions=False)

    async def run() -> None:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            assert (await client.get("/ok")).status_code == 200
            assert (await client.get("/missing")).status_code == 404
            assert (await client.get("/boom")).status_code == 500
            streamed = await client.get("/stream", headers={"E2b-Sandbox-Id": "abc"})
            assert streamed.text == "ab"
            exposition = (await client.get("/metrics")).text
            assert "agent_sandbox_gateway_requests_total" in exposition

    asyncio.run(run())
    count = "agent_sandbox_gateway_requests_total"
    # /ok and /metrics itself
    assert _sample(metrics, count, plane="control", method="GET", code="200") == 2
    assert _sample(metrics, count, plane="control", method="GET", code="404") == 1
    assert _sample(metrics, count, plane="control", method="GET", code="500") == 1
    assert _sample(metrics, count, plane="data", method="GET", code="200") == 1
    # The stream was counted open while its body was sent, and closed afterwards.
    assert seen == [1.0]
    assert _sample(metrics, "agent_sandbox_gateway_inflight_requests", plane="data") == 0
    timed = "agent_sandbox_gateway_request_duration_seconds_count"
    assert _sample(metrics, timed, plane="control", method="GET") == 4


def test_an_mcp_path_is_its_own_plane() -> None:
    plane_of = plane_classifier(None)
    assert plane_of({"type": "http", "path": "/mcp", "headers": []}) == "mcp"
    assert plane_of({"type": "http", "path": "/mcpx", "headers": []}) == "control"


def test_the_console_is_its_own_plane() -> None:
    """Its long polls last up to 25 s: counted with the control plane they would hide it."""
    plane_of = plane_classifier(None)
    assert plane_of({"type": "http", "path": "/console/api/state", "headers": []}) == "console"
    assert plane_of({"type": "http", "path": "/console", "headers": []}) == "console"
    assert plane_of({"type": "http", "path": "/consoles", "headers": []}) == "control"


@pytest.mark.parametrize(
    ("error", "result"),
    [(None, "ok"), (TimeoutError("late"), "timeout"), (LookupError("gone"), "failed")],
)
def test_resumes_are_counted_by_result(error: BaseException | None, result: str) -> None:
    metrics = GatewayMetrics()
    metrics.record_resume(error)
    assert _sample(metrics, "agent_sandbox_gateway_resumes_total", result=result) == 1
    others = {"ok", "timeout", "failed"} - {result}
    assert all(
        _sample(metrics, "agent_sandbox_gateway_resumes_total", result=o) == 0 for o in others
    )
