"""Run the project's benchmarks: ``python bench/run.py [scenarios] [options]``.

The comparison scenarios (warm-claims, cold, refill, memory, api) each start a fresh local
cluster, run against this project's controller or, with ``--controller-cmd``, any other
controller binary, and write ``bench/results/<scenario>-<timestamp>.{json,md}`` plus PNG plots;
``--compare`` runs both back to back and reports each figure side by side with the ratio.
Targets are reported as PASS/MISS and never fail a run. The exit status is 1 when a scenario
could not run or found a correctness failure (a claim lost or bound twice, a pool creating
more Sandboxes than asked), 2 for usage errors. ``nox -s bench`` calls this script after making
sure the local cluster's binaries are built; ``nox -s bench -- --quick`` is the smoke run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from benchlib.harness import OTHER, OURS, ControllerSpec  # noqa: E402
from benchlib.report import BenchResult, Interrupted, render_text  # noqa: E402
from benchlib.results import write_scenario  # noqa: E402

log = logging.getLogger("bench")

COMPARABLE = ("warm-claims", "cold", "refill", "memory", "api")
"""Scenarios that run against any controller (``--controller-cmd``, ``--compare``)."""
GATEWAY = "gateway"
"""The E2B gateway's create/connect/kill path on a warm pool (ours: it needs our gateway)."""
CLI = "cli"
"""How fast ``agent-sandbox list`` and the SDK import start, beside ``kubectl get``."""
MCP = "mcp"
"""What an MCP tool call adds to the SDK or gateway call it wraps (stdio and HTTP)."""
SNAPSHOTS = "snapshots"
"""Filesystem snapshot and start-from-snapshot times on the real node (root; named only)."""
PAUSE = "pause-resume"
"""Pause, resume and create-from-snapshot through the controller on the real node (root)."""
OURS_ONLY = (GATEWAY, CLI, MCP, SNAPSHOTS, PAUSE, "cache-memory", "latency", "scale")
"""Scenarios of this project alone (the gateway, the CLI, snapshots, the older benchmarks)."""
NAMES = COMPARABLE + OURS_ONLY
DEFAULT = (*COMPARABLE, GATEWAY, CLI, MCP)
"""What runs when no scenario is named (the comparison ones with ``--controller-cmd``)."""
ALIASES = {"claims": "warm-claims"}
QUICK = {
    "pool": 30,
    "claims": 20,
    "claim_rate": 10.0,
    "cold_sandboxes": 30,
    "cold_rate": 10.0,
    "refill_replicas": 30,
    "memory_steps": "50,200",
    "memory_settle": 3.0,
    "api_pool": 15,
    "api_claims": 10,
    "api_sandboxes": 10,
    "api_rate": 5.0,
    "ready_timeout": 300.0,
    "cache_objects": 500,
    "gateway_serial": 8,
    "gateway_burst": 8,
    "gateway_concurrency": 4,
    "cli_sandboxes": 3,
    "cli_runs": 5,
    "mcp_calls": 10,
    "snapshot_sizes": "10",
    "pause_sizes": "10",
    "pause_memory_mib": 50,
    "pause_repeats": 1,
}
"""``--quick`` sizes: every scenario on a handful of objects, minutes in all."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/run.py",
        description=f"Run benchmark scenarios (default: {', '.join(DEFAULT)}; only the "
        "comparison ones with --controller-cmd) and write bench/results/.",
    )
    add = parser.add_argument
    add("benchmarks", nargs="*", metavar="NAME", help=f"scenarios: {', '.join(NAMES)}")
    add(
        "--quick",
        action="store_true",
        help="tiny sizes for every scenario, replacing the size flags (smoke run: the harness "
        "works, no claim lost)",
    )
    add(
        "--controller-cmd",
        metavar="COMMAND",
        help="run against the controller this command line starts (KUBECONFIG set; "
        "{kubeconfig}, {metrics_port}, {health_port} are substituted)",
    )
    add(
        "--compare",
        action="store_true",
        help="run ours and --controller-cmd back to back and report them side by side",
    )
    # warm claims
    add("--pool", type=int, default=1300, help="warm-claims: warm pool size (1300)")
    add("--claims", type=int, default=1200, help="warm-claims: claims to send (1200)")
    add("--claim-rate", type=float, default=100.0, help="warm-claims: claims per second (100)")
    add(
        "--claim-workers",
        type=int,
        default=50,
        help="ours: --sandbox-claim-concurrent-workers (50)",
    )
    # cold
    add("--cold-sandboxes", type=int, default=1000, help="cold: Sandboxes to create (1000)")
    add("--cold-rate", type=float, default=50.0, help="cold: creates per second (50)")
    # refill
    add("--refill-replicas", type=int, default=1000, help="refill: pool scaled 0 -> N (1000)")
    # memory
    add(
        "--memory-steps",
        default="1000,10000",
        help="memory: Sandbox totals at which RSS is read (1000,10000)",
    )
    add(
        "--memory-settle",
        type=float,
        default=15.0,
        help="memory: seconds to settle before each reading (15)",
    )
    # api
    add("--api-pool", type=int, default=120, help="api: warm pool size (120)")
    add("--api-claims", type=int, default=100, help="api: warm claims (100)")
    add("--api-sandboxes", type=int, default=100, help="api: cold Sandboxes (100)")
    add("--api-rate", type=float, default=10.0, help="api: claims, then Sandboxes, per second")
    # gateway
    add(
        "--gateway-serial",
        type=int,
        default=50,
        help="gateway: sandboxes created, connected to, killed one at a time (50)",
    )
    add("--gateway-burst", type=int, default=60, help="gateway: creates in the burst (60)")
    add(
        "--gateway-concurrency",
        type=int,
        default=10,
        help="gateway: creates in flight during the burst (10)",
    )
    # cli
    add("--cli-sandboxes", type=int, default=10, help="cli: Ready Sandboxes listed (10)")
    add("--cli-runs", type=int, default=20, help="cli: timed runs of each command (20)")
    add("--mcp-calls", type=int, default=200, help="mcp: timed calls per direct/MCP pair (200)")
    add(
        "--snapshot-sizes",
        default="10,500",
        help="snapshots: filesystem changes to snapshot, MiB (10,500)",
    )
    add(
        "--pause-sizes",
        default="10",
        help="pause-resume: filesystem changes kept on suspend, MiB (10; 10,500 adds 500)",
    )
    add(
        "--pause-memory-mib",
        type=int,
        default=200,
        help="pause-resume: memory a process holds, MiB, where the node can checkpoint "
        "(200; 0: none)",
    )
    add("--pause-repeats", type=int, default=3, help="pause-resume: rounds of each case (3)")
    # older benchmarks
    add("--sandboxes", type=int, default=10_000, help="scale: Sandboxes to create (10000)")
    add("--nodes", type=int, default=20, help="scale: kwok nodes, 1000 pods each (20)")
    add("--create-concurrency", type=int, default=50, help="scale: parallel creates (50)")
    add("--suspend-sample", type=int, default=200, help="scale: Sandboxes suspended/resumed")
    add("--latency-samples", type=int, default=50, help="latency: sandboxes created one by one")
    add("--latency-suspend-samples", type=int, default=20, help="latency: suspend/resume cycles")
    add("--cache-objects", type=int, default=10_000, help="cache-memory: objects per kind")
    # common
    add("--ready-timeout", type=float, default=1800.0, help="seconds for each wait (1800)")
    add("--workers", type=int, default=100, help="ours: --sandbox-concurrent-workers (100)")
    add(
        "--controller-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra flag for ours, repeatable (e.g. --controller-arg=--kube-api-qps=500)",
    )
    add("--results-dir", type=Path, default=BENCH_DIR / "results", help="where results go")
    add(
        "--keep-workdir",
        action="store_true",
        help="keep the cluster's work directory (logs, kubeconfigs) for inspection",
    )
    add("-v", "--verbose", action="store_true", help="debug logging")
    return parser  # fmt: skip


def _memory_steps(text: str) -> tuple[int, ...]:
    steps = tuple(int(part) for part in text.split(",") if part.strip())
    if not steps or any(s < 1 for s in steps) or list(steps) != sorted(set(steps)):
        raise ValueError(f"--memory-steps {text!r}: positive totals, ascending, e.g. 1000,10000")
    return steps


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    names = [ALIASES.get(n, n) for n in args.benchmarks]
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
        args.sandboxes, args.nodes, args.suspend_sample = 100, 1, 10
        args.latency_samples, args.latency_suspend_samples = 5, 2
    positive = [
        "pool",
        "claims",
        "claim_workers",
        "cold_sandboxes",
        "refill_replicas",
        "api_pool",
        "api_claims",
        "api_sandboxes",
        "sandboxes",
        "nodes",
        "create_concurrency",
        "cache_objects",
        "workers",
        "gateway_serial",
        "gateway_burst",
        "gateway_concurrency",
        "cli_sandboxes",
        "cli_runs",
        "mcp_calls",
        "pause_repeats",
    ]
    for option in positive:
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be at least 1")
    for option in ("claim_rate", "cold_rate", "api_rate", "ready_timeout", "memory_settle"):
        if not getattr(args, option) > 0:
            parser.error(f"--{option.replace('_', '-')} must be positive")
    if args.pause_memory_mib < 0:
        parser.error("--pause-memory-mib must be at least 0")
    if args.suspend_sample < 0 or args.latency_samples < 1 or args.latency_suspend_samples < 0:
        parser.error("sample sizes must be positive (suspend samples may be 0)")
    try:
        args.memory_steps = _memory_steps(str(args.memory_steps))
        from benchlib.snapshots import parse_sizes

        parse_sizes(str(args.snapshot_sizes))
        parse_sizes(str(args.pause_sizes), flag="--pause-sizes")
    except ValueError as err:
        parser.error(str(err))
    if args.compare and not args.controller_cmd:
        parser.error("--compare needs --controller-cmd (the other controller)")
    if args.controller_cmd is not None and not args.controller_cmd.strip():
        parser.error("--controller-cmd is empty")
    selected = names or list(COMPARABLE if args.controller_cmd else DEFAULT)
    if args.controller_cmd and any(n in OURS_ONLY for n in selected):
        parser.error(f"{', '.join(OURS_ONLY)} run only against this project's controller")
    return selected


def _specs(args: argparse.Namespace) -> list[ControllerSpec]:
    ours = ControllerSpec(
        OURS,
        workers=args.workers,
        extra_args=(
            f"--sandbox-claim-concurrent-workers={args.claim_workers}",
            *args.controller_arg,
        ),
    )
    if not args.controller_cmd:
        return [ours]
    other = ControllerSpec(OTHER, command=args.controller_cmd)
    return [ours, other] if args.compare else [other]


def _runner(name: str, args: argparse.Namespace) -> Callable[[ControllerSpec], BenchResult]:
    keep, within = args.keep_workdir, args.ready_timeout

    def run(spec: ControllerSpec) -> BenchResult:
        if name == "warm-claims":
            from benchlib import claims

            sizes = claims.ClaimSizes(args.pool, args.claims, args.claim_rate, within)
            return claims.run(sizes, spec=spec, keep_workdir=keep)
        if name == "cold":
            from benchlib import cold

            sizes_c = cold.ColdSizes(args.cold_sandboxes, args.cold_rate, within)
            return cold.run(sizes_c, spec=spec, keep_workdir=keep)
        if name == "refill":
            from benchlib import refill

            return refill.run(refill.RefillSizes(args.refill_replicas, within), spec=spec,
                              keep_workdir=keep)  # fmt: skip
        if name == "memory":
            from benchlib import memory

            sizes_m = memory.MemorySizes(args.memory_steps, args.memory_settle, within)
            return memory.run(sizes_m, spec=spec, keep_workdir=keep)
        if name == "api":
            from benchlib import apieff

            sizes_a = apieff.ApiSizes(
                args.api_pool, args.api_claims, args.api_sandboxes, args.api_rate, within
            )
            return apieff.run(sizes_a, spec=spec, keep_workdir=keep)
        if name == GATEWAY:
            from benchlib import gateway

            sizes_g = gateway.GatewaySizes(
                args.gateway_serial, args.gateway_burst, args.gateway_concurrency, within
            )
            return gateway.run(sizes_g, spec=spec, keep_workdir=keep)
        if name == MCP:
            from benchlib import mcp_overhead

            sizes_mcp = mcp_overhead.McpSizes(args.mcp_calls, within)
            return mcp_overhead.run(sizes_mcp, spec=spec, keep_workdir=keep)
        if name == SNAPSHOTS:
            from benchlib import snapshots

            sizes_s = snapshots.SnapshotSizes(snapshots.parse_sizes(args.snapshot_sizes), within)
            return snapshots.run(sizes_s, keep_workdir=keep)
        if name == PAUSE:
            from benchlib import pause_resume, snapshots

            sizes_p = pause_resume.PauseSizes(
                snapshots.parse_sizes(args.pause_sizes, flag="--pause-sizes"),
                args.pause_memory_mib,
                args.pause_repeats,
                within,
            )
            return pause_resume.run(sizes_p, keep_workdir=keep)
        if name == CLI:
            from benchlib import cli

            sizes_cli = cli.CliSizes(args.cli_sandboxes, args.cli_runs, within)
            return cli.run(sizes_cli, spec=spec, keep_workdir=keep)
        return _ours_only(name, args)

    return run


def _ours_only(name: str, args: argparse.Namespace) -> BenchResult:
    if name == "cache-memory":
        from benchlib import cache_memory

        return cache_memory.run(count=args.cache_objects)
    if name == "latency":
        from benchlib import latency

        return latency.run(
            samples=args.latency_samples,
            suspend_samples=args.latency_suspend_samples,
            workers=args.workers,
            controller_args=args.controller_arg,
            keep_workdir=args.keep_workdir,
        )
    from benchlib import scale

    return scale.run(
        sandboxes=args.sandboxes,
        nodes=args.nodes,
        concurrency=args.create_concurrency,
        suspend_sample=args.suspend_sample,
        ready_timeout=args.ready_timeout,
        workers=args.workers,
        controller_args=args.controller_arg,
        keep_workdir=args.keep_workdir,
    )


def _run_one(
    name: str, run: Callable[[ControllerSpec], BenchResult], spec: ControllerSpec
) -> BenchResult:
    log.info("running %s against %s", name, spec.label)
    began = time.monotonic()
    try:
        result = run(spec)
    except Interrupted as stop:
        stop.result.seconds = time.monotonic() - began
        sys.stdout.write(render_text(stop.result) + "\n\n")
        raise
    except KeyboardInterrupt:
        raise
    except Exception as err:
        log.error("%s could not run:\n%s", name, traceback.format_exc())
        result = BenchResult(name, params={"controller": spec.label},
                             error=f"{type(err).__name__}: {err}")  # fmt: skip
    result.seconds = time.monotonic() - began
    sys.stdout.write(render_text(result) + "\n\n")
    sys.stdout.flush()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen scenarios; 0 when all ran cleanly, 1 on an error or failure, 2 for usage.

    Args:
        argv: Arguments without the program name (``sys.argv[1:]`` when None).

    Returns:
        The exit status.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    selected = _validate(parser, args)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
        datefmt="%H:%M:%S",
    )
    started = dt.datetime.now(dt.UTC)
    flags = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()}
    flags["results_dir"] = str(args.results_dir)
    specs = _specs(args)
    failed = False
    summaries: list[Path] = []
    try:
        for name in selected:
            run = _runner(name, args)
            runs = [
                _run_one(name, run, spec) for spec in (specs if name in COMPARABLE else specs[:1])
            ]
            failed = failed or any(r.error or r.failures for r in runs)
            summaries.append(
                write_scenario(
                    name, runs, results_dir=args.results_dir, started=started, flags=flags
                )
            )
    except KeyboardInterrupt:
        log.warning("interrupted; the summaries of finished scenarios are written")
        failed = True
    if summaries:
        latest = args.results_dir / "latest.md"
        latest.write_text("\n".join(p.read_text() for p in summaries))
        for path in summaries:
            sys.stdout.write(f"summary: {path}\n")
        sys.stdout.write(f"all of this run: {latest}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
