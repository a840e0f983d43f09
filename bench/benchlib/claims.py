"""``claims``: warm-pool claims under a steady arrival rate, their latency and API cost.

A SandboxTemplate and a SandboxWarmPool of ``pool`` members are created and filled (the fill
rate is the pool's refill speed). Then ``claims`` SandboxClaims arrive open-loop at ``rate``
per second (claim ``i`` is sent at ``t0 + i / rate`` whatever happened to the earlier ones, as
independent agents would send them). Each latency runs from just before the create call to the
watch event that first shows the claim ``Ready=True``. When every claim is Ready, the benchmark
waits for the pool to be full again, so the refill the claims caused is part of their cost.

API cost is read from kube-apiserver's own ``apiserver_request_total`` (every client: the
controller, kube-scheduler, kube-controller-manager, kwok and the benchmark's own creates) as
mutating requests (POST, PUT, PATCH, DELETE) between "pool full" before and after the claims,
divided by the number of claims; the controller's share comes from its client metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

from benchlib.clusterenv import NAMESPACE, BenchCluster, controller_log_errors
from benchlib.ops import percentile
from benchlib.procstats import MIB, read_sample
from benchlib.promtext import Scrape, scrape
from benchlib.report import BenchResult, Interrupted, at_most
from benchlib.shapes import sandbox_manifest
from benchlib.tracker import SandboxTracker
from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime.client import ApiClient
from kube_agent_sandbox.extensions.common.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
)

log = logging.getLogger(__name__)

TEMPLATE = "bench-template"
POOL = "bench-pool"
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
LATENCY_TARGET_MS = 100.0
"""'Tens of milliseconds' for a claim served from a warm pool, as the project promises."""
WRITES_TARGET = 10.0
"""Apiserver writes per warm claim (upstream spends about 23)."""


def run(
    *,
    claims: int,
    rate: float,
    pool: int,
    nodes: int,
    workers: int,
    claim_workers: int,
    controller_args: list[str],
    fill_timeout: float = 900.0,
    keep_workdir: bool = False,
) -> BenchResult:
    """Run the claims benchmark.

    Args:
        claims: SandboxClaims to send.
        rate: Claims per second (open loop).
        pool: Warm pool replicas.
        nodes: kwok nodes (1000 pods each): room for ``pool + claims``.
        workers: ``--sandbox-concurrent-workers``.
        claim_workers: ``--sandbox-claim-concurrent-workers``.
        controller_args: Extra controller flags.
        fill_timeout: Seconds to wait for the pool to fill (before and after the claims).
        keep_workdir: Keep the cluster's work directory.

    Returns:
        The result.
    """
    result = BenchResult(
        "claims",
        params={
            "claims": claims,
            "rate_per_s": rate,
            "pool": pool,
            "nodes": nodes,
            "claim_workers": claim_workers,
        },
    )
    with BenchCluster(nodes=nodes, keep_workdir=keep_workdir) as env:
        args = [f"--sandbox-claim-concurrent-workers={claim_workers}", *controller_args]
        controller = env.start_controller(workers=workers, extra_args=args, extensions=True)
        try:
            asyncio.run(_measure(env, result, claims, rate, pool, fill_timeout))
        except KeyboardInterrupt:
            result.error = "interrupted (Ctrl-C); the numbers above are partial"
            raise Interrupted(result) from None
        finally:
            if controller.alive():
                result.add("controller RSS at end", read_sample(controller.pid).rss / MIB, "MiB")
            status = env.stop_controller(controller)
            errors, first = controller_log_errors(controller)
            result.details["controller_exit"] = status
            result.details["controller_log_errors"] = {"count": errors, "first": first}
            result.details["timings"] = env.timings
    return result


def _template() -> dict[str, Any]:
    blueprint = sandbox_manifest("unused")["spec"]
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_TEMPLATE,
        "metadata": {"name": TEMPLATE},
        "spec": {"podTemplate": blueprint["podTemplate"]},
    }


def _pool(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_WARM_POOL,
        "metadata": {"name": POOL},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": TEMPLATE}},
    }


def _claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_CLAIM,
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": POOL}},
    }


async def _pool_ready(client: ApiClient) -> int:
    pool = await client.get(SANDBOX_WARM_POOLS, NAMESPACE, POOL)
    return int((pool.get("status") or {}).get("readyReplicas") or 0)


async def _wait_pool_full(client: ApiClient, replicas: int, *, within: float) -> float:
    """Wait until the pool reports ``replicas`` Ready members; returns the seconds it took."""
    began = time.monotonic()
    while (ready := await _pool_ready(client)) < replicas:
        if time.monotonic() - began > within:
            raise TimeoutError(f"warm pool has {ready}/{replicas} Ready after {within:.0f}s")
        await asyncio.sleep(0.5)
    return time.monotonic() - began


def _apiserver_writes(env: BenchCluster) -> Counter[str]:
    """Mutating requests the API server has served so far, per resource."""
    assert env.access is not None
    text = env.access.kubectl("get", "--raw", "/metrics").stdout
    counts: Counter[str] = Counter()
    for verb in WRITE_VERBS:
        for resource, value in (
            Scrape(text).by_label("apiserver_request_total", "resource", verb=verb).items()
        ):
            counts[resource] += int(value)
    return counts


async def _controller_writes(env: BenchCluster) -> float:
    metrics = await scrape(env.metrics_url)
    return sum(
        metrics.total("rest_client_requests_total", method=verb) or 0 for verb in WRITE_VERBS
    )


async def _measure(
    env: BenchCluster, result: BenchResult, claims: int, rate: float, pool: int, within: float
) -> None:
    async with env.admin_client(connections=64) as client:
        await client.create(SANDBOX_TEMPLATES, NAMESPACE, _template())
        await client.create(SANDBOX_WARM_POOLS, NAMESPACE, _pool(pool))
        fill = await _wait_pool_full(client, pool, within=within)
        result.add("pool fill", pool / fill if fill else None, "sandboxes/s")
        writes_before = _apiserver_writes(env)
        controller_before = await _controller_writes(env)

        tracker = SandboxTracker(client, NAMESPACE, resource=SANDBOX_CLAIMS)
        await tracker.start()
        try:
            names = [f"claim-{i:05d}" for i in range(claims)]
            sent: dict[str, float] = {}
            failures: list[str] = []

            async def send(name: str, at: float) -> None:
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                sent[name] = time.monotonic()
                try:
                    await client.create(SANDBOX_CLAIMS, NAMESPACE, _claim(name))
                except Exception as err:  # counted and reported, the run goes on
                    failures.append(f"{name}: {err}")

            began = time.monotonic()
            await asyncio.gather(*(send(n, began + i / rate) for i, n in enumerate(names)))
            send_seconds = time.monotonic() - began
            all_ready = await tracker.wait_marks(
                [n for n in names if n in sent], "ready", within=within
            )
            latencies = [
                (tracker.mark(n, "ready") or 0.0) - sent[n]
                for n in names
                if n in sent and tracker.mark(n, "ready") is not None
            ]
            warm = sum(
                1
                for n in names
                if ((tracker.objects.get(n) or {}).get("status") or {})
                .get("sandbox", {})
                .get("name")
                not in (None, n)
            )
        finally:
            await tracker.stop()
        refill = await _wait_pool_full(client, pool, within=within)
        writes_after = _apiserver_writes(env)
        controller_after = await _controller_writes(env)

        result.add("claims sent", len(sent) - len(failures))
        result.add("achieved send rate", len(sent) / send_seconds if send_seconds else None, "/s")
        result.add("claims Ready", len(latencies))
        result.add("served warm", warm, note="status.sandbox differs from the claim's name")
        for label, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            value = percentile(latencies, q)
            result.add(
                f"claim->Ready {label}",
                None if value is None else value * 1000,
                "ms",
                target=f"<= {LATENCY_TARGET_MS:.0f} ms" if label != "p90" else None,
                check=at_most(LATENCY_TARGET_MS),
            )
        result.add("claim->Ready max", max(latencies) * 1000 if latencies else None, "ms")
        delta = writes_after - writes_before
        total = sum(delta.values())
        result.add(
            "apiserver writes per claim",
            total / claims if claims else None,
            target=f"<= {WRITES_TARGET:.0f}",
            check=at_most(WRITES_TARGET),
            note="all clients, incl. the claim create and the pool's refill",
        )
        result.add(
            "controller writes per claim",
            (controller_after - controller_before) / claims if claims else None,
        )
        result.add("pool refill after claims", refill, "s")
        result.details["writes_per_claim_by_resource"] = {
            k: v / claims for k, v in sorted(delta.items()) if v
        }
        result.details["latencies_s"] = latencies
        if failures:
            result.notes.append(f"{len(failures)} creates failed, e.g. {failures[0][:200]}")
        if not all_ready:
            result.notes.append(f"only {len(latencies)}/{len(sent)} claims Ready in {within:.0f}s")
