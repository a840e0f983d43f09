"""``gateway``: how fast the E2B-compatible gateway hands out a sandbox from a warm pool.

The claim controller alone serves a warm claim in tens of milliseconds (``warm-claims``); an
E2B client goes through the gateway, which resolves the template's pool, creates the claim,
waits for it to be Ready in its own caches, copies the idle policy to the Sandbox and calls
the daemon's ``/init``. This scenario measures that whole path the way a client sees it.

Set-up: the benchmark cluster with our controller (extensions on), a SandboxTemplate and a
SandboxWarmPool both named :data:`TEMPLATE_ID`, a local ``sandboxd`` standing in for every
sandbox's envd (kwok pods run nothing; the gateway's testing-only pod address override sends
``/init`` there), ``agent-sandbox-gateway serve`` as a subprocess under its generated RBAC
(all namespaces, as deployed) and a tenant API key. Then, with plain httpx (E2B's body
``{"templateID": ...}`` and ``X-API-KEY``):

- one at a time: create (``POST /v2/sandboxes``), connect (``POST /sandboxes/{id}/connect``)
  and kill (``DELETE /sandboxes/{id}``), each timed from the call to the answer; each create
  comes :data:`SETTLE_SECONDS` after the last kill and on a full pool, so every sample meets
  the same quiet cluster (not the previous sandbox's clean-up and refill);
- a burst of creates at a modest concurrency, then their kills.

Each create's ``Server-Timing`` header splits the gateway's time into phases (resolve the
pool, create the claim, wait for Ready, policy patch, daemon ``/init``); the rest of the
client's time is HTTP, authentication and body parsing (``GET /health`` gives the HTTP floor).
The benchmark's own watch on the claims tells the claim controller's share from the gateway's:
"claim Ready in a watch" runs from the call to the watch event, "answer after the claim was
Ready" from there to the 201. Only warm creates count: the pool is refilled before each part,
and a create served by a new Sandbox is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from benchlib.clusterenv import CONTROLLER_NAMESPACE, NAMESPACE
from benchlib.harness import Context, ControllerSpec, run_scenario
from benchlib.report import BenchResult, at_most
from benchlib.stats import summarize
from benchlib.tracker import SandboxTracker
from benchlib.workload import add_latency_rows, template_manifest
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from kube_agent_sandbox.controller.runtime import ApiClient
from kube_agent_sandbox.testing.gateway import (
    ENVD_PORT,
    create_key,
    start_daemon,
    start_gateway,
    warm_template,
)
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor

log = logging.getLogger(__name__)

TEMPLATE_ID: Final = "bench-gateway"
CREATE_P50_TARGET_MS: Final = 100.0
"""A warm create through the gateway, one at a time (the claim alone takes tens of ms)."""
PHASES: Final = ("resolve", "claim", "env", "ready", "policy", "init")
"""The create's phases in the gateway's ``Server-Timing`` header, in order."""
SETTLE_SECONDS: Final = 1.0
"""Pause before each one-at-a-time create (then the pool must be full)."""
ROUND_TRIPS: Final = 20
"""``GET /health`` calls timed before the creates (the HTTP floor)."""
_ENTRY: Final = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*(?:;(.*))?$")


@dataclass(frozen=True)
class GatewaySizes:
    """The scenario's sizes.

    Attributes:
        serial: Sandboxes created, connected to and killed one at a time.
        burst: Sandboxes created at ``concurrency`` in flight (then killed).
        concurrency: Creates in flight during the burst.
        within: Seconds for the pool to fill and for each call.
    """

    serial: int = 50
    burst: int = 60
    concurrency: int = 10
    within: float = 300.0

    @property
    def pool(self) -> int:
        """Warm members: every create of the larger part, plus the warm-up one, is warm."""
        return max(self.serial, self.burst) + 2


@dataclass
class Samples:
    """What one part measured.

    Attributes:
        create: Seconds from each create call to its 201.
        connect: Seconds of each connect.
        kill: Seconds of each kill.
        phases: Gateway-side seconds per create phase (from ``Server-Timing``), per create.
        gateway_total: The gateway's own total per create.
        watch_ready: Seconds from each create call to the benchmark's own watch seeing the
            claim Ready (the controller's part, with the gateway's work before it).
        after_ready: Seconds from that watch event to the create's answer (negative when the
            answer came first): the gateway's own cache, ``/init`` and the HTTP answer.
        sent: When each create was sent (``time.monotonic``), by sandbox id.
        took: Each create's latency, by sandbox id.
        cold: Sandbox ids a pool member did not serve.
        errors: Failed calls, as ``"<call>: <status> <body>"``.
    """

    create: list[float] = field(default_factory=list)
    connect: list[float] = field(default_factory=list)
    kill: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)
    gateway_total: list[float] = field(default_factory=list)
    watch_ready: list[float] = field(default_factory=list)
    after_ready: list[float] = field(default_factory=list)
    sent: dict[str, float] = field(default_factory=dict)
    took: dict[str, float] = field(default_factory=dict)
    cold: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add_timing(self, header: str | None) -> None:
        """Record a create's ``Server-Timing`` phases (ignored when absent)."""
        timing = parse_server_timing(header or "")
        for name, seconds in timing.items():
            if name == "total":
                self.gateway_total.append(seconds)
            else:
                self.phases.setdefault(name, []).append(seconds)


