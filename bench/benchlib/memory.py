"""``memory``: the controller's resident memory idle, with N Sandboxes and their Pods cached,
and after a full relist (default steps 1,000 and 10,000).

RSS comes from ``/proc/<pid>/status`` of the controller process, read after each step has
settled (every Sandbox Ready, then ``settle`` seconds). The per-10k figure is the growth from
idle to the largest step, scaled to 10,000 Sandboxes (exact when the largest step is 10,000).

A full relist is forced from the API server's side: kube-apiserver is restarted with its own
flags. Every watch ends; a restarted API server's watch cache starts at etcd's current
revision, so a client resuming from an older resourceVersion gets ``410 Gone`` and must LIST
everything again, as after a long disconnection or an etcd compaction. The LIST requests
served after the restart (kube-apiserver's counters start again at zero; kube-controller-
manager's garbage collector and the scheduler list too) show that the relist happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchlib.clusterenv import NAMESPACE
from benchlib.harness import Context, ControllerSpec, run_scenario
from benchlib.ops import run_bounded
from benchlib.promtext import apiserver_requests
from benchlib.report import BenchResult, at_most
from benchlib.shapes import sandbox_manifest
from benchlib.tracker import SandboxTracker
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiClient, ApiError

IDLE_TARGET_MIB = 45.0
PER_10K_TARGET_MIB = 55.0
CREATE_CONCURRENCY = 50
MIN_STEP_FOR_TARGET = 2000
"""Below this many Sandboxes, fixed costs (buffers, allocator arenas) dominate the growth and
scaling it to 10k says nothing: the row is shown without a target."""
RELIST_LOG = "relisting"
"""What this project's informers log when a watch cannot resume (counted in the controller's
log; another controller's log may say something else)."""


@dataclass(frozen=True)
class MemorySizes:
    """The scenario's sizes.

    Attributes:
        steps: Sandbox totals at which RSS is read, ascending.
        settle: Seconds to wait after a step before reading RSS.
        within: Seconds to wait for a step's Sandboxes to be Ready.
    """

    steps: tuple[int, ...] = (1000, 10_000)
    settle: float = 15.0
    within: float = 1800.0


def run(sizes: MemorySizes, *, spec: ControllerSpec, keep_workdir: bool = False) -> BenchResult:
    """Run the memory scenario against the controller ``spec`` names.

    Args:
        sizes: Steps, settle time and timeout.
        spec: The controller under test.
        keep_workdir: Keep the cluster's work directory.

    Returns:
        The result.
    """

    async def body(ctx: Context) -> None:
        await _measure(ctx, sizes)

    top = max(sizes.steps)
    return run_scenario(
        "memory",
        params={"steps": ",".join(str(s) for s in sizes.steps), "settle_s": sizes.settle},
        spec=spec,
        nodes=max(1, -(-top // 1000)),
        body=body,
        keep_workdir=keep_workdir,
    )


async def _fill_to(
    client: ApiClient, tracker: SandboxTracker, names: Sequence[str], within: float
) -> bool:
    async def create(name: str) -> None:
        await client.create(SANDBOXES, NAMESPACE, sandbox_manifest(name))

    await run_bounded(
        names,
        create,
        concurrency=CREATE_CONCURRENCY,
        ok=lambda e: isinstance(e, ApiError) and e.already_exists,
    )
    total = len(tracker.states)
    return await tracker.wait_for(lambda: tracker.ready_count >= total, within=within)


async def _measure(ctx: Context, sizes: MemorySizes) -> None:
    result = ctx.result
    await asyncio.sleep(sizes.settle)
    idle = ctx.rss_mib()
    result.add("RSS idle", idle, "MiB", target=f"<= {IDLE_TARGET_MIB:g} MiB",
               check=at_most(IDLE_TARGET_MIB), note="caches synced, no objects")  # fmt: skip
    marks: dict[str, float] = {"idle": time.monotonic()}
    at_top: float | None = None
    async with ctx.client() as client:
        tracker = SandboxTracker(client, NAMESPACE)
        await tracker.start()
        try:
            done = 0
            for step in sizes.steps:
                names = [f"mem-{i:05d}" for i in range(done, step)]
                all_ready = await _fill_to(client, tracker, names, sizes.within)
                done = step
                await asyncio.sleep(sizes.settle)
                rss = ctx.rss_mib()
                marks[f"{step:,}"] = time.monotonic()
                at_top = rss
                result.add(
                    f"RSS with {step:,} Sandboxes + Pods",
                    rss,
                    "MiB",
                    note="" if all_ready else f"only {tracker.ready_count:,} Ready in time",
                )
        finally:
            await tracker.stop()
    top = max(sizes.steps)
    if idle is not None and at_top is not None:
        per_10k = (at_top - idle) * 10_000 / top
        judged = top >= MIN_STEP_FOR_TARGET
        result.add(
            "RSS growth per 10k Sandboxes + Pods",
            per_10k,
            "MiB",
            target=f"<= {PER_10K_TARGET_MIB:g} MiB" if judged else None,
            check=at_most(PER_10K_TARGET_MIB),
            note="measured"
            if top == 10_000
            else f"scaled from {top:,}" + ("" if judged else ": fixed costs dominate, not judged"),
        )
    await _relist(ctx, sizes, top)
    ctx.series["rss_marks"] = (
        {k: round(v - ctx.sampler.samples[0].at, 2) for k, v in marks.items()}
        if ctx.sampler.samples
        else {}
    )


async def _relist(ctx: Context, sizes: MemorySizes, top: int) -> None:
    result = ctx.result
    before = len(ctx.sampler.samples)
    logged = _log_count(ctx, RELIST_LOG)
    gets = await _controller_gets(ctx)
    began = time.monotonic()
    # From this (the main) thread: the supervisor ties a child to the thread that started it.
    ctx.env.restart_apiserver()
    result.add("kube-apiserver restart", time.monotonic() - began, "s")
    await asyncio.sleep(max(sizes.settle, 10.0))
    if not ctx.controller.alive():
        result.failures.append("the controller exited after the API server restarted")
        return
    rss = ctx.rss_mib()
    window = ctx.sampler.samples[before:]
    requests = apiserver_requests(ctx.env.apiserver_metrics())
    lists = {r: requests.get(("LIST", r), 0.0) for r in ("sandboxes", "pods")}
    result.add(f"RSS after a full relist ({top:,})", rss, "MiB",
               note="kube-apiserver restarted; watches resume with 410 Gone")  # fmt: skip
    result.add("peak RSS during the relist",
               max((s.rss for s in window), default=0) / 2**20 or None, "MiB")  # fmt: skip
    result.add("LIST sandboxes after the restart", lists["sandboxes"],
               note="every client; >= 1 shows the relist")  # fmt: skip
    result.add("LIST pods after the restart", lists["pods"], note="every client")
    gets_after = await _controller_gets(ctx)
    result.add(
        "controller GET requests during the relist",
        None if gets is None or gets_after is None else gets_after - gets,
        note="its rest_client_requests_total: lists and watches, nothing else runs",
    )
    result.add(
        "informer relists in the controller's log",
        _log_count(ctx, RELIST_LOG) - logged,
        note=f"lines with {RELIST_LOG!r} (this project's informers)",
    )


def _log_count(ctx: Context, needle: str) -> int:
    try:
        return ctx.controller.log_path.read_text(errors="replace").count(needle)
    except OSError:
        return 0


async def _controller_gets(ctx: Context) -> float | None:
    metrics = await ctx.controller_metrics()
    if metrics is None:
        return None
    return metrics.total("rest_client_requests_total", method="GET")
