"""``cold``: Sandboxes created at a steady rate with no warm pool (default 1,000 at 50/s).

Each Sandbox's latency runs from just before its create call to the watch event that first
shows it ``Ready=True``; the sustained throughput is the Ready rate between the 10th and 90th
percentile of Ready times. The CPU seconds of every process over the phase show whether the
controller or the API server (with etcd) is the bottleneck: the target is a cold-start rate
bounded by the API server, i.e. a small controller share. kube-apiserver's request counters
give the API cost per cold Sandbox (every client: the creates, the controller, scheduler,
kwok).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from benchlib.clusterenv import NAMESPACE
from benchlib.harness import Context, ControllerSpec, run_scenario
from benchlib.promtext import request_delta
from benchlib.report import BenchResult
from benchlib.shapes import sandbox_manifest
from benchlib.stats import sustained_rate
from benchlib.timeline import (
    Timelines,
    sample,
    segment_summary,
    waterfall_rows,
    writes_per_object,
)
from benchlib.tracker import SandboxTracker
from benchlib.workload import add_latency_rows, add_request_rows, cpu_share_rows, send_open_loop
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiClient

WATERFALL_SAMPLE = 24
"""Sandboxes drawn in the waterfall plot (spread evenly over the run)."""


@dataclass(frozen=True)
class ColdSizes:
    """The scenario's sizes.

    Attributes:
        sandboxes: Sandboxes to create.
        rate: Creates per second.
        within: Seconds to wait for all to be Ready.
    """

    sandboxes: int = 1000
    rate: float = 50.0
    within: float = 900.0


def run(sizes: ColdSizes, *, spec: ControllerSpec, keep_workdir: bool = False) -> BenchResult:
    """Run the cold-Sandbox scenario against the controller ``spec`` names.

    Args:
        sizes: Count, rate and timeout.
        spec: The controller under test.
        keep_workdir: Keep the cluster's work directory.

    Returns:
        The result.
    """

    async def body(ctx: Context) -> None:
        async with ctx.client() as client:
            await measure_cold(ctx, client, sizes)

    return run_scenario(
        "cold",
        params={"sandboxes": sizes.sandboxes, "rate_per_s": sizes.rate},
        spec=spec,
        nodes=max(1, -(-sizes.sandboxes // 1000)),
        body=body,
        keep_workdir=keep_workdir,
    )


async def measure_cold(
    ctx: Context, client: ApiClient, sizes: ColdSizes, *, prefix: str = "cold"
) -> None:
    """Create the Sandboxes open-loop, time them to Ready, add throughput, CPU and API rows."""
    result = ctx.result
    tracker = SandboxTracker(client, NAMESPACE)
    await tracker.start()
    timelines = Timelines(client, NAMESPACE)
    await timelines.start()
    requests_before = ctx.api_requests()
    cpu_before = ctx.cpu_seconds()
    began = time.monotonic()
    try:
        names = [f"{prefix}-{i:05d}" for i in range(sizes.sandboxes)]

        async def create(name: str) -> None:
            await client.create(SANDBOXES, NAMESPACE, sandbox_manifest(name))

        sent = await send_open_loop(names, create, rate=sizes.rate)
        timelines.sent(sent.at)
        created = sent.ok
        await tracker.wait_marks(created, "ready", within=sizes.within)
        ready = {n: m for n in created if (m := tracker.mark(n, "ready")) is not None}
        await asyncio.sleep(1.0)  # let the timelines see the last writes
    finally:
        await tracker.stop()
        await timelines.stop()
    wall = time.monotonic() - began
    cpu_after = ctx.cpu_seconds()
    delta = request_delta(ctx.api_requests(), requests_before)

    latencies = [ready[n] - sent.at[n] for n in created if n in ready]
    ready_times = sorted(m - sent.started for m in ready.values())
    result.add("Sandboxes created", len(created))
    result.add("offered rate (achieved)", sent.rate, "creates/s")
    result.add("Sandboxes Ready", len(ready))
    add_latency_rows(result, "create->Ready", latencies)
    result.add("Ready throughput (sustained)", sustained_rate(ready_times), "Sandboxes/s",
               note="10th to 90th percentile of Ready times")  # fmt: skip
    result.add("time until all Ready", ready_times[-1] if ready_times else None, "s")
    cpu_share_rows(result, cpu_before, cpu_after, wall, per=("cold Sandbox", len(created)))
    add_request_rows(
        result, "cold Sandbox", delta, len(created), key="apiserver_requests_per_sandbox"
    )
    ctx.series["latency_s"] = latencies
    add_timeline_rows(ctx, timelines, created)
    ctx.series["ready_times_s"] = ready_times
    if sent.failures:
        result.notes.append(
            f"{len(sent.failures)} creates failed, e.g. {next(iter(sent.failures.values()))}"
        )
    missing = len(created) - len(ready)
    if missing:
        result.notes.append(f"{missing} Sandboxes not Ready within {sizes.within:.0f} s")


def add_timeline_rows(ctx: Context, timelines: Timelines, created: list[str]) -> None:
    """Segment rows (where create->Ready goes), writes seen per Sandbox, the waterfall data."""
    lines = [timelines.objects[n] for n in created if n in timelines.objects]
    segments = segment_summary(lines)
    for label, figures in segments.items():
        for q in ("p50", "p99"):
            ctx.result.add(f"{label} {q}", figures[f"{q}_ms"], "ms", note="watch timeline")
    status, metadata = writes_per_object(lines)
    ctx.result.add("Sandbox status writes seen per Sandbox", status, note="watch timeline")
    ctx.result.add("Sandbox metadata writes seen per Sandbox", metadata, note="watch timeline")
    ctx.result.details["timeline_segments"] = segments
    ctx.series["waterfall"] = waterfall_rows(timelines.objects, sample(created, WATERFALL_SAMPLE))
