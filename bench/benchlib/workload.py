"""What the comparison scenarios create and how they drive it: manifests, open-loop senders,
warm pool waits, and the rows every scenario reports the same way (latency summaries, API
requests per unit of work, correctness checks of claims).

Shared so that the warm-claim, cold, refill and API-efficiency scenarios measure one thing one
way, whichever controller runs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchlib.clusterenv import NAMESPACE
from benchlib.promtext import RequestKey, per_unit, writes
from benchlib.report import BenchResult, at_most
from benchlib.shapes import sandbox_manifest
from benchlib.stats import summarize
from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_WARM_POOLS, SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiClient

log = logging.getLogger(__name__)

TEMPLATE = "bench-template"
POOL = "bench-pool"


def template_manifest() -> dict[str, Any]:
    """The SandboxTemplate the pool and the claims use (the cold Sandboxes' pod template)."""
    blueprint = sandbox_manifest("unused")["spec"]
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_TEMPLATE,
        "metadata": {"name": TEMPLATE},
        "spec": {"podTemplate": blueprint["podTemplate"]},
    }


def pool_manifest(replicas: int) -> dict[str, Any]:
    """The SandboxWarmPool, ``replicas`` members of the template."""
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_WARM_POOL,
        "metadata": {"name": POOL},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": TEMPLATE}},
    }


def rfc3339_now() -> str:
    """Now, as RFC 3339 with microseconds (what ``client-first-requested-at`` carries)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def claim_manifest(name: str) -> dict[str, Any]:
    """A SandboxClaim on the pool, stamped with the client's request time.

    The ``client-first-requested-at`` annotation makes the controller observe
    ``agent_sandbox_client_claim_startup_latency_ms`` from the same instant the benchmark's
    own clock starts, so both measures cover the same interval.
    """
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_CLAIM,
        "metadata": {
            "name": name,
            "annotations": {c.ANNOTATION_CLIENT_FIRST_REQUESTED_AT: rfc3339_now()},
        },
        "spec": {"warmPoolRef": {"name": POOL}},
    }


@dataclass
class Sent:
    """What an open-loop sender did.

    Attributes:
        started: ``time.monotonic()`` when the first call was due.
        finished: When the last call returned.
        at: Per name, when its call was sent.
        failures: Per name, why its call failed.
    """

    started: float = 0.0
    finished: float = 0.0
    at: dict[str, float] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> list[str]:
        """Names whose call succeeded, in send order."""
        return [n for n in self.at if n not in self.failures]

    @property
    def rate(self) -> float | None:
        """Calls sent per second, from the first send to the last (None with fewer than 2)."""
        times = sorted(self.at.values())
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        return (len(times) - 1) / span if span > 0 else None


async def send_open_loop(
    names: Sequence[str], call: Callable[[str], Awaitable[object]], *, rate: float
) -> Sent:
    """Call ``call(name)`` for name ``i`` at ``t0 + i / rate``, whatever earlier calls did.

    Independent agents do not wait for each other, so neither does the sender: a slow server
    shows as latency and queueing, not as a lower offered rate.

    Args:
        names: Objects to create, in order.
        call: The API call for one name.
        rate: Calls per second.

    Returns:
        When each call went out, and which failed.
    """
    sent = Sent(started=time.monotonic())

    async def one(name: str, due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        sent.at[name] = time.monotonic()
        try:
            await call(name)
        except Exception as err:  # counted and reported, the run goes on
            sent.failures[name] = f"{type(err).__name__}: {err}"[:300]

    await asyncio.gather(*(one(n, sent.started + i / rate) for i, n in enumerate(names)))
    sent.finished = time.monotonic()
    return sent


async def pool_ready(client: ApiClient) -> int:
    """The pool's ``status.readyReplicas``."""
    pool = await client.get(SANDBOX_WARM_POOLS, NAMESPACE, POOL)
    return int((pool.get("status") or {}).get("readyReplicas") or 0)


async def wait_pool_ready(client: ApiClient, replicas: int, *, within: float) -> float:
    """Wait until the pool reports ``replicas`` Ready members; returns the seconds it took.

    Raises:
        TimeoutError: If it does not within ``within`` seconds.
    """
    began = time.monotonic()
    while (ready := await pool_ready(client)) < replicas:
        if time.monotonic() - began > within:
            raise TimeoutError(f"warm pool has {ready}/{replicas} Ready after {within:.0f}s")
        await asyncio.sleep(0.25)
    return time.monotonic() - began


def add_latency_rows(
    result: BenchResult,
    label: str,
    seconds: Sequence[float],
    *,
    targets: Mapping[str, float] | None = None,
    note: str = "",
) -> None:
    """Add ``<label> p50/p90/p99/max`` rows in ms, with targets (ms) per percentile."""
    targets = targets or {}
    for name, value in summarize(seconds).scaled(1000).items():
        limit = targets.get(name)
        result.add(
            f"{label} {name}",
            value,
            "ms",
            target=None if limit is None else f"<= {limit:g} ms",
            check=None if limit is None else at_most(limit),
            note=note,
        )


