"""The chart's conversion check: success only once the API server converts, a few times in a row.

A Ready controller Pod does not mean the API server reaches it through the webhook Service yet
(CI saw ``dial tcp <ClusterIP>:443: connect: connection refused`` right after ``helm install
--wait``): the check must keep trying through those errors and fail only at its deadline.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kube_agent_sandbox.controller.runtime import ApiError, ClusterConfig
from kube_agent_sandbox.controller.webhook import check
from kube_agent_sandbox.controller.webhook.check import (
    ConversionCheckTimeout,
    probe_sandbox,
    wait_for_conversion,
)

REFUSED = ApiError(
    500,
    "InternalError",
    'conversion webhook for agents.x-k8s.io/v1beta1, Kind=Sandbox failed: Post "https://'
    'agent-sandbox-webhook-service.agent-sandbox-helm.svc:443/convert?timeout=30s": dial tcp '
    "10.96.79.9:443: connect: connection refused",
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def scripted(outcomes: list[Exception | None]) -> tuple[Any, list[int]]:
    """A ``convert`` that raises or succeeds as scripted (then succeeds); counts calls."""
    calls = [0]

    async def convert() -> object:
        calls[0] += 1
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome
        return {}

    return convert, calls


async def test_waits_through_refused_connections_until_conversion_works() -> None:
    clock = Clock()
    convert, calls = scripted([REFUSED, REFUSED, aiohttp.ServerDisconnectedError()])
    attempts = await wait_for_conversion(
        convert, within=60, interval=1, successes=3, clock=clock, sleep=clock.sleep
    )
    assert attempts == calls[0] == 6
    assert clock.now == 5


async def test_a_failure_after_a_success_starts_the_count_again() -> None:
    clock = Clock()
    convert, calls = scripted([None, REFUSED, None, None, REFUSED, None, None, None])
    await wait_for_conversion(
        convert, within=60, interval=1, successes=3, clock=clock, sleep=clock.sleep
    )
    assert calls[0] == 8


async def test_gives_up_at_the_deadline_with_the_last_error() -> None:
    clock = Clock()
    convert, calls = scripted([REFUSED] * 1000)
    with pytest.raises(ConversionCheckTimeout, match="connection refused") as raised:
        await wait_for_conversion(
            convert, within=10, interval=1, successes=3, clock=clock, sleep=clock.sleep
        )
    assert "within 10s" in str(raised.value)
    assert calls[0] == 11
    assert clock.now == 10


async def test_two_successes_are_not_three() -> None:
    clock = Clock()
    convert, _ = scripted([REFUSED, None, None, REFUSED, None, None] + [REFUSED] * 100)
    with pytest.raises(ConversionCheckTimeout):
        await wait_for_conversion(
            convert, within=20, interval=1, successes=3, clock=clock, sleep=clock.sleep
        )


def test_the_probe_is_a_valid_v1alpha1_sandbox() -> None:
    probe = probe_sandbox()
    assert probe["apiVersion"] == "agents.x-k8s.io/v1alpha1"
    assert probe["kind"] == "Sandbox"
    assert probe["metadata"] == {"generateName": "conversion-check-"}
    (container,) = probe["spec"]["podTemplate"]["spec"]["containers"]
    assert container["name"]
    assert container["image"]


async def test_main_dry_run_creates_through_v1alpha1_until_it_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command line against a fake API server: 500 (webhook unreachable), then 201."""
    seen: list[tuple[str, dict[str, str], Any]] = []

    async def create(request: web.Request) -> web.Response:
        seen.append((request.path, dict(request.query), await request.json()))
        if len(seen) <= 2:
            return web.json_response(
                {"kind": "Status", "code": 500, "reason": "InternalError", "message": str(REFUSED)},
                status=500,
            )
        return web.json_response(probe_sandbox(), status=201)

    app = web.Application()
    app.router.add_post("/apis/agents.x-k8s.io/v1alpha1/namespaces/{ns}/sandboxes", create)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = ClusterConfig(host=f"http://127.0.0.1:{port}")
    monkeypatch.setattr(check, "load_config", lambda _kubeconfig: config)
    try:
        status = await check._run(
            check._parse(["--namespace=rel-ns", "--interval=0", "--timeout=30", "--successes=2"])
        )
    finally:
        await runner.cleanup()
    assert status == 0
    assert len(seen) == 4
    for path, query, body in seen:
        assert path == "/apis/agents.x-k8s.io/v1alpha1/namespaces/rel-ns/sandboxes"
        assert query == {"dryRun": "All", "fieldManager": "agent-sandbox-conversion-check"}
        assert body == probe_sandbox()