def parse_server_timing(header: str) -> dict[str, float]:
    """The ``dur`` of every entry of a ``Server-Timing`` header, in seconds.

    Entries without a ``dur`` or with an unreadable one are left out; a name given twice adds
    up (as the gateway's phase timer does).

    Args:
        header: The header's value, e.g. ``claim;dur=6.2, ready;dur=40``.

    Returns:
        Seconds by entry name, in the header's order.
    """
    out: dict[str, float] = {}
    for entry in header.split(","):
        match = _ENTRY.match(entry)
        if match is None:
            continue
        name, params = match[1], match[2] or ""
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() != "dur":
                continue
            try:
                ms = float(value.strip().strip('"'))
            except ValueError:
                break
            if ms >= 0:
                out[name] = out.get(name, 0.0) + ms / 1000
            break
    return out


def phase_rows(
    phases: Mapping[str, Sequence[float]],
) -> list[tuple[str, float | None, float | None]]:
    """``(phase, p50 ms, p90 ms)`` in :data:`PHASES` order, then any other phase by name."""
    names = [p for p in PHASES if p in phases] + sorted(set(phases) - set(PHASES))
    rows = []
    for name in names:
        summary = summarize(phases[name]).scaled(1000)
        rows.append((name, summary.p50, summary.p90))
    return rows


def run(sizes: GatewaySizes, *, spec: ControllerSpec, keep_workdir: bool = False) -> BenchResult:
    """Run the gateway scenario against our controller.

    Args:
        sizes: How many creates, the burst's concurrency, the timeout.
        spec: The controller under test (ours: the gateway needs the extension controllers).
        keep_workdir: Keep the cluster's work directory (gateway and sandboxd logs included).

    Returns:
        The result.
    """
    params = {
        "serial": sizes.serial,
        "burst": sizes.burst,
        "concurrency": sizes.concurrency,
        "pool": sizes.pool,
    }

    async def body(ctx: Context) -> None:
        await _scenario(ctx, sizes)

    return run_scenario(
        "gateway", params=params, spec=spec, nodes=1, body=body, keep_workdir=keep_workdir
    )


async def _scenario(ctx: Context, sizes: GatewaySizes) -> None:
    async with gateway_stack(
        ctx, template_id=TEMPLATE_ID, replicas=sizes.pool, within=sizes.within
    ) as stack:
        ctx.result.details["gateway_log"] = str(stack.gateway.log_path)
        await _measure(ctx, stack.client, url=stack.url, key=stack.key, sizes=sizes)


