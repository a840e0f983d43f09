"""``cli``: how fast the ``agent-sandbox`` CLI and the SDK start, beside kubectl.

People run the CLI many times a minute, so its start is what they feel. On a fresh local
cluster with a few Ready Sandboxes in the benchmark namespace, each command runs as a whole
process, one after the other, round after round (after one warm-up round that is not counted):

- ``agent-sandbox list -n bench`` (the CLI: start, kubeconfig, one list request, a table);
- ``kubectl get sandboxes -n bench`` (the same question asked by kubectl, from the local
  cluster's binaries);
- ``python -c "import kube_agent_sandbox.sdk"`` (the bare SDK import);
- ``python -c pass`` (the interpreter's own start: the floor under both Python figures).

The Python commands run as an installed tool does, with bytecode caches: the warm-up round
writes them into a private ``PYTHONPYCACHEPREFIX`` of the run (nothing is written into the
environment or the sources), even where ``PYTHONDONTWRITEBYTECODE`` is set, as it is on the
project's CI and development machines, where every start would otherwise compile each module
again.

Rows: min, median and max wall seconds of each; the ratio of the medians of ``agent-sandbox
list`` and ``kubectl get``; targets on the medians (``agent-sandbox list`` <= 0.3 s, the SDK
import <= 0.15 s). The load average is recorded beside them: on a shared machine it moves every
figure. Both list commands must print every Sandbox, or the run has a failure.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchlib.clusterenv import NAMESPACE
from benchlib.harness import Context, ControllerSpec, run_scenario
from benchlib.report import BenchResult, at_most
from benchlib.shapes import sandbox_manifest
from benchlib.stats import ratio
from benchlib.tracker import SandboxTracker
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.testing.access import find_kubectl

CLI = "agent-sandbox list"
KUBECTL = "kubectl get sandboxes"
SDK_IMPORT = "import kube_agent_sandbox.sdk"
PYTHON = "python -c pass"
TARGETS = {CLI: 0.3, SDK_IMPORT: 0.15}
"""Median wall seconds each command should stay under (issue 19); the others have none."""


@dataclass(frozen=True)
class CliSizes:
    """The scenario's sizes.

    Attributes:
        sandboxes: Ready Sandboxes in the namespace the list commands read.
        runs: Timed runs of each command (after one warm-up run).
        within: Seconds to wait for the Sandboxes to be Ready.
    """

    sandboxes: int = 10
    runs: int = 20
    within: float = 300.0


@dataclass(frozen=True)
class Command:
    """One command line the scenario times.

    Attributes:
        label: The row label.
        argv: The command line.
        lists: Whether its output must name every Sandbox.
    """

    label: str
    argv: tuple[str, ...]
    lists: bool = False


@dataclass(frozen=True)
class Spread:
    """Min, median and max of a command's wall seconds."""

    min: float
    median: float
    max: float


def spread(seconds: Sequence[float]) -> Spread:
    """The min, median and max of ``seconds``.

    Raises:
        ValueError: If there is no sample.
    """
    if not seconds:
        raise ValueError("no samples")
    return Spread(min(seconds), statistics.median(seconds), max(seconds))


def commands(*, cli: str, kubectl: str, python: str, namespace: str) -> list[Command]:
    """The four command lines, in the order each round runs them."""
    return [
        Command(CLI, (cli, "list", "-n", namespace), lists=True),
        Command(KUBECTL, (kubectl, "get", "sandboxes", "-n", namespace), lists=True),
        Command(SDK_IMPORT, (python, "-c", "import kube_agent_sandbox.sdk")),
        Command(PYTHON, (python, "-c", "pass")),
    ]


def missing_names(output: str, names: Sequence[str]) -> list[str]:
    """The Sandbox names a list command's output does not show (first column of its rows)."""
    shown = {line.split()[0] for line in output.splitlines() if line.strip()}
    return [name for name in names if name not in shown]


def add_rows(result: BenchResult, timings: Mapping[str, Sequence[float]]) -> None:
    """Min/median/max rows of every command, targets on the medians, and the list ratio."""
    medians: dict[str, float] = {}
    for label, seconds in timings.items():
        if not seconds:
            continue
        stats = spread(seconds)
        medians[label] = stats.median
        limit = TARGETS.get(label)
        result.add(f"{label} min", stats.min, "s")
        result.add(
            f"{label} median",
            stats.median,
            "s",
            target=None if limit is None else f"<= {limit:g} s",
            check=None if limit is None else at_most(limit),
        )
        result.add(f"{label} max", stats.max, "s")
    result.add(
        f"{CLI} / {KUBECTL} (median)",
        ratio(medians.get(KUBECTL), medians.get(CLI)),
        "x",
        note="how many times kubectl's time the CLI takes",
    )


