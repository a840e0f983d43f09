"""``scale``: N Sandboxes on kwok nodes against the real controller process.

Creates N Sandboxes with bounded concurrency, waits (on a watch) until all are Ready, and
reads the controller's throughput from its ``/metrics`` and its memory and CPU from ``/proc``.
Then it restarts the controller (a start with N Sandboxes and N Pods to LIST, the path a
failover takes), suspends and resumes a sample, and deletes everything, timing each step.
The issue's target: controller RSS <= 150 MiB with 10k Sandboxes and their Pods cached.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import aiohttp

from benchlib import promtext
from benchlib.clusterenv import NAMESPACE, BenchCluster, controller_log_errors
from benchlib.ops import BatchOutcome, percentile, run_bounded
from benchlib.procstats import MIB, ProcessSampler, read_sample
from benchlib.report import BenchResult, Interrupted, at_most
from benchlib.shapes import sandbox_manifest
from benchlib.tracker import SandboxTracker
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import ApiClient, ApiError
from kube_agent_sandbox.testing.processes import ManagedProcess

log = logging.getLogger(__name__)

TARGET_MIB = 150.0
TARGET_OBJECTS = 10_000
CONTROLLER = "sandbox"
SCRAPE_EVERY = 2.0
"""Seconds between the benchmark's own /metrics polls. Each scrape makes the controller read its
whole Sandbox cache (the agent_sandboxes gauge), so polling faster would inflate the CPU and
peak memory being measured."""
_WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def run(
    *,
    sandboxes: int,
    nodes: int,
    concurrency: int,
    suspend_sample: int,
    ready_timeout: float,
    workers: int,
    controller_args: list[str],
    keep_workdir: bool = False,
) -> BenchResult:
    """Run the scale benchmark.

    Args:
        sandboxes: How many Sandboxes to create.
        nodes: kwok nodes to spread their pods over.
        concurrency: Creates/deletes in flight at once.
        suspend_sample: Sandboxes to suspend and resume.
        ready_timeout: Seconds to wait for all Ready (and for each later step).
        workers: ``--sandbox-concurrent-workers``.
        controller_args: Extra controller flags.
        keep_workdir: Keep the cluster's work directory.

    Returns:
        The result.
    """
    result = BenchResult(
        "scale",
        params={
            "sandboxes": sandboxes,
            "nodes": nodes,
            "create_concurrency": concurrency,
            "suspend_sample": min(suspend_sample, sandboxes),
            "workers": workers,
            "controller_args": " ".join(controller_args) or "-",
        },
    )
    with BenchCluster(nodes=nodes, keep_workdir=keep_workdir) as env:
        controller = env.start_controller(workers=workers, extra_args=controller_args)
        phases = _Phases(env, controller, result, sandboxes=sandboxes, concurrency=concurrency)
        try:
            asyncio.run(
                phases.run(
                    suspend_sample=min(suspend_sample, sandboxes),
                    ready_timeout=ready_timeout,
                    workers=workers,
                    controller_args=controller_args,
                )
            )
        except KeyboardInterrupt:
            result.error = "interrupted (Ctrl-C); the numbers above are partial"
            raise Interrupted(result) from None
        finally:
            for process in env.controllers:
                if process.alive():
                    status = env.stop_controller(process)
                    result.details.setdefault("controller_exit", {})[process.name] = status
                errors, first = controller_log_errors(process)
                result.details.setdefault("controller_log_errors", {})[process.name] = {
                    "count": errors,
                    "first": first,
                }
            result.details["timings"] = env.timings
    return result


class _Phases:
    """The benchmark's steps, sharing the client, the tracker and the samplers."""

    def __init__(
        self,
        env: BenchCluster,
        controller: ManagedProcess,
        result: BenchResult,
        *,
        sandboxes: int,
        concurrency: int,
    ) -> None:
        self.env = env
        self.controller = controller
        self.result = result
        self.n = sandboxes
        self.concurrency = concurrency
        self.names = [f"sbx-{i:05d}" for i in range(sandboxes)]
        self.client: ApiClient | None = None
        self.tracker: SandboxTracker | None = None
        self.idle_rss: int | None = None

    async def run(
        self,
        *,
        suspend_sample: int,
        ready_timeout: float,
        workers: int,
        controller_args: list[str],
    ) -> None:
        async with self.env.admin_client(connections=self.concurrency + 10) as client:
            self.client = client
            self.tracker = SandboxTracker(client, NAMESPACE)
            await self.tracker.start()
            try:
                sampler = ProcessSampler(self.controller.pid, interval=1.0)
                sampler.start()
                idle = sampler.sample()
                self.idle_rss = idle.rss if idle is not None else None
                if idle is not None:
                    self.result.add("controller RSS idle (no objects)", idle.rss / MIB, "MiB")
                all_ready = await self._create(sampler, ready_timeout)
                await sampler.stop()
                self.result.details["controller_timeline"] = sampler.timeline()
                if all_ready:
                    await self._restart(workers, controller_args, ready_timeout)
                if suspend_sample:
                    await self._suspend_resume(suspend_sample, ready_timeout)
                await self._delete(ready_timeout)
            finally:
                await self.tracker.stop()

    # -- create -----------------------------------------------------------------------------
    async def _create(self, sampler: ProcessSampler, within: float) -> bool:
        assert self.client is not None
        assert self.tracker is not None
        client, tracker, result = self.client, self.tracker, self.result
        before = sampler.sample()
        cpu0 = before.cpu_seconds if before else 0.0
        components0 = self._component_cpu()
        api0 = await self._apiserver_requests()

        async def create(name: str) -> None:
            await client.create(SANDBOXES, NAMESPACE, sandbox_manifest(name))

        creating = asyncio.create_task(
            run_bounded(
                self.names,
                create,
                concurrency=self.concurrency,
                ok=lambda e: isinstance(e, ApiError) and e.already_exists,
            )
        )
        done = await tracker.wait_for(lambda: tracker.ready_count >= self.n, within=within)
        outcome: BatchOutcome = await creating
        ready_at = time.monotonic()
        total = ready_at - outcome.started
        components1 = self._component_cpu()
        result.details["cpu_seconds_by_process_create_phase"] = {
            name: round(components1[name] - components0.get(name, 0.0), 2) for name in components1
        }
        spent = result.details["cpu_seconds_by_process_create_phase"]
        result.notes.append(
            f"CPU seconds in the create phase ({total:.0f} s wall, {os.cpu_count()} CPUs): "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(spent.items(), key=lambda i: -i[1]))
        )
        api1 = await self._apiserver_requests()
        writes = {
            key: round(count - api0.get(key, 0.0))
            for key, count in api1.items()
            if count - api0.get(key, 0.0) >= 1 and key.split()[0] in _WRITE_VERBS
        }
        result.details["apiserver_writes_create_phase"] = writes
        result.notes.append(
            "API server writes in the create phase (all clients), per Sandbox: "
            + ", ".join(
                f"{k} {v / self.n:.2f}" for k, v in sorted(writes.items(), key=lambda i: -i[1])
            )
        )
        result.add("Sandboxes created", self.n - len(outcome.failures), "")
        result.add("create rate (client)", outcome.rate, "creates/s",
                   note=f"{self.concurrency} in flight; {outcome.retries} retries")  # fmt: skip
        create_p = [percentile(outcome.durations, q) for q in (0.5, 0.99)]
        result.add("create call p50", _ms(create_p[0]), "ms")
        result.add("create call p99", _ms(create_p[1]), "ms")
        result.add(
            "time until all Ready" if done else f"Ready after {within:.0f}s timeout",
            total if done else float(tracker.ready_count),
            "s" if done else "Sandboxes",
        )
        result.add("Ready throughput", tracker.ready_count / total, "Sandboxes/s")
        latencies = [
            mark - outcome.sent_at[name]
            for name in self.names
            if (mark := tracker.mark(name, "ready")) is not None and name in outcome.sent_at
        ]
        for q in (0.5, 0.95, 0.99):
            result.add(f"create->Ready p{int(q * 100)} (under load)",
                       percentile(latencies, q), "s")  # fmt: skip
        # Let the queue drain and the process settle before reading memory.
        await self._until_idle(within=120)
        await asyncio.sleep(5)
        steady = sampler.sample()
        scrape = await promtext.scrape(self.env.metrics_url)
        reconciles = scrape.total("controller_runtime_reconcile_total", controller=CONTROLLER)
        result.add("reconciles (all results)", reconciles, "")
        result.add("reconcile rate", (reconciles or 0) / total, "reconciles/s",
                   note="until all Ready")  # fmt: skip
        result.add("reconcile errors", scrape.total(
            "controller_runtime_reconcile_errors_total", controller=CONTROLLER), "")  # fmt: skip
        result.add("workqueue adds", scrape.total("workqueue_adds_total", name=CONTROLLER), "")
        retries = scrape.total("workqueue_retries_total", name=CONTROLLER)
        result.add("workqueue retries", retries, "")
        for hist, label in (
            ("workqueue_queue_duration_seconds", "queue wait"),
            ("workqueue_work_duration_seconds", "work time"),
        ):
            for q in (0.5, 0.99):
                value = scrape.quantile(hist, q, name=CONTROLLER)
                result.add(f"{label} p{int(q * 100)}", _ms(value), "ms", note="from buckets")
        result.details["reconcile_by_result"] = scrape.by_label(
            "controller_runtime_reconcile_total", "result", controller=CONTROLLER
        )
        result.details["rest_client_requests"] = {
            f"{s.labels.get('method')} {s.labels.get('code')}": s.value
            for s in scrape.samples
            if s.name == "rest_client_requests_total"
        }
        if steady is not None:
            cpu = steady.cpu_seconds - cpu0
            result.add(
                f"controller RSS with {self.n:,} Sandboxes + Pods",
                steady.rss / MIB,
                "MiB",
                target=f"<= {TARGET_MIB:.0f} MiB" if self.n == TARGET_OBJECTS else None,
                check=at_most(TARGET_MIB),
            )
            result.add("controller peak RSS (VmHWM)", sampler.peak_rss / MIB, "MiB",
                       target=f"<= {TARGET_MIB:.0f} MiB" if self.n == TARGET_OBJECTS else None,
                       check=at_most(TARGET_MIB))  # fmt: skip
            if self.n != TARGET_OBJECTS and self.idle_rss is not None:
                idle = self.idle_rss
                per_object = (steady.rss - idle) / self.n
                projected = (idle + per_object * TARGET_OBJECTS) / MIB
                result.add("controller RSS per Sandbox (+ its Pod)", per_object, "B")
                result.add(
                    "EXTRAPOLATED controller RSS at 10k Sandboxes",
                    projected,
                    "MiB",
                    target=f"<= {TARGET_MIB:.0f} MiB",
                    check=at_most(TARGET_MIB),
                    note=f"linear from idle and {self.n:,} objects; not measured",
                )
            result.add("controller CPU for the create phase", cpu, "CPU s")
            result.add("controller CPU per Sandbox", cpu / self.n * 1000, "CPU ms")
        return done

    async def _apiserver_requests(self) -> dict[str, float]:
        """kube-apiserver's request counter summed by ``VERB resource[/subresource]``."""
        assert self.client is not None
        cfg = self.client.config
        try:
            async with (
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=cfg.ssl_context or True)
                ) as session,
                session.get(cfg.host + "/metrics", headers=cfg.auth_headers()) as response,
            ):
                scrape = promtext.Scrape(await response.text())
        except Exception as err:  # diagnostics only
            log.warning("cannot read kube-apiserver metrics: %s", err)
            return {}
        out: dict[str, float] = {}
        for sample in scrape.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            key = f"{labels.get('verb', '')} {resource}"
            out[key] = out.get(key, 0.0) + sample.value
        return out

    def _component_cpu(self) -> dict[str, float]:
        """CPU seconds so far of every cluster component, the controller and this process."""
        pids = {p.name: p.pid for p in self.env.cluster.processes()} if self.env.cluster else {}
        pids["controller"] = self.controller.pid
        pids["bench-driver"] = os.getpid()
        out: dict[str, float] = {}
        for name, pid in pids.items():
            try:
                out[name] = read_sample(pid).cpu_seconds
            except ProcessLookupError:
                continue
        return out

    async def _until_idle(self, *, within: float) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                scrape = await promtext.scrape(self.env.metrics_url)
            except Exception as err:
                log.warning("metrics scrape failed: %s", err)
                await asyncio.sleep(SCRAPE_EVERY)
                continue
            depth = scrape.total("workqueue_depth", name=CONTROLLER) or 0
            active = scrape.total("controller_runtime_active_workers", controller=CONTROLLER)
            if depth == 0 and not active:
                return
            await asyncio.sleep(SCRAPE_EVERY)

    # -- restart (LIST path) ----------------------------------------------------------------
    async def _restart(self, workers: int, controller_args: list[str], within: float) -> None:
        result = self.result
        status = self.env.stop_controller(self.controller)
        result.details.setdefault("controller_exit", {})[self.controller.name] = status
        began = time.monotonic()
        # Started from this (the main) thread on purpose: the supervisor ties each child's
        # life to the thread that started it, so a worker thread would take it down on exit.
        # It blocks the loop until /readyz answers, which nothing here minds.
        controller = self.env.start_controller(workers=workers, extra_args=controller_args)
        self.controller = controller
        ready_s = time.monotonic() - began
        sampler = ProcessSampler(controller.pid, interval=0.5)
        sampler.start()
        # Each existing Sandbox is reconciled once after the caches sync.
        deadline = time.monotonic() + within
        reconciled = 0.0
        while time.monotonic() < deadline:
            try:
                scrape = await promtext.scrape(self.env.metrics_url)
                reconciled = (
                    scrape.total("controller_runtime_reconcile_total", controller=CONTROLLER) or 0
                )
                depth = scrape.total("workqueue_depth", name=CONTROLLER) or 0
                if reconciled >= self.n and depth == 0:
                    break
            except Exception as err:
                log.debug("scrape: %s", err)
            await asyncio.sleep(SCRAPE_EVERY)
        resynced_s = time.monotonic() - began
        await asyncio.sleep(5)
        await sampler.stop()
        last = sampler.samples[-1] if sampler.samples else None
        result.add("restart: process start to /readyz", ready_s, "s")
        result.add(
            "restart: start to every Sandbox reconciled",
            resynced_s if reconciled >= self.n else None,
            "s",
            note="LIST of N Sandboxes + N Pods, then N reconciles",
        )
        if last is not None:
            target = f"<= {TARGET_MIB:.0f} MiB" if self.n == TARGET_OBJECTS else None
            result.add("restart: controller RSS after resync", last.rss / MIB, "MiB",
                       target=target, check=at_most(TARGET_MIB))  # fmt: skip
            result.add("restart: controller peak RSS (VmHWM)", sampler.peak_rss / MIB, "MiB",
                       target=target, check=at_most(TARGET_MIB))  # fmt: skip
            result.add("restart: controller CPU to resync", last.cpu_seconds, "CPU s")
            if self.n != TARGET_OBJECTS and self.idle_rss is not None:
                per_object = (last.rss - self.idle_rss) / self.n
                result.add("restart: RSS per Sandbox (+ its Pod)", per_object, "B")
                result.add(
                    "EXTRAPOLATED RSS at 10k after a restart",
                    (self.idle_rss + per_object * TARGET_OBJECTS) / MIB,
                    "MiB",
                    target=f"<= {TARGET_MIB:.0f} MiB",
                    check=at_most(TARGET_MIB),
                    note=f"linear from idle and {self.n:,} objects; not measured",
                )

    # -- suspend / resume -------------------------------------------------------------------
    async def _suspend_resume(self, count: int, within: float) -> None:
        assert self.client is not None
        assert self.tracker is not None
        client, tracker, result = self.client, self.tracker, self.result
        sample = self.names[:: max(1, self.n // count)][:count]

        def patcher(mode: str) -> Any:
            async def patch(name: str) -> None:
                await client.patch(SANDBOXES, NAMESPACE, name, {"spec": {"operatingMode": mode}})

            return patch

        for mode, mark, label in (
            ("Suspended", "suspended", "suspend"),
            ("Running", "ready", "resume"),
        ):
            tracker.reset(sample, mark)
            outcome = await run_bounded(sample, patcher(mode), concurrency=self.concurrency)
            done = await tracker.wait_marks(sample, mark, within=within)
            finished = time.monotonic()
            marks = [
                m - outcome.sent_at[n]
                for n in sample
                if (m := tracker.mark(n, mark)) is not None and n in outcome.sent_at
            ]
            state = "Suspended" if mark == "suspended" else "Ready"
            result.add(
                f"{label} {len(sample)}: until all {state}",
                finished - outcome.started if done else None,
                "s",
                note="" if done else f"only {len(marks)} reached {state} in {within:.0f}s",
            )
            result.add(f"{label}: per-Sandbox p50", percentile(marks, 0.5), "s")
            result.add(f"{label}: per-Sandbox p95", percentile(marks, 0.95), "s")

    # -- delete -----------------------------------------------------------------------------
    async def _delete(self, within: float) -> None:
        assert self.client is not None
        assert self.tracker is not None
        client, tracker, result = self.client, self.tracker, self.result

        async def delete(name: str) -> None:
            await client.delete(SANDBOXES, NAMESPACE, name, propagation_policy="Background")

        existing = [n for n in self.names if n in tracker.states]
        outcome = await run_bounded(
            existing,
            delete,
            concurrency=self.concurrency,
            ok=lambda e: isinstance(e, ApiError) and e.not_found,
        )
        result.add("delete rate (client)", outcome.rate, "deletes/s")
        done = await tracker.wait_for(lambda: tracker.present == 0, within=within)
        result.add("delete all: until no Sandbox left",
                   time.monotonic() - outcome.started if done else None, "s")  # fmt: skip
        pods_left = await self._wait_no_pods(within)
        result.add(
            "delete all: until no Pod left",
            time.monotonic() - outcome.started if pods_left == 0 else None,
            "s",
            note="garbage collection by kube-controller-manager"
            + ("" if pods_left == 0 else f"; {pods_left} left at timeout"),
        )
        await asyncio.sleep(5)
        try:
            after = read_sample(self.controller.pid)
            result.add("controller RSS after deleting all", after.rss / MIB, "MiB")
        except ProcessLookupError:
            result.notes.append("the controller exited before the end of the delete phase")

    async def _wait_no_pods(self, within: float) -> int:
        assert self.client is not None
        deadline = time.monotonic() + within
        left = -1
        while time.monotonic() < deadline:
            page = await self.client.list(PODS, NAMESPACE, limit=1)
            remaining = (page.get("metadata") or {}).get("remainingItemCount") or 0
            left = len(page.get("items") or ()) + int(remaining)
            if left == 0:
                return 0
            await asyncio.sleep(1)
        return left


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
