"""One scenario run: a fresh cluster, the controller under test, sampling, and clean-up.

Every scenario of the comparison suite (warm claims, cold Sandboxes, pool refill, memory, API
efficiency) runs the same way: start a :class:`~benchlib.clusterenv.BenchCluster`, start the
controller under test (ours, or any command line given with ``--controller-cmd``), sample its
RSS and CPU from ``/proc`` for the whole run, hand a :class:`Context` to the scenario's body,
and record how the controller ended. Keeping that here lets ``--compare`` run the same body
against two controllers and get results whose rows line up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchlib.clusterenv import BenchCluster, controller_log_errors
from benchlib.procstats import MIB, ProcessSampler, read_sample
from benchlib.promtext import RequestKey, Scrape, apiserver_requests, scrape
from benchlib.report import BenchResult, Interrupted
from kube_agent_sandbox.controller.runtime import ApiClient
from kube_agent_sandbox.testing.processes import ManagedProcess

log = logging.getLogger(__name__)

OURS = "ours"
OTHER = "other"


@dataclass(frozen=True)
class ControllerSpec:
    """Which controller a scenario runs against.

    Attributes:
        label: ``ours`` or ``other``: names the column in a comparison.
        command: Command line of another controller; None runs this project's controller.
        workers: ``--sandbox-concurrent-workers`` for ours.
        extra_args: More flags for ours (``--controller-arg``).
    """

    label: str = OURS
    command: str | None = None
    workers: int = 100
    extra_args: tuple[str, ...] = ()

    def describe(self) -> str:
        """The controller as the report names it."""
        if self.command is None:
            from kube_agent_sandbox.controller import __version__

            flags = " ".join(self.extra_args)
            return f"agent-sandbox-controller {__version__} (this repository) {flags}".rstrip()
        return self.command


@dataclass
class Context:
    """What a scenario body works with.

    Attributes:
        env: The cluster.
        spec: The controller under test.
        result: Where the scenario adds its rows.
        sampler: RSS/CPU samples of the controller, every 0.5 s, for the whole run.
        series: Plot data (``latency_s``, ``ready_times_s``, ...) stored in the JSON report.
    """

    env: BenchCluster
    spec: ControllerSpec
    result: BenchResult
    sampler: ProcessSampler
    series: dict[str, Any] = field(default_factory=dict)

    @property
    def controller(self) -> ManagedProcess:
        """The running controller process."""
        return self.env.controllers[-1]

    def client(self, *, connections: int = 64) -> ApiClient:
        """An admin API client (use it as an async context manager)."""
        return self.env.admin_client(connections=connections)

    def api_requests(self) -> dict[RequestKey, float]:
        """kube-apiserver's request counters now, per verb and resource."""
        return apiserver_requests(self.env.apiserver_metrics())

    async def controller_metrics(self) -> Scrape | None:
        """The controller's ``/metrics``; None when it serves none or cannot be read."""
        if not self.env.metrics_url:
            return None
        try:
            return await scrape(self.env.metrics_url)
        except Exception as err:  # an optional figure; the scenario goes on
            log.warning("cannot read the controller's metrics: %s", err)
            return None

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds so far of every cluster component, the controller and this process."""
        pids = self.env.process_pids()
        pids["bench-driver"] = os.getpid()
        out: dict[str, float] = {}
        for name, pid in pids.items():
            try:
                out[name] = read_sample(pid).cpu_seconds
            except ProcessLookupError:
                continue
        return out

    def rss_mib(self) -> float | None:
        """The controller's RSS now, in MiB (None when it is gone)."""
        reading = self.sampler.sample()
        return None if reading is None else reading.rss / MIB


Body = Callable[[Context], Awaitable[None]]


def start_controller(env: BenchCluster, spec: ControllerSpec) -> ManagedProcess:
    """Start the controller ``spec`` names on ``env`` (ours with the extensions)."""
    if spec.command is not None:
        return env.start_command(spec.command)
    return env.start_controller(
        workers=spec.workers, extra_args=list(spec.extra_args), extensions=True
    )


def run_scenario(
    name: str,
    *,
    params: dict[str, Any],
    spec: ControllerSpec,
    nodes: int,
    body: Body,
    keep_workdir: bool = False,
) -> BenchResult:
    """Run ``body`` on a fresh cluster against the controller ``spec`` names.

    Args:
        name: Scenario name (the result's name).
        params: Sizes and rates, for the report.
        spec: The controller under test.
        nodes: kwok nodes with room for 1,000 pods each.
        body: The scenario.
        keep_workdir: Keep the cluster's work directory (logs, kubeconfigs).

    Returns:
        The result; ``error`` is set when the run could not finish.
    """
    result = BenchResult(name, params={**params, "controller": spec.label, "nodes": nodes})
    result.details["controller"] = {"label": spec.label, "command": spec.describe()}
    with BenchCluster(nodes=nodes, keep_workdir=keep_workdir) as env:
        result.details["versions"] = {"kubernetes": env.kubernetes_version()}
        began = time.monotonic()
        process = start_controller(env, spec)
        result.details["timings"] = env.timings
        sampler = ProcessSampler(process.pid, interval=0.5)
        context = Context(env, spec, result, sampler)
        try:
            asyncio.run(_with_sampler(context, body))
        except KeyboardInterrupt:
            result.error = "interrupted (Ctrl-C); the numbers above are partial"
            raise Interrupted(result) from None
        except Exception as err:  # keep the rows measured before the failure
            log.exception("%s failed against %s", name, spec.label)
            result.error = f"{type(err).__name__}: {err}"
        finally:
            _finish(context, began)
    return result


async def _with_sampler(context: Context, body: Body) -> None:
    context.sampler.start()
    try:
        await body(context)
    finally:
        await context.sampler.stop()


def _finish(context: Context, began: float) -> None:
    env, result, sampler = context.env, context.result, context.sampler
    if sampler.samples:
        start = sampler.samples[0].at
        context.series["rss"] = [
            {"t": round(s.at - start, 2), "rss_mib": round(s.rss / MIB, 2)} for s in sampler.samples
        ]
        result.add("controller peak RSS", sampler.peak_rss / MIB, "MiB")
    result.details["series"] = context.series
    result.details["wall_s"] = time.monotonic() - began
    with _quiet("stopping the controller"):
        for process in env.controllers:
            if process.alive():
                result.details.setdefault("controller_exit", {})[process.name] = (
                    env.stop_controller(process)
                )
            errors, first = controller_log_errors(process)
            result.details.setdefault("controller_log_errors", {})[process.name] = {
                "count": errors,
                "first": first,
            }


@contextmanager
def _quiet(what: str) -> Iterator[None]:
    try:
        yield
    except Exception:
        log.exception("%s failed", what)