@dataclass(frozen=True)
class GatewayStack:
    """A warm pool, a local sandboxd standing in for every pod, a gateway and a tenant key."""

    client: ApiClient
    gateway: ManagedProcess
    url: str
    key: str


@contextlib.asynccontextmanager
async def gateway_stack(
    ctx: Context, *, template_id: str, replicas: int, within: float
) -> AsyncIterator[GatewayStack]:
    """Start what the gateway scenarios measure against (``<workdir>/<template_id>``).

    Args:
        ctx: The scenario's context.
        template_id: Name of the SandboxTemplate and its SandboxWarmPool.
        replicas: Pool size, Ready before the gateway starts.
        within: Seconds the pool may take to fill.

    Yields:
        The stack; sandboxd and the gateway stop on exit.
    """
    env = ctx.env
    assert env.runner is not None
    assert env.access is not None
    workdir = env.workdir / template_id
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    supervisor = ProcessSupervisor(workdir / "logs")
    try:
        async with ctx.client(connections=8) as client:
            template, pool = warm_template(
                template_id,
                template_spec=template_manifest()["spec"],
                replicas=replicas,
                namespace=NAMESPACE,
            )
            await client.create(SANDBOX_TEMPLATES, NAMESPACE, template)
            await client.create(SANDBOX_WARM_POOLS, NAMESPACE, pool)
            await wait_pool(client, replicas, within=within, name=template_id)
            _, envd_port = await asyncio.to_thread(
                start_daemon,
                supervisor,
                "sandboxd",
                ["kube_agent_sandbox.sandboxd"],
                cwd=workdir / "home",
            )
            gateway, url = await asyncio.to_thread(
                start_gateway,
                env.runner,
                namespace=CONTROLLER_NAMESPACE,
                workdir=workdir,
                pod_address_override="127.0.0.1",
                port_map={ENVD_PORT: envd_port},
            )
            key = await asyncio.to_thread(
                create_key,
                env.access.kubeconfig,
                NAMESPACE,
                gateway_namespace=CONTROLLER_NAMESPACE,
            )
            yield GatewayStack(client=client, gateway=gateway, url=url, key=key)
    finally:
        await asyncio.to_thread(supervisor.stop_all)


async def wait_pool(
    client: ApiClient, replicas: int, *, within: float, name: str = TEMPLATE_ID
) -> float:
    """Wait until the pool ``name`` has ``replicas`` Ready members; the seconds it took."""
    began = time.monotonic()
    while True:
        pool = await client.get(SANDBOX_WARM_POOLS, NAMESPACE, name)
        ready = int((pool.get("status") or {}).get("readyReplicas") or 0)
        if ready >= replicas:
            return time.monotonic() - began
        if time.monotonic() - began > within:
            raise TimeoutError(f"warm pool has {ready}/{replicas} Ready after {within:.0f} s")
        await asyncio.sleep(0.2)


