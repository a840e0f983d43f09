"""Soak: many Sandboxes created, suspended, resumed and deleted over a long run, memory watched.

``python bench/soak.py`` (or ``nox -s soak -- [options]``) starts the benchmark cluster
(:class:`benchlib.clusterenv.BenchCluster`: local control plane, kwok nodes, the controller as a
subprocess under its generated RBAC) and drives ``--sandboxes`` Sandboxes through their whole
life in waves of ``--wave`` at a time: create (paced at ``--rate`` per second), wait Ready,
suspend, wait Suspended, resume, wait Ready, delete, wait gone. Meanwhile the controller's RSS
is sampled every second and its ``/metrics`` scraped every few seconds.

It writes ``bench/reports/soak-<timestamp>/``: ``soak.json`` (every figure and the timelines),
``soak.md`` (a summary) and ``rss.png`` (RSS and work-queue depth over time). It checks:

- memory stays flat: the least-squares slope of RSS after the first wave (warm-up) in MiB per
  hour, and the growth of the RSS measured after each wave's deletes (the controller holds no
  Sandbox then), against ``--max-growth-mib``;
- the work queue drains: every controller's ``workqueue_depth`` is back to 0 at the end;
- nothing was lost: every wave reached every state, and the controller logged no error.

The exit status is 1 when a check fails, 2 when the run could not complete. ``--quick``
(200 Sandboxes, waves of 100) finishes in a few minutes for CI; ``--duration`` stops starting
new waves after that many seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from benchlib import promtext  # noqa: E402
from benchlib.clusterenv import (  # noqa: E402
    NAMESPACE,
    BenchCluster,
    controller_log_error_classes,
    controller_log_errors,
)
from benchlib.ops import run_bounded  # noqa: E402
from benchlib.procstats import MIB, ProcessSampler, read_sample  # noqa: E402
from benchlib.shapes import sandbox_manifest  # noqa: E402
from benchlib.tracker import SandboxTracker  # noqa: E402

from kube_agent_sandbox.api.resources import SANDBOXES  # noqa: E402
from kube_agent_sandbox.controller.runtime import ApiClient, ApiError  # noqa: E402

log = logging.getLogger("bench.soak")

SCRAPE_EVERY = 5.0  # seconds between two /metrics scrapes
DRAIN_WITHIN = 120.0  # seconds for the work queues to drain at the end


@dataclass
class SoakOptions:
    """What the soak run does (the command line's flags)."""

    sandboxes: int = 10_000
    wave: int = 500
    rate: float = 50.0
    concurrency: int = 50
    nodes: int = 4
    duration: float = 0.0
    state_timeout: float = 600.0
    max_growth_mib: float = 25.0
    out: Path = BENCH_DIR / "reports"


@dataclass
class Wave:
    """Timings of one wave (seconds from the wave's start to each state of all its Sandboxes)."""

    index: int
    size: int
    created_s: float | None = None
    ready_s: float | None = None
    suspended_s: float | None = None
    resumed_s: float | None = None
    deleted_s: float | None = None
    rss_after_delete_mib: float | None = None
    failures: int = 0


@dataclass
class SoakRun:
    """Everything measured."""

    options: dict[str, Any]
    waves: list[Wave] = field(default_factory=list)
    rss: list[tuple[float, float]] = field(default_factory=list)  # (t s, MiB)
    depth: list[tuple[float, float]] = field(default_factory=list)  # (t s, summed depth)
    reconcile_rate: list[tuple[float, float]] = field(default_factory=list)  # (t s, per s)
    reconciles: float = 0.0
    reconcile_errors: float = 0.0
    drained: bool = False
    final_depth: dict[str, float] = field(default_factory=dict)
    log_errors: int = 0
    log_error_examples: list[str] = field(default_factory=list)
    log_error_classes: dict[str, int] = field(default_factory=dict)  # errorClass -> lines
    wall_s: float = 0.0
    stopped_early: str = ""
    wave_ends: list[float] = field(default_factory=list)  # t (s) when each wave finished

    def rss_slope_mib_per_hour(self) -> float | None:
        """Least-squares slope of RSS over time after the first wave (warm-up excluded)."""
        if not self.waves or self.waves[0].deleted_s is None:
            return None
        start = self._wave_end(0)
        points = [(t, m) for t, m in self.rss if t >= start]
        if len(points) < 3:
            return None
        return _slope(points) * 3600.0

    def growth_after_delete_mib(self) -> float | None:
        """RSS after the last wave's deletes minus after the first wave's (0 = flat)."""
        after = [w.rss_after_delete_mib for w in self.waves if w.rss_after_delete_mib is not None]
        return after[-1] - after[0] if len(after) >= 2 else None

    def _wave_end(self, index: int) -> float:
        return self.wave_ends[index] if index < len(self.wave_ends) else 0.0


def _slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(m for _, m in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mx) * (m - my) for t, m in points) / var


