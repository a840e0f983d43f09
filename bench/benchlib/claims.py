"""``warm-claims``: a warm pool, then a burst of claims at a steady rate (upstream's
scalability scenario, docs/guides/benchmarks.md: a pool of 1,300 and 1,200 claims at 100/s).

A SandboxTemplate and a SandboxWarmPool of ``pool`` members are created and filled. Then
``claims`` SandboxClaims arrive open-loop at ``rate`` per second (claim ``i`` is sent at
``t0 + i / rate``, as independent agents would send them). Claim latency is measured twice:

- by the benchmark: from just before the create call to the watch event that first shows the
  claim ``Ready=True``;
- by the controller: ``agent_sandbox_client_claim_startup_latency_ms`` (from the
  ``client-first-requested-at`` annotation the benchmark stamps on each claim to Ready) and
  ``agent_sandbox_claim_controller_startup_latency_ms`` (from the controller's first sight of
  the claim), estimated from their buckets. Upstream serves the same metric names.

Every claim must become Ready and be bound to a Sandbox no other claim has: lost or doubly
bound claims are correctness failures. After the burst the benchmark waits for the pool to be
full again, so the refill the claims caused is part of their API cost (kube-apiserver's own
request counters, every client).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from benchlib.clusterenv import NAMESPACE
from benchlib.harness import Context, ControllerSpec, run_scenario
from benchlib.promtext import WRITE_VERBS, Scrape, request_delta, writes
from benchlib.report import BenchResult, at_most
from benchlib.stats import sustained_rate
from benchlib.tracker import SandboxTracker
from benchlib.workload import (
    add_latency_rows,
    add_request_rows,
    check_binding,
    claim_manifest,
    cpu_share_rows,
    list_all,
    pool_manifest,
    send_open_loop,
    template_manifest,
    wait_pool_ready,
)
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from kube_agent_sandbox.controller.runtime import ApiClient

log = logging.getLogger(__name__)

P50_TARGET_MS = 50.0
P99_TARGET_MS = 300.0
WRITES_TARGET = 10.0
"""Apiserver writes per warm claim, every client, refill included (upstream spends about 23)."""
CONTROLLER_HISTOGRAMS = (
    ("agent_sandbox_client_claim_startup_latency_ms", "controller metric: client request->Ready"),
    ("agent_sandbox_claim_controller_startup_latency_ms", "controller metric: first seen->Ready"),
)


@dataclass(frozen=True)
class ClaimSizes:
    """The scenario's sizes.

    Attributes:
        pool: Warm pool replicas.
        claims: Claims to send.
        rate: Claims per second.
        within: Seconds to wait for the pool to fill, and for the claims to become Ready.
    """

    pool: int = 1300
    claims: int = 1200
    rate: float = 100.0
    within: float = 900.0


def run(sizes: ClaimSizes, *, spec: ControllerSpec, keep_workdir: bool = False) -> BenchResult:
    """Run the warm-claim scenario against the controller ``spec`` names.

    Args:
        sizes: Pool, claims, rate and timeout.
        spec: The controller under test.
        keep_workdir: Keep the cluster's work directory.

    Returns:
        The result.
    """
    params = {"pool": sizes.pool, "claims": sizes.claims, "rate_per_s": sizes.rate}

    async def body(ctx: Context) -> None:
        async with ctx.client() as client:
            await create_pool(ctx, client, sizes)
            await measure_claims(ctx, client, sizes)

    room = sizes.pool + sizes.claims
    return run_scenario(
        "warm-claims",
        params=params,
        spec=spec,
        nodes=max(1, -(-room // 1000)),
        body=body,
        keep_workdir=keep_workdir,
    )


async def create_pool(ctx: Context, client: ApiClient, sizes: ClaimSizes) -> None:
    """Create the template and the pool and wait until it is full; adds the fill rate."""
    await client.create(SANDBOX_TEMPLATES, NAMESPACE, template_manifest())
    await client.create(SANDBOX_WARM_POOLS, NAMESPACE, pool_manifest(sizes.pool))
    fill = await wait_pool_ready(client, sizes.pool, within=sizes.within)
    ctx.result.add("pool fill rate", sizes.pool / fill if fill else None, "Sandboxes/s")


async def measure_claims(ctx: Context, client: ApiClient, sizes: ClaimSizes) -> None:
    """Send the claims, time them, check their binding, and count the API requests spent."""
    result = ctx.result
    requests_before = ctx.api_requests()
    controller_before = _controller_writes(await ctx.controller_metrics())
    cpu_before, began_burst = ctx.cpu_seconds(), time.monotonic()
    tracker = SandboxTracker(client, NAMESPACE, resource=SANDBOX_CLAIMS)
    await tracker.start()
    try:
        names = [f"claim-{i:05d}" for i in range(sizes.claims)]

        async def create(name: str) -> None:
            await client.create(SANDBOX_CLAIMS, NAMESPACE, claim_manifest(name))

        sent = await send_open_loop(names, create, rate=sizes.rate)
        created = sent.ok
        await tracker.wait_marks(created, "ready", within=sizes.within)
        ready = {n: m for n in created if (m := tracker.mark(n, "ready")) is not None}
        claims_seen = {n: tracker.objects[n] for n in created if n in tracker.objects}
    finally:
        await tracker.stop()
    latencies = [ready[n] - sent.at[n] for n in created if n in ready]
    binding = check_binding(claims_seen, await list_all(client))
    lost = [n for n in created if n not in ready]

    result.add("claims sent", len(created))
    result.add("offered rate (achieved)", sent.rate, "claims/s")
    result.add("claims Ready", len(ready))
    result.add("claims lost", len(lost), target="0", check=at_most(0),
               note=f"not Ready within {sizes.within:.0f} s")  # fmt: skip
    result.add(
        "claims bound twice",
        len(binding.double) + len(binding.foreign),
        target="0",
        check=at_most(0),
        note="a Sandbox two claims report, or owned by another",
    )
    warm = sum(1 for claim, sandbox in binding.bound.items() if sandbox != claim)
    result.add("served warm", warm, note="status.sandbox.name is a pool member, not the claim")
    add_latency_rows(
        result,
        "claim->Ready (client watch)",
        latencies,
        targets={"p50": P50_TARGET_MS, "p99": P99_TARGET_MS},
    )
    first = min(sent.at.values(), default=0.0)
    ready_times = sorted(m - first for m in ready.values())
    result.add("claims Ready per second (sustained)", sustained_rate(ready_times), "claims/s",
               note="10th to 90th percentile of Ready times")  # fmt: skip
    ctx.series["latency_s"] = latencies
    ctx.series["ready_times_s"] = ready_times
    if sent.failures:
        result.notes.append(
            f"{len(sent.failures)} claim creates failed, e.g. {next(iter(sent.failures.values()))}"
        )
    if lost:
        result.failures.append(f"{len(lost)} claims lost (never Ready), e.g. {lost[:3]}")
    if binding.double:
        result.failures.append(f"Sandboxes bound to two claims: {binding.double[:5]}")
    if binding.foreign:
        result.failures.append(f"claims bound to a Sandbox they do not own: {binding.foreign[:5]}")

    metrics = await ctx.controller_metrics()
    if metrics is not None:
        for histogram, label in CONTROLLER_HISTOGRAMS:
            count = metrics.total(f"{histogram}_count")
            for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
                result.add(
                    f"{label} {name}",
                    metrics.quantile(histogram, q),
                    "ms",
                    note=f"from buckets (first bound 100 ms), {int(count or 0)} observed",
                )
    else:
        result.notes.append("the controller's /metrics was not read (no {metrics_port})")

    began = time.monotonic()
    await wait_pool_ready(client, sizes.pool, within=sizes.within)
    result.add("pool full again after the burst", time.monotonic() - began, "s")
    cpu_share_rows(result, cpu_before, ctx.cpu_seconds(), time.monotonic() - began_burst,
                   per=("warm claim", len(created)))  # fmt: skip
    delta = request_delta(ctx.api_requests(), requests_before)
    add_request_rows(
        result,
        "warm claim",
        delta,
        len(created),
        writes_target=WRITES_TARGET,
        key="apiserver_requests_per_claim",
    )
    result.details["apiserver_writes_total"] = writes(delta)
    controller_after = _controller_writes(await ctx.controller_metrics())
    if controller_before is not None and controller_after is not None and created:
        result.add(
            "controller writes per warm claim",
            (controller_after - controller_before) / len(created),
            note="its rest_client_requests_total, refill included",
        )


def _controller_writes(metrics: Scrape | None) -> float | None:
    """Mutating requests the controller's own client has sent so far (None without metrics)."""
    if metrics is None:
        return None
    return sum(metrics.total("rest_client_requests_total", method=verb) or 0.0
               for verb in sorted(WRITE_VERBS))  # fmt: skip