@dataclass
class _Calls:
    """The gateway's E2B calls, timed into :class:`Samples`."""

    http: httpx.AsyncClient
    admin: ApiClient
    claims: SandboxTracker

    async def create(self, into: Samples) -> str | None:
        began = time.monotonic()
        response = await self.http.post("/v2/sandboxes", json={"templateID": TEMPLATE_ID})
        took = time.monotonic() - began
        if response.status_code != 201:
            into.errors.append(f"create: {response.status_code} {response.text[:200]}")
            return None
        into.create.append(took)
        into.add_timing(response.headers.get("server-timing"))
        sandbox_id = str(response.json()["sandboxID"])
        into.sent[sandbox_id] = began
        into.took[sandbox_id] = took
        if not await self.served_warm(sandbox_id):
            into.cold.append(sandbox_id)
        return sandbox_id

    async def served_warm(self, sandbox_id: str) -> bool:
        """Whether a pool member serves the claim (its Sandbox has another name)."""
        claim = await self.admin.get(SANDBOX_CLAIMS, NAMESPACE, sandbox_id)
        bound = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
        return bool(bound) and bound != sandbox_id

    async def watched(self, sandbox_ids: Sequence[str], into: Samples) -> None:
        """Record when the benchmark's own watch saw each claim Ready (before the kill)."""
        await self.claims.wait_marks(list(sandbox_ids), "ready", within=10.0)
        for sandbox_id in sandbox_ids:
            ready = self.claims.mark(sandbox_id, "ready")
            if ready is not None:
                into.watch_ready.append(ready - into.sent[sandbox_id])
                into.after_ready.append(into.took[sandbox_id] - into.watch_ready[-1])

    async def round_trip(self) -> float:
        """Seconds of a ``GET /health``: the HTTP path with no work behind it."""
        began = time.monotonic()
        response = await self.http.get("/health")
        response.raise_for_status()
        return time.monotonic() - began

    async def connect(self, sandbox_id: str, into: Samples) -> None:
        began = time.monotonic()
        response = await self.http.post(f"/sandboxes/{sandbox_id}/connect", json={"timeout": 300})
        took = time.monotonic() - began
        if response.status_code not in (200, 201):
            into.errors.append(f"connect: {response.status_code} {response.text[:200]}")
            return
        into.connect.append(took)

    async def kill(self, sandbox_id: str, into: Samples) -> None:
        began = time.monotonic()
        response = await self.http.delete(f"/sandboxes/{sandbox_id}")
        took = time.monotonic() - began
        if response.status_code != 204:
            into.errors.append(f"kill: {response.status_code} {response.text[:200]}")
            return
        into.kill.append(took)


async def _measure(
    ctx: Context, admin: ApiClient, *, url: str, key: str, sizes: GatewaySizes
) -> None:
    limits = httpx.Limits(max_connections=sizes.concurrency + 2)
    async with httpx.AsyncClient(
        base_url=url,
        headers={"X-API-KEY": key},
        timeout=sizes.within,
        limits=limits,
        trust_env=False,
    ) as http:
        claims = SandboxTracker(admin, NAMESPACE, resource=SANDBOX_CLAIMS)
        await claims.start()
        try:
            calls = _Calls(http, admin, claims)
            round_trips = [await calls.round_trip() for _ in range(ROUND_TRIPS)]
            serial = await _one_at_a_time(calls, admin, sizes)
            burst, burst_seconds = await _burst(calls, admin, sizes)
        finally:
            await claims.stop()
    result = ctx.result
    result.add(
        "HTTP round trip (GET /health) p50",
        summarize(round_trips).scaled(1000).p50,
        "ms",
        note="the floor of any call on this machine",
    )
    _report(result, serial, burst, burst_seconds=burst_seconds, sizes=sizes)
    ctx.series["latency_s"] = serial.create
    result.details["samples_s"] = {"serial": _asdict(serial), "burst": _asdict(burst)}


async def _one_at_a_time(calls: _Calls, admin: ApiClient, sizes: GatewaySizes) -> Samples:
    """Create, connect, kill, one sandbox at a time, each on a full pool and a quiet cluster."""
    warmup = Samples()  # first connections and first requests: not counted
    first = await calls.create(warmup)
    if first is not None:
        await calls.kill(first, warmup)
    if warmup.errors:
        raise RuntimeError(f"the warm-up create failed: {warmup.errors[0]}")
    serial = Samples()
    for _ in range(sizes.serial):
        # the last kill's clean-up and refill are over: each create meets the same quiet
        # cluster, whatever the calls before it took
        await asyncio.sleep(SETTLE_SECONDS)
        await wait_pool(admin, sizes.pool, within=sizes.within)
        sandbox_id = await calls.create(serial)
        if sandbox_id is None:
            continue
        await calls.watched([sandbox_id], serial)
        await calls.connect(sandbox_id, serial)
        await calls.kill(sandbox_id, serial)
    return serial


