"""``latency``: how long one Sandbox takes to become Ready on an idle cluster, and how long
suspend and resume take.

Sandboxes are created one at a time; each latency runs from just before the create call to
the watch event that first shows ``Ready=True`` (kwok marks the pod Running as soon as it is
bound, so this is the controller + scheduler + API server path, not container start-up). Then
some of them are suspended (until ``Suspended=True``) and resumed (until ``Ready=True``), one
at a time.
"""

from __future__ import annotations

import asyncio
import time

from benchlib.clusterenv import NAMESPACE, BenchCluster, controller_log_errors
from benchlib.ops import percentile
from benchlib.report import BenchResult, Interrupted, at_most
from benchlib.shapes import sandbox_manifest
from benchlib.tracker import SandboxTracker
from kube_agent_sandbox.api.resources import SANDBOXES

TIMEOUT = 60.0
POD_STARTUP_TARGET_S = 5.0
"""Upstream's kwok presubmit pod start-up threshold (docs/guides/benchmarks.md), used as a
yardstick."""


def run(
    *,
    samples: int,
    suspend_samples: int,
    workers: int,
    controller_args: list[str],
    keep_workdir: bool = False,
) -> BenchResult:
    """Run the latency benchmark.

    Args:
        samples: Sandboxes created one after another.
        suspend_samples: Suspend/resume cycles (on the first Sandboxes).
        workers: ``--sandbox-concurrent-workers``.
        controller_args: Extra controller flags.
        keep_workdir: Keep the cluster's work directory.

    Returns:
        The result.
    """
    suspend_samples = min(suspend_samples, samples)
    result = BenchResult("latency", params={"samples": samples, "suspend_samples": suspend_samples})
    with BenchCluster(nodes=1, keep_workdir=keep_workdir) as env:
        controller = env.start_controller(workers=workers, extra_args=controller_args)
        try:
            asyncio.run(_measure(env, result, samples, suspend_samples))
        except KeyboardInterrupt:
            result.error = "interrupted (Ctrl-C); the numbers above are partial"
            raise Interrupted(result) from None
        finally:
            status = env.stop_controller(controller)
            errors, first = controller_log_errors(controller)
            result.details["controller_exit"] = status
            result.details["controller_log_errors"] = {"count": errors, "first": first}
            result.details["timings"] = env.timings
    return result


async def _measure(env: BenchCluster, result: BenchResult, samples: int, cycles: int) -> None:
    async with env.admin_client(connections=4) as client:
        tracker = SandboxTracker(client, NAMESPACE)
        await tracker.start()
        try:
            names = [f"lat-{i:03d}" for i in range(samples)]
            create: list[float] = []
            for name in names:
                sent = time.monotonic()
                await client.create(SANDBOXES, NAMESPACE, sandbox_manifest(name))
                if not await tracker.wait_marks([name], "ready", within=TIMEOUT):
                    raise TimeoutError(f"{name} not Ready within {TIMEOUT:.0f}s")
                create.append((tracker.mark(name, "ready") or 0.0) - sent)
            _add_stats(result, "create->Ready", create, target=True)

            suspend: list[float] = []
            resume: list[float] = []
            for name in names[:cycles]:
                for mode, mark, into in (
                    ("Suspended", "suspended", suspend),
                    ("Running", "ready", resume),
                ):
                    tracker.reset([name], mark)
                    sent = time.monotonic()
                    await client.patch(
                        SANDBOXES, NAMESPACE, name, {"spec": {"operatingMode": mode}}
                    )
                    if not await tracker.wait_marks([name], mark, within=TIMEOUT):
                        raise TimeoutError(f"{name} not {mark} within {TIMEOUT:.0f}s")
                    into.append((tracker.mark(name, mark) or 0.0) - sent)
            if cycles:
                _add_stats(result, "suspend->Suspended", suspend)
                _add_stats(result, "resume->Ready", resume, target=True)
            result.details["samples_s"] = {"create": create, "suspend": suspend, "resume": resume}
        finally:
            await tracker.stop()


def _add_stats(
    result: BenchResult, label: str, values: list[float], *, target: bool = False
) -> None:
    p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
    result.add(f"{label} p50", _ms(p50), "ms")
    result.add(
        f"{label} p95",
        _ms(p95),
        "ms",
        target=f"<= {POD_STARTUP_TARGET_S * 1000:.0f} ms" if target else None,
        check=at_most(POD_STARTUP_TARGET_S * 1000),
        note="yardstick: upstream's kwok pod start-up threshold" if target else "",
    )
    result.add(f"{label} max", _ms(max(values) if values else None), "ms")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
