"""``agent-sandbox top``: a live table of a namespace's sandboxes and warm pools.

Each frame lists the Sandboxes (ready state, mode, age, CPU and memory of their pod) and the
SandboxWarmPools (ready of desired members). Resource use comes from metrics-server
(``metrics.k8s.io``); without it, or without the right to read it, the columns say ``n/a``.
The frame is redrawn in place every ``--interval`` seconds; ``--once`` prints one and exits.
rich's live display is imported only when the command runs, so the CLI's start stays fast.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kube_agent_sandbox.sdk import readiness
from kube_agent_sandbox.sdk.cli import output
from kube_agent_sandbox.sdk.cli.output import age
from kube_agent_sandbox.sdk.constants import SANDBOX_WARM_POOLS, SANDBOXES, Resource
from kube_agent_sandbox.sdk.errors import ApiRequestError

if TYPE_CHECKING:
    from rich.console import Group

    from kube_agent_sandbox.sdk import SandboxClient
    from kube_agent_sandbox.sdk.cli.app import State

Obj = dict[str, Any]
POD_METRICS = Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics")
NOT_AVAILABLE = "n/a"
SANDBOX_COLUMNS = (*output.SANDBOX_COLUMNS, "CPU", "MEMORY")
POOL_COLUMNS = ("POOL", "READY", "DESIRED", "AGE")
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9}


@dataclass(frozen=True)
class Usage:
    """A pod's CPU (millicores) and memory (bytes), summed over its containers."""

    millicores: float
    memory_bytes: float


@dataclass(frozen=True)
class Frame:
    """What one refresh read: ``usage`` is None when metrics-server cannot be read."""

    sandboxes: list[Obj]
    pools: list[Obj]
    usage: dict[str, Usage] | None


def cpu_millicores(quantity: str) -> float:
    """A CPU quantity (``250m``, ``1``, ``12345n``, ``3u``) in millicores."""
    for suffix, factor in (("n", 1e-6), ("u", 1e-3), ("m", 1.0)):
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) * 1000


def memory_bytes(quantity: str) -> float:
    """A memory quantity (``128Mi``, ``1G``, ``4096``) in bytes."""
    for suffix, factor in _UNITS.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity)


def pod_usage(item: Obj) -> Usage:
    """The summed usage of one PodMetrics object; unreadable quantities count as 0."""
    cpu = memory = 0.0
    for container in item.get("containers") or ():
        used = container.get("usage") or {}
        try:
            cpu += cpu_millicores(str(used.get("cpu") or "0"))
            memory += memory_bytes(str(used.get("memory") or "0"))
        except ValueError:
            continue
    return Usage(cpu, memory)


def read_frame(client: SandboxClient, namespace: str | None) -> Frame:
    """Read the namespace's Sandboxes, pools and (when available) pod metrics."""
    ns = client._ns(namespace)
    sandboxes = client._list(SANDBOXES, namespace=ns, label_selector=None)
    pools = client._list(SANDBOX_WARM_POOLS, namespace=ns, label_selector=None)
    usage: dict[str, Usage] | None
    try:
        items = client._list(POD_METRICS, namespace=ns, label_selector=None)
        usage = {str((i.get("metadata") or {}).get("name")): pod_usage(i) for i in items}
    except ApiRequestError:
        usage = None  # no metrics-server, or no right to read it
    return Frame(sandboxes, pools, usage)


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def sandbox_row(obj: Obj, usage: dict[str, Usage] | None, now: datetime.datetime) -> list[str]:
    """One Sandbox's cells in :data:`SANDBOX_COLUMNS` order (``list``'s columns, then use)."""
    used = None if usage is None else usage.get(readiness.pod_name(obj))
    if usage is None:
        cpu = mem = NOT_AVAILABLE
    elif used is None:
        cpu = mem = "-"  # no running pod (suspended, pending or gone)
    else:
        cpu, mem = f"{used.millicores:.0f}m", f"{used.memory_bytes / 2**20:.0f}Mi"
    return [*output.sandbox_row(obj, now=now), cpu, mem]


def pool_row(obj: Obj, now: datetime.datetime) -> list[str]:
    """One pool's cells in :data:`POOL_COLUMNS` order."""
    ready = (obj.get("status") or {}).get("readyReplicas") or 0
    desired = (obj.get("spec") or {}).get("replicas") or 0
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    return [_name(obj), str(ready), str(desired), age(created, now=now)]


def _table(columns: Sequence[str], rows: list[list[str]]) -> Any:
    from rich.table import Table

    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def render(frame: Frame, *, now: datetime.datetime) -> Group:
    """The frame as two tables (sandboxes, then pools) with a one-line summary."""
    from rich.console import Group
    from rich.text import Text

    ready = sum(1 for s in frame.sandboxes if readiness.sandbox_readiness(s).status == "True")
    summary = f"{len(frame.sandboxes)} sandboxes, {ready} ready; {len(frame.pools)} warm pools"
    if frame.usage is None:
        summary += "; resource use n/a (no metrics-server)"
    rows = [sandbox_row(s, frame.usage, now) for s in sorted(frame.sandboxes, key=_name)]
    pools = [pool_row(p, now) for p in sorted(frame.pools, key=_name)]
    parts: list[Any] = [Text(summary, style="bold"), _table(SANDBOX_COLUMNS, rows)]
    if pools:
        parts += [Text(""), _table(POOL_COLUMNS, pools)]
    return Group(*parts)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def run(
    read: Callable[[], Frame],
    *,
    once: bool,
    interval: float,
    iterations: int | None = None,
) -> None:
    """Print one frame, or redraw one in place every ``interval`` seconds until Ctrl-C.

    Args:
        read: Reads a frame.
        once: Print one frame and return.
        interval: Seconds between refreshes.
        iterations: Stop after this many frames (tests); forever when None.
    """
    from rich.console import Console
    from rich.live import Live

    console = Console()
    if once:
        console.print(render(read(), now=_now()))
        return
    count = 0
    with Live(render(read(), now=_now()), console=console, auto_refresh=False) as live:
        try:
            while iterations is None or (count := count + 1) < iterations:
                time.sleep(interval)
                live.update(render(read(), now=_now()), refresh=True)
        except KeyboardInterrupt:
            pass


def register(app: typer.Typer, state: State, errors: Callable[[], Any]) -> None:
    """Add the ``top`` command to ``app`` (``errors`` maps SDK errors to exit codes)."""

    @app.command("top")
    def top(
        namespace: Annotated[
            str | None,
            typer.Option("--namespace", "-n", help="Namespace (default: the context's)."),
        ] = None,
        once: Annotated[bool, typer.Option(help="Print one frame and exit.")] = False,
        interval: Annotated[float, typer.Option(min=0.5, help="Seconds between refreshes.")] = 2.0,
    ) -> None:
        """A live table of sandboxes and warm pools with their state and resource use."""
        with errors():
            client = state.client()
            run(lambda: read_frame(client, namespace), once=once, interval=interval)
