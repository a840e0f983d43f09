"""``api``: API server requests per warm claim and per cold Sandbox, by verb and resource.

A moderate load (default: a pool of 120, 100 claims at 10/s, then 100 cold Sandboxes at 10/s)
so the figures describe the work each unit costs, not retries and conflicts of a saturated
machine. The counts are kube-apiserver's own ``apiserver_request_total`` deltas, every client
included (the benchmark's creates, the controller, kube-scheduler, kube-controller-manager and
kwok); the per-claim figure includes the pool refill the claims cause. The JSON report holds
the full ``VERB resource`` breakdown per unit; the Markdown summary shows its top rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchlib.claims import ClaimSizes, create_pool, measure_claims
from benchlib.cold import ColdSizes, measure_cold
from benchlib.harness import Context, ControllerSpec, run_scenario
from benchlib.report import BenchResult


@dataclass(frozen=True)
class ApiSizes:
    """The scenario's sizes.

    Attributes:
        pool: Warm pool replicas.
        claims: Warm claims.
        sandboxes: Cold Sandboxes.
        rate: Claims, then Sandboxes, per second.
        within: Seconds for each wait.
    """

    pool: int = 120
    claims: int = 100
    sandboxes: int = 100
    rate: float = 10.0
    within: float = 600.0


def run(sizes: ApiSizes, *, spec: ControllerSpec, keep_workdir: bool = False) -> BenchResult:
    """Run the API-efficiency scenario against the controller ``spec`` names.

    Args:
        sizes: Counts, rate and timeout.
        spec: The controller under test.
        keep_workdir: Keep the cluster's work directory.

    Returns:
        The result.
    """

    async def body(ctx: Context) -> None:
        claims = ClaimSizes(
            pool=sizes.pool, claims=sizes.claims, rate=sizes.rate, within=sizes.within
        )
        async with ctx.client() as client:
            await create_pool(ctx, client, claims)
            await measure_claims(ctx, client, claims)
            claim_series = dict(ctx.series)
            await measure_cold(
                ctx,
                client,
                ColdSizes(sandboxes=sizes.sandboxes, rate=sizes.rate, within=sizes.within),
            )
        ctx.series["claim_latency_s"] = claim_series.get("latency_s", [])

    room = sizes.pool + sizes.claims + sizes.sandboxes
    return run_scenario(
        "api",
        params={
            "pool": sizes.pool,
            "claims": sizes.claims,
            "sandboxes": sizes.sandboxes,
            "rate_per_s": sizes.rate,
        },
        spec=spec,
        nodes=max(1, -(-room // 1000)),
        body=body,
        keep_workdir=keep_workdir,
    )