def command_env(base: Mapping[str, str], *, kubeconfig: Path, pycache: Path) -> dict[str, str]:
    """The timed commands' environment: the cluster's kubeconfig and a private bytecode cache."""
    env = {k: v for k, v in base.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["KUBECONFIG"] = str(kubeconfig)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def time_rounds(
    cmds: Sequence[Command],
    *,
    runs: int,
    env: Mapping[str, str],
    check: Callable[[Command, str], None],
) -> dict[str, list[float]]:
    """Run every command once per round, ``runs`` rounds after a warm-up one; wall seconds.

    Interleaving the commands spreads the machine's load changes evenly over them.

    Raises:
        RuntimeError: A command exited with an error.
    """
    timings: dict[str, list[float]] = {c.label: [] for c in cmds}
    for round_ in range(runs + 1):
        for cmd in cmds:
            began = time.perf_counter()
            done = subprocess.run(
                cmd.argv, env=dict(env), capture_output=True, text=True, check=False, timeout=120
            )
            elapsed = time.perf_counter() - began
            if done.returncode != 0:
                raise RuntimeError(
                    f"{cmd.label} exited {done.returncode}: {done.stderr.strip()[-500:]}"
                )
            check(cmd, done.stdout)
            if round_:
                timings[cmd.label].append(elapsed)
    return timings


def cli_executable() -> str:
    """``agent-sandbox`` of this environment (beside its Python), else the first on PATH."""
    beside = shutil.which("agent-sandbox", path=str(Path(sys.executable).parent))
    found = beside or shutil.which("agent-sandbox")
    if found is None:
        raise FileNotFoundError("agent-sandbox not found: run `uv sync --all-packages`")
    return found


def run(sizes: CliSizes, *, spec: ControllerSpec, keep_workdir: bool = False) -> BenchResult:
    """Run the CLI start-up scenario.

    Args:
        sizes: Sandboxes, timed runs and timeout.
        spec: The controller that makes the Sandboxes Ready (ours).
        keep_workdir: Keep the cluster's work directory.

    Returns:
        The result.
    """

    async def body(ctx: Context) -> None:
        names = [f"cli-{i:03d}" for i in range(sizes.sandboxes)]
        async with ctx.client() as client:
            tracker = SandboxTracker(client, NAMESPACE)
            await tracker.start()
            try:
                for name in names:
                    await client.create(SANDBOXES, NAMESPACE, sandbox_manifest(name))
                if not await tracker.wait_marks(names, "ready", within=sizes.within):
                    ctx.result.notes.append(
                        f"not every Sandbox Ready within {sizes.within:.0f} s: the lists show "
                        "them all the same"
                    )
            finally:
                await tracker.stop()
        measure(ctx, names, sizes.runs)

    return run_scenario(
        "cli",
        params={"sandboxes": sizes.sandboxes, "runs": sizes.runs},
        spec=spec,
        nodes=1,
        body=body,
        keep_workdir=keep_workdir,
    )


def measure(ctx: Context, names: Sequence[str], runs: int) -> None:
    """Time the commands against the cluster and add the rows."""
    access = ctx.env.access
    assert access is not None
    kubectl = find_kubectl(access.bin_dir)
    if kubectl is None:
        raise FileNotFoundError("kubectl not found: run `nox -s testenv`")
    cmds = commands(
        cli=cli_executable(), kubectl=str(kubectl), python=sys.executable, namespace=NAMESPACE
    )
    env = command_env(os.environ, kubeconfig=access.kubeconfig, pycache=ctx.env.workdir / "pycache")

    def check(cmd: Command, output: str) -> None:
        if cmd.lists and (missing := missing_names(output, names)):
            ctx.result.failures.append(f"{cmd.label} did not show {', '.join(missing)}")

    load_before = os.getloadavg()
    timings = time_rounds(cmds, runs=runs, env=env, check=check)
    add_rows(ctx.result, timings)
    load_after = os.getloadavg()
    ctx.result.add("load average (1 min) before", load_before[0])
    ctx.result.add("load average (1 min) after", load_after[0])
    ctx.series["cli_seconds"] = timings
    ctx.result.notes.append(
        f"{os.cpu_count()} CPUs; each command timed {runs} times as a whole process after one "
        "warm-up run, interleaved; Python with bytecode caches (written by the warm-up run)"
    )