class Soak:
    """Drives the waves against a started :class:`BenchCluster`."""

    def __init__(self, env: BenchCluster, options: SoakOptions, run: SoakRun, *, pid: int) -> None:
        """Bind the cluster, the options, where figures go and the controller's PID."""
        self.env, self.options, self.run, self._pid = env, options, run, pid
        self.began = time.monotonic()
        self.client: ApiClient | None = None
        self.tracker: SandboxTracker | None = None

    def _t(self) -> float:
        return time.monotonic() - self.began

    async def drive(self) -> None:
        """Run every wave while sampling the controller."""
        sampler = ProcessSampler(self._pid, interval=1.0)
        sampler.start()
        scraper = asyncio.create_task(self._scrape_loop(), name="soak-scrape")
        async with self.env.admin_client(connections=self.options.concurrency + 10) as client:
            self.client = client
            self.tracker = SandboxTracker(client, NAMESPACE)
            await self.tracker.start()
            try:
                await self._waves()
                await self._drain()
            finally:
                await self.tracker.stop()
                scraper.cancel()
                await asyncio.gather(scraper, return_exceptions=True)
                await sampler.stop()
        self.run.rss = [
            (round(s.at - self.began, 1), round(s.rss / MIB, 2)) for s in sampler.samples
        ]

    async def _waves(self) -> None:
        opts = self.options
        count = 0
        index = 0
        while count < opts.sandboxes:
            if opts.duration and self._t() > opts.duration:
                self.run.stopped_early = f"--duration {opts.duration:.0f}s reached"
                break
            size = min(opts.wave, opts.sandboxes - count)
            names = [f"soak-{index}-{i}" for i in range(size)]
            wave = Wave(index=index, size=size)
            self.run.waves.append(wave)
            ok = await self._one_wave(wave, names)
            self.run.wave_ends.append(self._t())
            log.info(
                "wave %d: %d Sandboxes, ready %.1fs, suspended %.1fs, resumed %.1fs, "
                "deleted %.1fs, RSS after delete %.1f MiB",
                index,
                size,
                wave.ready_s or -1,
                wave.suspended_s or -1,
                wave.resumed_s or -1,
                wave.deleted_s or -1,
                wave.rss_after_delete_mib or -1,
            )
            if not ok:
                self.run.stopped_early = f"wave {index} did not reach every state"
                break
            count += size
            index += 1

    async def _one_wave(self, wave: Wave, names: list[str]) -> bool:
        assert self.client is not None
        assert self.tracker is not None
        client, tracker, opts = self.client, self.tracker, self.options
        start = time.monotonic()
        within = opts.state_timeout
        interval = 1.0 / opts.rate if opts.rate > 0 else 0.0
        slot = {name: i for i, name in enumerate(names)}

        async def create(name: str) -> None:
            # pace: the i-th create goes out no earlier than i / rate after the start
            delay = start + slot[name] * interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await client.create(SANDBOXES, NAMESPACE, sandbox_manifest(name))

        created = await run_bounded(
            names,
            create,
            concurrency=opts.concurrency,
            ok=lambda e: isinstance(e, ApiError) and e.already_exists,
        )
        wave.failures += len(created.failures)
        wave.created_s = time.monotonic() - start
        if not await tracker.wait_marks(names, "ready", within=within):
            return False
        wave.ready_s = time.monotonic() - start

        for mode, mark, attr in (
            ("Suspended", "suspended", "suspended_s"),
            ("Running", "ready", "resumed_s"),
        ):
            tracker.reset(names, mark)

            async def patch(name: str, mode: str = mode) -> None:
                await client.patch(SANDBOXES, NAMESPACE, name, {"spec": {"operatingMode": mode}})

            outcome = await run_bounded(names, patch, concurrency=opts.concurrency)
            wave.failures += len(outcome.failures)
            if not await tracker.wait_marks(names, mark, within=within):
                return False
            setattr(wave, attr, time.monotonic() - start)

        async def delete(name: str) -> None:
            await client.delete(SANDBOXES, NAMESPACE, name, propagation_policy="Background")

        deleted = await run_bounded(
            names,
            delete,
            concurrency=opts.concurrency,
            ok=lambda e: isinstance(e, ApiError) and e.not_found,
        )
        wave.failures += len(deleted.failures)
        if not await tracker.wait_for(lambda: tracker.present == 0, within=within):
            return False
        wave.deleted_s = time.monotonic() - start
        await self._settle()
        try:
            wave.rss_after_delete_mib = round(read_sample(self._pid).rss / MIB, 2)
        except ProcessLookupError:
            return False
        return wave.failures == 0

    async def _settle(self) -> None:
        """Wait (bounded) until the controller's queues are empty after a phase."""
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            depths = await self._depths()
            if depths is not None and not any(depths.values()):
                return
            await asyncio.sleep(1.0)

    async def _depths(self) -> dict[str, float] | None:
        try:
            scrape = await promtext.scrape(self.env.metrics_url)
        except Exception as err:  # diagnostics only: the next scrape may work
            log.warning("metrics scrape failed: %s", err)
            return None
        self.run.reconciles = scrape.total("controller_runtime_reconcile_total") or 0.0
        self.run.reconcile_errors = scrape.total("controller_runtime_reconcile_errors_total") or 0.0
        return scrape.by_label("workqueue_depth", "name")

    async def _scrape_loop(self) -> None:
        last: tuple[float, float] | None = None  # (t, reconciles so far)
        while True:
            depths = await self._depths()
            if depths is not None:
                now = self._t()
                self.run.depth.append((round(now, 1), sum(depths.values())))
                if last is not None and now > last[0]:
                    rate = (self.run.reconciles - last[1]) / (now - last[0])
                    self.run.reconcile_rate.append((round(now, 1), round(rate, 2)))
                last = (now, self.run.reconciles)
            await asyncio.sleep(SCRAPE_EVERY)

    async def _drain(self) -> None:
        deadline = time.monotonic() + DRAIN_WITHIN
        while time.monotonic() < deadline:
            depths = await self._depths()
            if depths is not None:
                self.run.final_depth = depths
                if not any(depths.values()):
                    self.run.drained = True
                    return
            await asyncio.sleep(1.0)