def add_request_rows(
    result: BenchResult,
    what: str,
    delta: Mapping[RequestKey, float],
    units: int,
    *,
    writes_target: float | None = None,
    key: str,
) -> None:
    """Add the API-efficiency rows: requests and writes per unit; the breakdown to details.

    Args:
        result: Where to add.
        what: ``warm claim`` or ``cold Sandbox``.
        delta: kube-apiserver requests spent (every client) per verb and resource.
        units: How many units the delta was spent on.
        writes_target: Most writes per unit that pass, if there is a target.
        key: Name of the per-verb/resource breakdown in ``result.details``.
    """
    if units <= 0:
        return
    total = sum(delta.values())
    result.add(f"apiserver requests per {what}", total / units, note="all clients, all verbs")
    result.add(
        f"apiserver writes per {what}",
        writes(delta) / units,
        target=None if writes_target is None else f"<= {writes_target:g}",
        check=None if writes_target is None else at_most(writes_target),
        note="POST/PUT/PATCH/DELETE, all clients",
    )
    result.details[key] = {k: round(v, 3) for k, v in per_unit(delta, units).items()}


@dataclass(frozen=True)
class Binding:
    """Which claims are bound to which Sandboxes, checked for the two ways binding goes wrong.

    Attributes:
        bound: Claim name -> Sandbox name from ``status.sandbox.name``.
        double: Sandbox names two or more claims report as theirs.
        foreign: Claims whose Sandbox is controlled by another owner than the claim.
    """

    bound: dict[str, str]
    double: list[str]
    foreign: list[str]


def check_binding(
    claims: Mapping[str, dict[str, Any]], sandboxes: Sequence[dict[str, Any]]
) -> Binding:
    """Find Sandboxes bound twice and claims pointing at a Sandbox they do not control.

    Args:
        claims: Claim objects by name (as the watch last showed them).
        sandboxes: Every Sandbox of the namespace.

    Returns:
        The binding and what is wrong with it.
    """
    bound: dict[str, str] = {}
    for name, claim in claims.items():
        target = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
        if target:
            bound[name] = str(target)
    counts = Counter(bound.values())
    controller_of: dict[str, str] = {}
    for sandbox in sandboxes:
        meta = sandbox.get("metadata") or {}
        for ref in meta.get("ownerReferences") or ():
            if ref.get("controller"):
                controller_of[str(meta.get("name"))] = f"{ref.get('kind')}/{ref.get('name')}"
    foreign = sorted(
        claim
        for claim, target in bound.items()
        if target in controller_of and controller_of[target] != f"{c.KIND_SANDBOX_CLAIM}/{claim}"
    )
    return Binding(bound, sorted(s for s, n in counts.items() if n > 1), foreign)


async def list_all(client: ApiClient, *, resource: Any = SANDBOXES) -> list[dict[str, Any]]:
    """Every object of ``resource`` in the benchmark namespace (paged)."""
    items: list[dict[str, Any]] = []
    cont: str | None = None
    while True:
        page = await client.list(resource, NAMESPACE, limit=500, continue_token=cont)
        items += page.get("items") or []
        cont = (page.get("metadata") or {}).get("continue") or None
        if not cont:
            return items


def cpu_share_rows(
    result: BenchResult,
    before: Mapping[str, float],
    after: Mapping[str, float],
    wall: float,
    *,
    per: tuple[str, int] | None = None,
) -> None:
    """CPU seconds per process over a phase, and the controller's share of the cluster's CPU.

    Args:
        per: ``(what, count)``: also the controller's and kube-apiserver's CPU per unit (ms),
            e.g. ``("cold Sandbox", 750)``; the comparison with another controller is fair only
            per unit, since a slower run spreads the same work over a longer phase.
    """
    spent = {k: max(0.0, after[k] - before.get(k, 0.0)) for k in after}
    result.details["cpu_seconds_by_process"] = {k: round(v, 2) for k, v in spent.items()}
    cluster = sum(v for k, v in spent.items() if k != "bench-driver")
    if cluster <= 0:
        return
    controller = spent.get("controller", 0.0)
    server = spent.get("kube-apiserver", 0.0) + spent.get("etcd", 0.0)
    result.add("controller CPU share", 100 * controller / cluster, "%",
               note=f"{controller:.1f} of {cluster:.1f} CPU s (cluster + controller)")  # fmt: skip
    result.add("kube-apiserver + etcd CPU share", 100 * server / cluster, "%")
    result.add("controller CPU", controller / wall * 100 if wall > 0 else None, "% of a core")
    if per is not None and per[1] > 0:
        what, count = per
        server_ms = 1000 * spent.get("kube-apiserver", 0.0) / count
        result.add(f"kube-apiserver CPU per {what}", server_ms, "ms",
                   note="the API server is what a cluster runs out of first")  # fmt: skip
        result.add(f"controller CPU per {what}", 1000 * controller / count, "ms")
    result.notes.append(
        f"CPU seconds over {wall:.0f} s: "
        + ", ".join(f"{k} {v:.1f}" for k, v in sorted(spent.items(), key=lambda i: -i[1]))
    )
