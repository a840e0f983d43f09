"""``--enable-pprof[-debug]``: Python profiling endpoints on the metrics server."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from kube_agent_sandbox.controller import app
from kube_agent_sandbox.controller.config import parse_args
from kube_agent_sandbox.controller.profiling import profiling_handlers
from kube_agent_sandbox.controller.runtime import ApiClient, ClusterConfig, RuntimeMetrics
from kube_agent_sandbox.controller.runtime.servers import HttpServer, metrics_app


@pytest.fixture(autouse=True)
def stop_tracemalloc() -> Iterator[None]:
    was_tracing = tracemalloc.is_tracing()
    yield
    if not was_tracing:
        tracemalloc.stop()


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    routes = metrics_app(RuntimeMetrics().registry) | profiling_handlers(debug=True)
    server = HttpServer("127.0.0.1", 0, routes)
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def _busy(stop: asyncio.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(2000))
        await asyncio.sleep(0)


async def test_cpu_profile_of_the_event_loop(base_url: str) -> None:
    stop = asyncio.Event()
    worker = asyncio.create_task(_busy(stop), name="busy-worker")
    try:
        status, body = await _get(f"{base_url}/debug/pprof/profile?seconds=1")
    finally:
        stop.set()
        await worker
    assert status == 200
    assert "function calls" in body
    assert "_busy" in body


@pytest.mark.parametrize("seconds", ["0", "301", "x", "-1"])
async def test_profile_rejects_bad_durations(base_url: str, seconds: str) -> None:
    status, _ = await _get(f"{base_url}/debug/pprof/profile?seconds={seconds}")
    assert status == 400


async def test_one_profile_at_a_time(base_url: str) -> None:
    first = asyncio.create_task(_get(f"{base_url}/debug/pprof/profile?seconds=1"))
    await asyncio.sleep(0.2)
    status, body = await _get(f"{base_url}/debug/pprof/profile?seconds=1")
    assert status == 409
    assert "already" in body
    assert (await first)[0] == 200


async def test_task_and_thread_stacks(base_url: str) -> None:
    stop = asyncio.Event()
    worker = asyncio.create_task(stop.wait(), name="waiting-worker")
    try:
        status, body = await _get(f"{base_url}/debug/pprof/goroutine")
    finally:
        stop.set()
        await worker
    assert status == 200
    assert "task waiting-worker" in body
    assert "thread MainThread" in body


async def test_heap_index_and_cmdline(base_url: str) -> None:
    status, heap = await _get(f"{base_url}/debug/pprof/heap")
    assert status == 200
    assert heap.startswith("traced memory: current=")
    status, index = await _get(f"{base_url}/debug/pprof/")
    assert status == 200
    assert "/debug/pprof/goroutine" in index.splitlines()
    status, _ = await _get(f"{base_url}/debug/pprof/cmdline")
    assert status == 200


def test_plain_pprof_serves_only_the_cpu_profile() -> None:
    assert set(profiling_handlers(debug=False)) == {"/debug/pprof/profile"}
    assert not tracemalloc.is_tracing()


@pytest.mark.parametrize(
    ("argv", "paths"),
    [
        ([], set()),
        (["--enable-pprof"], {"/debug/pprof/profile"}),
        (
            ["--enable-pprof-debug"],
            {
                "/debug/pprof/profile",
                "/debug/pprof/",
                "/debug/pprof/goroutine",
                "/debug/pprof/heap",
                "/debug/pprof/cmdline",
            },
        ),
    ],
)
async def test_manager_gets_handlers_from_flags(argv: list[str], paths: set[str]) -> None:
    options = parse_args(["--leader-elect=false", *argv])
    async with ApiClient(ClusterConfig(host="https://127.0.0.1:1")) as client:
        manager = app.build_manager(options, client, metrics=RuntimeMetrics(), lease_namespace=None)
    assert set(manager.metrics_extra_handlers) == paths
