"""``refill``: a warm pool scaled from 0 to ``replicas`` (default 1,000) at once.

The template and an empty pool are created first; then ``spec.replicas`` is patched to the
target and the clock starts. Rows: time until the pool reports every member Ready (and until
the last member Sandbox shows ``Ready=True`` on the benchmark's watch), the Ready rate over
time, and the Sandbox create requests the API server served in the phase, read from its own
``apiserver_request_total{verb="POST",resource="sandboxes"}``: a pool that creates more than
it needs is wrong (a correctness failure when more Sandboxes were created than asked for).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from benchlib.clusterenv import NAMESPACE
from benchlib.harness import Context, ControllerSpec, run_scenario
from benchlib.promtext import request_delta
from benchlib.report import BenchResult, at_most
from benchlib.stats import sustained_rate
from benchlib.tracker import SandboxTracker
from benchlib.workload import (
    cpu_share_rows,
    pool_manifest,
    template_manifest,
    wait_pool_ready,
)
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS

SETTLE_S = 5.0
"""Seconds the benchmark keeps counting creates after the pool is full (late extra creates)."""


@dataclass(frozen=True)
class RefillSizes:
    """The scenario's sizes.

    Attributes:
        replicas: The pool's size after the scale-up.
        within: Seconds to wait for the pool to fill.
    """

    replicas: int = 1000
    within: float = 900.0


def run(sizes: RefillSizes, *, spec: ControllerSpec, keep_workdir: bool = False) -> BenchResult:
    """Run the pool-refill scenario against the controller ``spec`` names.

    Args:
        sizes: Pool size and timeout.
        spec: The controller under test.
        keep_workdir: Keep the cluster's work directory.

    Returns:
        The result.
    """

    async def body(ctx: Context) -> None:
        await _measure(ctx, sizes)

    return run_scenario(
        "refill",
        params={"replicas": sizes.replicas},
        spec=spec,
        nodes=max(1, -(-sizes.replicas // 1000)),
        body=body,
        keep_workdir=keep_workdir,
    )


def _created(ctx: Context) -> dict[str, float]:
    """Sandbox POSTs served so far, per answer code."""
    page = ctx.env.apiserver_metrics()
    return page.by_label(
        "apiserver_request_total", "code", verb="POST", resource="sandboxes", subresource=""
    )


async def _measure(ctx: Context, sizes: RefillSizes) -> None:
    result = ctx.result
    async with ctx.client() as client:
        await client.create(SANDBOX_TEMPLATES, NAMESPACE, template_manifest())
        await client.create(SANDBOX_WARM_POOLS, NAMESPACE, pool_manifest(0))
        await asyncio.sleep(2)  # let the controller see the empty pool
        tracker = SandboxTracker(client, NAMESPACE)
        await tracker.start()
        try:
            posts_before = _created(ctx)
            requests_before = ctx.api_requests()
            cpu_before = ctx.cpu_seconds()
            began = time.monotonic()
            await client.patch(
                SANDBOX_WARM_POOLS, NAMESPACE, "bench-pool", {"spec": {"replicas": sizes.replicas}}
            )
            full = await wait_pool_ready(client, sizes.replicas, within=sizes.within)
            await tracker.wait_for(lambda: tracker.ready_count >= sizes.replicas, within=60)
            wall = time.monotonic() - began
            cpu_after = ctx.cpu_seconds()
            await asyncio.sleep(SETTLE_S)
            posts_after = _created(ctx)
            delta = request_delta(ctx.api_requests(), requests_before)
            ready_times = sorted(
                m - began for n in tracker.states if (m := tracker.mark(n, "ready")) is not None
            )
        finally:
            await tracker.stop()
    by_code = {
        code: n - posts_before.get(code, 0.0)
        for code, n in sorted(posts_after.items())
        if n - posts_before.get(code, 0.0) > 0
    }
    posts, created = sum(by_code.values()), by_code.get("201", 0.0)
    result.details["post_sandboxes_by_code"] = by_code
    result.add("time until the pool reports all Ready", full, "s")
    result.add("time until the last member is Ready (watch)",
               ready_times[-1] if ready_times else None, "s")  # fmt: skip
    result.add("Ready throughput (sustained)", sustained_rate(ready_times), "Sandboxes/s")
    result.add(
        "Sandbox create requests (POST sandboxes)",
        posts,
        target=f"= {sizes.replicas:,}",
        check=lambda v: v == sizes.replicas,
        note="kube-apiserver's apiserver_request_total, every answer code",
    )
    result.add("Sandboxes created (201)", created, target=f"<= {sizes.replicas:,}",
               check=at_most(sizes.replicas),
               note=", ".join(f"{n:.0f}x {code}" for code, n in by_code.items()))  # fmt: skip
    result.add("Pod create requests (POST pods)", delta.get(("POST", "pods")))
    cpu_share_rows(result, cpu_before, cpu_after, wall)
    result.details["apiserver_requests"] = {
        f"{verb} {resource}": v for (verb, resource), v in sorted(delta.items())
    }
    ctx.series["ready_times_s"] = ready_times
    if created > sizes.replicas:
        result.failures.append(
            f"the pool created {created:.0f} Sandboxes for {sizes.replicas} replicas"
        )
