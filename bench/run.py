"""Run the project's benchmarks and write a report: ``python bench/run.py [names] [options]``.

Benchmarks print their numbers and targets (PASS/MISS) and write JSON + Markdown into
``bench/reports/<timestamp>/`` and ``bench/reports/latest.md``. The exit status is non-zero only
when a benchmark could not run; missing a target is reported, never fatal. ``nox -s bench``
calls this script after making sure the local cluster's binaries are built.
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

from benchlib.report import BenchResult, Interrupted, render_text, write_report  # noqa: E402

log = logging.getLogger("bench")

NAMES = ("cache-memory", "latency", "scale", "claims")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/run.py",
        description="Run benchmarks (default: all) and write bench/reports/<timestamp>/.",
    )
    parser.add_argument(
        "benchmarks", nargs="*", metavar="NAME", help=f"benchmarks to run: {', '.join(NAMES)}"
    )
    parser.add_argument(
        "--sandboxes", type=int, default=10_000, help="scale: Sandboxes to create (10000)"
    )
    parser.add_argument(
        "--nodes", type=int, default=20, help="scale: kwok nodes, 1000 pods each (20)"
    )
    parser.add_argument(
        "--create-concurrency", type=int, default=50, help="scale: parallel creates (50)"
    )
    parser.add_argument(
        "--suspend-sample", type=int, default=200, help="scale: Sandboxes suspended/resumed (200)"
    )
    parser.add_argument(
        "--ready-timeout", type=float, default=1800.0, help="scale: seconds to wait for Ready"
    )
    parser.add_argument(
        "--workers", type=int, default=100, help="--sandbox-concurrent-workers (100)"
    )
    parser.add_argument(
        "--controller-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra controller flag, repeatable (e.g. --controller-arg=--kube-api-qps=500)",
    )
    parser.add_argument(
        "--latency-samples", type=int, default=50, help="latency: sandboxes created one by one"
    )
    parser.add_argument(
        "--latency-suspend-samples", type=int, default=20, help="latency: suspend/resume cycles"
    )
    parser.add_argument("--claims", type=int, default=1200, help="claims: claims to send (1200)")
    parser.add_argument(
        "--claim-rate", type=float, default=100.0, help="claims: claims per second (100)"
    )
    parser.add_argument("--pool", type=int, default=1300, help="claims: warm pool size (1300)")
    parser.add_argument(
        "--claim-workers", type=int, default=50, help="--sandbox-claim-concurrent-workers (50)"
    )
    parser.add_argument(
        "--cache-objects", type=int, default=10_000, help="cache-memory: objects per kind"
    )
    parser.add_argument(
        "--reports-dir", type=Path, default=BENCH_DIR / "reports", help="where reports go"
    )
    parser.add_argument(
        "--keep-workdir",
        action="store_true",
        help="keep the cluster's work directory (logs, kubeconfigs) for inspection",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def _runners(args: argparse.Namespace) -> dict[str, Callable[[], BenchResult]]:
    def cache_memory() -> BenchResult:
        from benchlib import cache_memory

        return cache_memory.run(count=args.cache_objects)

    def latency() -> BenchResult:
        from benchlib import latency

        return latency.run(
            samples=args.latency_samples,
            suspend_samples=args.latency_suspend_samples,
            workers=args.workers,
            controller_args=args.controller_arg,
            keep_workdir=args.keep_workdir,
        )

    def scale() -> BenchResult:
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

    def claims() -> BenchResult:
        from benchlib import claims

        room = args.pool + args.claims
        return claims.run(
            claims=args.claims,
            rate=args.claim_rate,
            pool=args.pool,
            nodes=max(1, -(-room // 1000)),
            workers=args.workers,
            claim_workers=args.claim_workers,
            controller_args=args.controller_arg,
            keep_workdir=args.keep_workdir,
        )

    return {"cache-memory": cache_memory, "latency": latency, "scale": scale, "claims": claims}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen benchmarks; 0 when all of them ran, 1 when one could not, 2 for usage.

    Args:
        argv: Arguments without the program name (``sys.argv[1:]`` when None).

    Returns:
        The exit status.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    unknown = [n for n in args.benchmarks if n not in NAMES]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    for option in (
        "sandboxes",
        "nodes",
        "create_concurrency",
        "cache_objects",
        "workers",
        "claims",
        "pool",
        "claim_workers",
    ):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be at least 1")
    if not args.claim_rate > 0:
        parser.error("--claim-rate must be positive")
    if args.suspend_sample < 0 or args.latency_samples < 1 or args.latency_suspend_samples < 0:
        parser.error("sample sizes must be positive (suspend samples may be 0)")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
        datefmt="%H:%M:%S",
    )
    selected = args.benchmarks or list(NAMES)
    runners = _runners(args)
    started = dt.datetime.now(dt.UTC)
    results: list[BenchResult] = []
    failed = False
    try:
        for name in selected:
            log.info("running %s", name)
            began = time.monotonic()
            try:
                result = runners[name]()
            except Interrupted as stop:
                stop.result.seconds = time.monotonic() - began
                results.append(stop.result)
                sys.stdout.write(render_text(stop.result) + "\n\n")
                raise
            except KeyboardInterrupt:
                raise
            except Exception as err:
                log.error("%s could not run:\n%s", name, traceback.format_exc())
                result = BenchResult(name, error=f"{type(err).__name__}: {err}")
            result.seconds = time.monotonic() - began
            failed = failed or result.error is not None
            results.append(result)
            sys.stdout.write(render_text(result) + "\n\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        log.warning("interrupted; writing the report of what finished")
        failed = True
    if results:
        target = write_report(results, reports_dir=args.reports_dir, started=started)
        latest = args.reports_dir / "latest.md"
        sys.stdout.write(f"report: {target / 'report.md'} (also {latest})\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