def plot(run: SoakRun, path: Path) -> None:
    """RSS (left axis), reconciles/s and work-queue depth (right axis) over time, wave ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    if run.rss:
        ax.plot([t for t, _ in run.rss], [m for _, m in run.rss], color="tab:blue", lw=1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("controller RSS (MiB)", color="tab:blue")
    ax.set_ylim(bottom=0)
    for i, end in enumerate(run.wave_ends):
        ax.axvline(end, color="grey", lw=0.5, alpha=0.5 if i else 0.9)
    right = ax.twinx()
    if run.reconcile_rate:
        right.plot(
            [t for t, _ in run.reconcile_rate],
            [r for _, r in run.reconcile_rate],
            color="tab:green",
            lw=0.6,
            label="reconciles/s",
        )
    if run.depth:
        right.plot(
            [t for t, _ in run.depth],
            [d for _, d in run.depth],
            color="tab:orange",
            lw=0.8,
            label="work queue depth",
        )
    right.set_ylabel("reconciles/s, work queue depth (all controllers)")
    right.set_ylim(bottom=0)
    right.legend(loc="center right", fontsize="small")
    slope = run.rss_slope_mib_per_hour()
    total = sum(w.size for w in run.waves)
    ax.set_title(
        f"soak: {total} Sandboxes in {len(run.waves)} waves; RSS slope after warm-up "
        + (f"{slope:+.1f} MiB/h" if slope is not None else "n/a")
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def checks(run: SoakRun, options: SoakOptions) -> dict[str, bool]:
    """The pass/fail checks of the run."""
    growth = run.growth_after_delete_mib()
    expected = options.sandboxes if not options.duration else sum(w.size for w in run.waves)
    return {
        "every wave reached every state": not run.stopped_early.startswith("wave")
        and sum(w.size for w in run.waves if w.deleted_s is not None) == expected,
        "no API call failed after retries": all(w.failures == 0 for w in run.waves),
        "work queues drained": run.drained,
        f"RSS after deletes grew <= {options.max_growth_mib:.0f} MiB": growth is None
        or growth <= options.max_growth_mib,
        # A transient error (an API timeout on an overloaded machine) is retried with backoff
        # and shows in the states above if it was not healed; anything else is a finding.
        "no error in the controller log but transient ones": run.log_errors
        == run.log_error_classes.get("transient", 0),
    }


def markdown(run: SoakRun, options: SoakOptions, results: dict[str, bool]) -> str:
    """A short summary of the run."""
    slope = run.rss_slope_mib_per_hour()
    growth = run.growth_after_delete_mib()
    rss = [m for _, m in run.rss]
    lines = [
        "# Soak run",
        "",
        f"- Sandboxes: {sum(w.size for w in run.waves)} in {len(run.waves)} waves of "
        f"{options.wave} (create rate {options.rate:g}/s), wall time {run.wall_s:.0f} s",
        f"- controller RSS: start {rss[0] if rss else 0:.1f} MiB, peak {max(rss, default=0):.1f}"
        f" MiB, end {rss[-1] if rss else 0:.1f} MiB",
        "- RSS slope after the first wave: "
        + (f"{slope:+.2f} MiB/h" if slope is not None else "n/a"),
        "- RSS after each wave's deletes: "
        + ", ".join(f"{w.rss_after_delete_mib:.1f}" for w in run.waves if w.rss_after_delete_mib)
        + " MiB"
        + (f" (growth {growth:+.1f} MiB)" if growth is not None else ""),
        f"- reconciles: {run.reconciles:.0f}, reconcile errors: {run.reconcile_errors:.0f}",
        f"- work queue depth at the end: {run.final_depth or 'n/a'}",
        f"- controller log errors: {run.log_errors}"
        + (
            " ("
            + ", ".join(f"{kind} {n}" for kind, n in sorted(run.log_error_classes.items()))
            + ")"
            if run.log_error_classes
            else ""
        ),
    ]
    if run.stopped_early:
        lines.append(f"- stopped early: {run.stopped_early}")
    lines += ["", "| wave | size | ready s | suspended s | resumed s | deleted s | RSS after |"]
    lines.append("|---:|---:|---:|---:|---:|---:|---:|")
    for w in run.waves:
        cells = [w.ready_s, w.suspended_s, w.resumed_s, w.deleted_s, w.rss_after_delete_mib]
        lines.append(
            f"| {w.index} | {w.size} | "
            + " | ".join("-" if v is None else f"{v:.1f}" for v in cells)
            + " |"
        )
    lines += ["", "| check | result |", "|---|---|"]
    lines += [f"| {name} | {'PASS' if ok else 'FAIL'} |" for name, ok in results.items()]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> SoakOptions:
    """The command line as :class:`SoakOptions`."""
    parser = argparse.ArgumentParser(prog="bench/soak.py", description=__doc__.split("\n")[0])
    parser.add_argument("--sandboxes", type=int, default=10_000, help="total (10000)")
    parser.add_argument("--wave", type=int, default=500, help="Sandboxes alive at once (500)")
    parser.add_argument("--rate", type=float, default=50.0, help="creates per second (50)")
    parser.add_argument("--concurrency", type=int, default=50, help="parallel API calls (50)")
    parser.add_argument("--nodes", type=int, default=4, help="kwok nodes, 1000 pods each (4)")
    parser.add_argument(
        "--duration", type=float, default=0.0, help="start no wave after this many seconds"
    )
    parser.add_argument(
        "--state-timeout", type=float, default=600.0, help="seconds per wave state (600)"
    )
    parser.add_argument(
        "--max-growth-mib",
        type=float,
        default=25.0,
        help="allowed RSS growth between the first and last wave's after-delete RSS (25)",
    )
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "reports", help="report root")
    parser.add_argument(
        "--quick", action="store_true", help="CI size: 200 Sandboxes in waves of 100"
    )
    args = parser.parse_args(argv)
    options = SoakOptions(
        sandboxes=args.sandboxes,
        wave=args.wave,
        rate=args.rate,
        concurrency=args.concurrency,
        nodes=args.nodes,
        duration=args.duration,
        state_timeout=args.state_timeout,
        max_growth_mib=args.max_growth_mib,
        out=args.out,
    )
    if args.quick:
        options.sandboxes, options.wave, options.nodes = 200, 100, 1
    if options.sandboxes < 1 or options.wave < 1 or options.rate < 0:
        parser.error("--sandboxes and --wave must be positive, --rate not negative")
    return options


def main(argv: list[str] | None = None) -> int:
    """Run the soak; 0 when every check passes, 1 when one fails, 2 when it could not run."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    options = parse_args(argv)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = options.out / f"soak-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    run = SoakRun(options={k: str(v) for k, v in asdict(options).items()})
    began = time.monotonic()
    try:
        with BenchCluster(nodes=options.nodes) as env:
            process = env.start_controller(workers=100)
            asyncio.run(Soak(env, options, run, pid=process.pid).drive())
            run.log_errors, run.log_error_examples = controller_log_errors(process)
            run.log_error_classes = controller_log_error_classes(process)
            if not process.alive():
                run.stopped_early = run.stopped_early or "the controller exited"
    except KeyboardInterrupt:
        run.stopped_early = "interrupted"
    except Exception:
        log.exception("the soak run failed")
        run.stopped_early = run.stopped_early or "failed (see log)"
    run.wall_s = time.monotonic() - began
    results = checks(run, options)
    summary = {
        **asdict(run),
        "rss_slope_mib_per_hour": run.rss_slope_mib_per_hour(),
        "rss_growth_after_delete_mib": run.growth_after_delete_mib(),
        "checks": results,
    }
    (out / "soak.json").write_text(json.dumps(summary, indent=1))
    (out / "soak.md").write_text(markdown(run, options, results))
    plot(run, out / "rss.png")
    log.info("report in %s\n%s", out, (out / "soak.md").read_text())
    if run.stopped_early and run.stopped_early != f"--duration {options.duration:.0f}s reached":
        return 2
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