async def _burst(calls: _Calls, admin: ApiClient, sizes: GatewaySizes) -> tuple[Samples, float]:
    """``burst`` creates with ``concurrency`` in flight, then their kills; and the seconds."""
    burst = Samples()
    await wait_pool(admin, sizes.pool, within=sizes.within)
    gate = asyncio.Semaphore(sizes.concurrency)

    async def one() -> str | None:
        async with gate:
            return await calls.create(burst)

    began = time.monotonic()
    made = [s for s in await asyncio.gather(*(one() for _ in range(sizes.burst))) if s]
    seconds = time.monotonic() - began
    await calls.watched(made, burst)

    async def kill(sandbox_id: str) -> None:
        async with gate:
            await calls.kill(sandbox_id, burst)

    await asyncio.gather(*(kill(s) for s in made))
    return burst, seconds


def _asdict(samples: Samples) -> dict[str, Any]:
    return {
        "create": samples.create,
        "connect": samples.connect,
        "kill": samples.kill,
        "phases": samples.phases,
        "gateway_total": samples.gateway_total,
        "watch_ready": samples.watch_ready,
        "after_ready": samples.after_ready,
    }


def _report(
    result: BenchResult,
    serial: Samples,
    burst: Samples,
    *,
    burst_seconds: float,
    sizes: GatewaySizes,
) -> None:
    add_latency_rows(
        result,
        "warm create, one at a time",
        serial.create,
        targets={"p50": CREATE_P50_TARGET_MS},
        note="POST /v2/sandboxes -> 201, client side",
    )
    for name, p50, p90 in phase_rows(serial.phases):
        result.add(f"  create phase {name} p50", p50, "ms", note=f"p90 {_fmt(p90)} ms")
    overhead = [c - g for c, g in zip(serial.create, serial.gateway_total, strict=False)]
    result.add(
        "  outside the create handler p50",
        summarize(overhead).scaled(1000).p50,
        "ms",
        note="client time minus the gateway's total: HTTP, auth, body",
    )
    _watch_rows(result, "create", serial)
    add_latency_rows(result, "connect, one at a time", serial.connect)
    add_latency_rows(result, "kill, one at a time", serial.kill)
    add_latency_rows(
        result,
        f"warm create, {sizes.concurrency} in flight",
        burst.create,
        note=f"{sizes.burst} creates",
    )
    for name, p50, p90 in phase_rows(burst.phases):
        result.add(f"  burst phase {name} p50", p50, "ms", note=f"p90 {_fmt(p90)} ms")
    _watch_rows(result, "burst", burst)
    result.add(
        "burst creates per second",
        len(burst.create) / burst_seconds if burst_seconds > 0 else None,
        "creates/s",
    )
    add_latency_rows(result, f"kill, {sizes.concurrency} in flight", burst.kill)
    cold = serial.cold + burst.cold
    result.add(
        "creates not served warm",
        len(cold),
        target="0",
        check=at_most(0),
        note="the pool was short: such a create waits for a new Sandbox",
    )
    errors = serial.errors + burst.errors
    result.add("failed calls", len(errors))
    if errors:
        result.failures.append(f"{len(errors)} gateway calls failed, e.g. {errors[:3]}")


def _watch_rows(result: BenchResult, label: str, samples: Samples) -> None:
    """The claim controller's share, as the benchmark's own watch saw it, and the rest."""
    watch = summarize(samples.watch_ready).scaled(1000)
    result.add(
        f"  {label}: claim Ready in a watch p50",
        watch.p50,
        "ms",
        note=f"from the call; p90 {_fmt(watch.p90)} ms",
    )
    result.add(
        f"  {label}: answer after the claim was Ready p50",
        summarize(samples.after_ready).scaled(1000).p50,
        "ms",
        note="the gateway's own cache, /init and the answer",
    )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"
