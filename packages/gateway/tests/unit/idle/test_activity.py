"""The activity tracker: debounced Lease renewals, open streams, the Lease body, heartbeats."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.heartbeat import parse_micro_time
from kube_agent_sandbox.api.rest import LEASES
from kube_agent_sandbox.controller.runtime import FakeApi
from kube_agent_sandbox.gateway.activity import (
    HEARTBEAT_PATH,
    ActivityTracker,
    flush_interval,
    heartbeat_route,
    renew_lease,
)
from kube_agent_sandbox.gateway.tokens import Tokens

NS = "tenant"
T0 = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Record:
    namespace: str
    claim: dict[str, Any]
    sandbox: dict[str, Any] | None
    pod: dict[str, Any] | None = None
    ready: bool = True
    suspended: bool = False

    @property
    def sandbox_id(self) -> str:
        return str(self.claim["metadata"]["name"])

    @property
    def claim_uid(self) -> str:
        return str(self.claim["metadata"]["uid"])


def record(name: str = "sb1", idle: str | None = "15m") -> Record:
    annotations = {c.ANNOTATION_IDLE_TIMEOUT: idle} if idle is not None else {}
    sandbox = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "annotations": annotations,
        }
    }
    claim = {"metadata": {"name": name, "namespace": NS, "uid": f"claim-{name}"}}
    return Record(NS, claim, sandbox)


class Clocks:
    """Monotonic seconds and the matching wall time, moved together."""

    def __init__(self) -> None:
        self.t = 0.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> dt.datetime:
        return T0 + dt.timedelta(seconds=self.t)


def tracker(api: FakeApi, clocks: Clocks) -> ActivityTracker:
    return ActivityTracker(client=api, holder="gw-0", clock=clocks.mono, wall=clocks.wall)


def lease_writes(api: FakeApi) -> int:
    return len(api.writes(LEASES))


async def _steady_traffic(
    *, idle: str, seconds: int, rate: int = 10
) -> tuple[int, ActivityTracker, FakeApi]:
    api, clocks = FakeApi(), Clocks()
    tr = tracker(api, clocks)
    rec = record(idle=idle)
    for tick in range(seconds * rate):
        clocks.t = tick / rate
        tr.request_started(rec)
        if tick % rate == 0:  # the flush loop ticks once a second
            await tr.flush()
    return lease_writes(api), tr, api


async def test_steady_traffic_costs_one_write_per_interval() -> None:
    # 10 requests/s for 60 simulated seconds, idle 15m: interval 90 s.
    writes, tr, _api = await _steady_traffic(idle="15m", seconds=60)
    assert writes == 1
    assert tr.writes == 1
    # Over ten minutes: one write per 90 s (0, 90, ..., 540) = 7, i.e. ~0.67 per minute.
    writes_10m, _, _ = await _steady_traffic(idle="15m", seconds=600)
    assert writes_10m == 7
    # A one-minute idle timeout flushes every 6 s: 10 writes per minute.
    writes_1m, _, _ = await _steady_traffic(idle="1m", seconds=60)
    assert writes_1m == 10
    # The floor: never more often than every 5 s.
    assert flush_interval(10) == 5.0
    writes_floor, _, _ = await _steady_traffic(idle="10s", seconds=60)
    assert writes_floor == 12


async def test_the_first_request_after_a_quiet_period_is_written_at_once() -> None:
    api, clocks = FakeApi(), Clocks()
    tr = tracker(api, clocks)
    rec = record()
    await tr.flush()
    assert lease_writes(api) == 0
    clocks.t = 3.0
    tr.request_started(rec)
    await tr.flush()
    lease = api.obj(LEASES, "sb1", NS)
    assert lease is not None
    assert parse_micro_time(lease["spec"]["renewTime"]) == clocks.wall()


async def test_the_lease_body() -> None:
    api, clocks = FakeApi(), Clocks()
    tr = tracker(api, clocks)
    tr.request_started(record())
    await tr.flush()
    lease = api.obj(LEASES, "sb1", NS)
    assert lease is not None
    assert lease["metadata"]["labels"] == {c.LABEL_HEARTBEAT: "true"}
    assert lease["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "name": "sb1",
            "uid": "uid-sb1",
        }
    ]
    assert lease["spec"]["holderIdentity"] == "gw-0"
    assert lease["spec"]["leaseDurationSeconds"] == 900
    assert lease["spec"]["renewTime"] == "2026-12-01T12:00:00.000000Z"


async def test_an_open_stream_keeps_renewing_without_requests() -> None:
    api, clocks = FakeApi(), Clocks()
    tr = tracker(api, clocks)
    rec = record(idle="1m")  # interval 6 s
    tr.stream_opened(rec)
    for second in range(61):
        clocks.t = float(second)
        await tr.flush()
    assert lease_writes(api) == 11  # 0, 6, ..., 60
    lease = api.obj(LEASES, "sb1", NS)
    assert lease is not None
    assert parse_micro_time(lease["spec"]["renewTime"]) == T0 + dt.timedelta(seconds=60)
    tr.stream_closed(rec)
    clocks.t = 70.0
    await tr.flush()
    for second in range(71, 200):
        clocks.t = float(second)
        await tr.flush()
    assert lease_writes(api) == 12  # the close, then silence
    assert tr.open_streams(NS, "sb1") == 0


async def test_sandboxes_without_a_policy_cost_nothing() -> None:
    api, clocks = FakeApi(), Clocks()
    tr = tracker(api, clocks)
    for idle in (None, "0", "soon"):
        tr.request_started(record(idle=idle))
    tr.request_started(Record(NS, {"metadata": {"name": "x", "uid": "u"}}, None))
    await tr.flush()
    assert api.calls == []


async def test_a_lease_renewed_by_another_writer_is_updated_after_one_read() -> None:
    api, clocks = FakeApi(), Clocks()
    tr = tracker(api, clocks)
    rec = record(idle="1m")
    tr.request_started(rec)
    await tr.flush()
    api.mutate(LEASES, "sb1", lambda o: o["spec"].update(holderIdentity="sdk"), NS)
    clocks.t = 10.0
    tr.request_started(rec)
    api.clear_calls()
    await tr.flush()
    assert [call.verb for call in api.calls] == ["update", "get", "update"]
    lease = api.obj(LEASES, "sb1", NS)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "gw-0"


async def test_renew_lease_creates_then_updates() -> None:
    api = FakeApi()
    sandbox = record().sandbox
    assert sandbox is not None
    first = await renew_lease(api, sandbox, holder="a", idle=60, now=T0)
    assert [call.verb for call in api.calls] == ["create"]
    api.clear_calls()
    # Without the known copy: create fails with AlreadyExists, read, update.
    await renew_lease(api, sandbox, holder="b", idle=60, now=T0 + dt.timedelta(seconds=1))
    assert [call.verb for call in api.calls] == ["create", "get", "update"]
    api.clear_calls()
    stale = await renew_lease(api, sandbox, holder="c", idle=60, now=T0, known=first)
    assert [call.verb for call in api.calls] == ["update", "get", "update"]
    assert stale["spec"]["holderIdentity"] == "c"


async def test_a_failed_write_is_retried_at_the_next_interval() -> None:
    from kube_agent_sandbox.controller.runtime import ApiError

    api, clocks = FakeApi(), Clocks()
    tr = tracker(api, clocks)
    api.fail("create", "leases", ApiError(403, "Forbidden", "no"))
    tr.request_started(record(idle="1m"))
    assert await tr.flush() == 0
    assert tr.failures == 1
    clocks.t = 1.0
    assert await tr.flush() == 0  # not before the interval
    clocks.t = 6.0
    assert await tr.flush() == 1
    assert api.obj(LEASES, "sb1", NS) is not None


async def test_start_and_stop_flush_what_is_pending() -> None:
    api, clocks = FakeApi(), Clocks()
    tr = tracker(api, clocks)
    await tr.start()
    tr.request_started(record())
    await tr.stop()
    assert api.obj(LEASES, "sb1", NS) is not None


# -- the sandboxd heartbeat endpoint ---------------------------------------------------------


class _Index:
    def __init__(self, rec: Record) -> None:
        self.rec = rec

    def lookup(self, sandbox_id: str) -> Record | None:
        return self.rec if sandbox_id == self.rec.sandbox_id else None


@dataclass
class _State:
    index: _Index
    tokens: Tokens
    activity: Any


@pytest.fixture
def heartbeat_client() -> tuple[httpx.AsyncClient, ActivityTracker, Tokens]:
    api, clocks = FakeApi(), Clocks()
    tr = tracker(api, clocks)
    tokens = Tokens(b"k" * 32)
    state = _State(_Index(record()), tokens, tr)
    app = Starlette(routes=[heartbeat_route(state)])
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://gateway"), tr, tokens


async def test_a_heartbeat_with_the_envd_token_is_activity(
    heartbeat_client: tuple[httpx.AsyncClient, ActivityTracker, Tokens],
) -> None:
    client, tr, tokens = heartbeat_client
    token = tokens.envd_access_token("claim-sb1")
    answer = await client.post(
        HEARTBEAT_PATH,
        headers={"X-Access-Token": token, "E2b-Sandbox-Id": "sb1"},
        json={"runningProcesses": 1},
    )
    assert answer.status_code == 204
    assert [key for key, _ in tr.due()] == [(NS, "sb1")]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"E2b-Sandbox-Id": "sb1"},
        {"E2b-Sandbox-Id": "sb1", "X-Access-Token": "wrong"},
        {"E2b-Sandbox-Id": "other", "X-Access-Token": "x"},
        {"X-Access-Token": "x"},
    ],
)
async def test_a_heartbeat_without_the_right_token_is_refused(
    heartbeat_client: tuple[httpx.AsyncClient, ActivityTracker, Tokens], headers: dict[str, str]
) -> None:
    client, tr, _ = heartbeat_client
    answer = await client.post(HEARTBEAT_PATH, headers=headers)
    assert answer.status_code == 401
    assert answer.json()["code"] == 401
    assert tr.due() == []


async def test_another_sandboxes_token_is_refused(
    heartbeat_client: tuple[httpx.AsyncClient, ActivityTracker, Tokens],
) -> None:
    client, tr, tokens = heartbeat_client
    token = tokens.envd_access_token("claim-other")
    answer = await client.post(
        HEARTBEAT_PATH, headers={"X-Access-Token": token, "E2b-Sandbox-Id": "sb1"}
    )
    assert answer.status_code == 401
    assert tr.due() == []
