"""The probes' and metrics' HTTP server: what kubelet, Prometheus and a stray client meet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from kube_agent_sandbox.controller.runtime.servers import (
    HEAD_LIMIT,
    HttpRequest,
    HttpResponse,
    HttpServer,
)

seen: list[HttpRequest] = []


async def _echo(request: HttpRequest) -> HttpResponse:
    seen.append(request)
    return HttpResponse(f"{request.method} {request.path} {dict(request.query)}")


async def _boom(_: HttpRequest) -> HttpResponse:
    raise RuntimeError("handler bug")


async def _slow(_: HttpRequest) -> HttpResponse:
    await asyncio.sleep(3600)
    return HttpResponse("never")


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    seen.clear()
    srv = HttpServer("127.0.0.1", 0, {"/echo": _echo, "/boom": _boom, "/slow": _slow})
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


async def _raw(port: int, data: bytes) -> bytes:
    """Send ``data`` and read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def test_get_with_query_and_keep_alive(server: HttpServer) -> None:
    async with aiohttp.ClientSession() as session:
        for n in range(3):  # one pooled connection, three requests
            url = f"http://127.0.0.1:{server.port}/echo?seconds={n}&seconds=9&flag"
            async with session.get(url) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
                assert await resp.text() == f"GET /echo {{'seconds': '{n}', 'flag': ''}}"
                assert resp.headers["Connection"] == "keep-alive"


async def test_two_requests_in_one_write_are_both_answered(server: HttpServer) -> None:
    request = b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"
    close = b"GET /echo?last=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = await _raw(server.port, request + close)
    assert answer.count(b"HTTP/1.1 200 OK\r\n") == 2
    assert answer.endswith(b"GET /echo {'last': '1'}")


async def test_http_1_0_closes_after_the_answer(server: HttpServer) -> None:
    answer = await _raw(server.port, b"GET /echo HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Connection: close\r\n" in answer


async def test_head_has_the_length_but_no_body(server: HttpServer) -> None:
    answer = await _raw(server.port, b"HEAD /echo HTTP/1.1\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"Content-Length: 13" in head  # len("HEAD /echo {}")
    assert body == b""


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n", b"404 Not Found"),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", b"405 Method Not Allowed"),
        (b"GET /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", b"413"),
        (b"GET /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"413"),
        (b"GARBAGE\r\n\r\n", b"400 Bad Request"),
        (b"GET /echo SPDY/3\r\n\r\n", b"400 Bad Request"),
        (b"GET /echo HTTP/1.1\r\nno colon here\r\n\r\n", b"400 Bad Request"),
        (b"GET /echo HTTP/1.1\r\nX: " + b"a" * HEAD_LIMIT + b"\r\n\r\n", b"431"),
    ],
)
async def test_bad_requests_get_a_status_and_the_server_keeps_serving(
    server: HttpServer, data: bytes, status: bytes
) -> None:
    answer = await _raw(server.port, data)
    assert answer.startswith(b"HTTP/1.1 " + status)
    assert seen == []  # no handler ran
    ok = await _raw(server.port, b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200 OK")


async def test_a_failing_handler_answers_500_and_the_server_keeps_serving(
    server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    answer = await _raw(server.port, b"GET /boom HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 500 Internal Server Error")
    assert "handler for /boom failed" in caplog.text
    ok = await _raw(server.port, b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200 OK")


async def test_a_client_leaving_early_is_quiet(
    server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /echo HTTP/1.1\r\n")  # half a request, then gone
    writer.close()
    await asyncio.sleep(0.1)
    assert "Traceback" not in caplog.text
    ok = await _raw(server.port, b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200 OK")


async def test_stop_ends_idle_and_busy_connections() -> None:
    srv = HttpServer("127.0.0.1", 0, {"/slow": _slow})
    await srv.start()
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", srv.port)
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", srv.port)
    busy_writer.write(b"GET /slow HTTP/1.1\r\n\r\n")
    await busy_writer.drain()
    await asyncio.sleep(0.1)
    await asyncio.wait_for(srv.stop(), 5)
    assert await asyncio.wait_for(idle_reader.read(), 5) == b""
    assert await asyncio.wait_for(busy_reader.read(), 5) == b""
    idle_writer.close()
    busy_writer.close()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", srv.port)
