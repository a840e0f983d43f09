"""Client-side latency histograms, named as upstream v0.5.6 names them.

Upstream's are in ``clients/python/agentic-sandbox-client/k8s_agent_sandbox/metrics.py`` of
kubernetes-sigs/agent-sandbox v0.5.6; docs/guides/migrating-from-k8s-agent-sandbox.md lists them.

``sandbox_client_suspend_latency_ms`` and ``sandbox_client_resume_latency_ms`` (label ``status``
= ``success``/``failure``) time suspend and resume calls that changed something; a no-op call
(already suspended, already running) records nothing, as upstream's.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import REGISTRY, Histogram, generate_latest

BUCKETS_MS: Final = (
    100, 250, 500, 750, 1000, 1250, 1500, 2000, 2500, 5000, 10000, 30000, 60000, 120000, 240000,
)  # fmt: skip

SUSPEND_LATENCY: Final = Histogram(
    "sandbox_client_suspend_latency_ms",
    "Time for a Sandbox suspend requested by the SDK to complete, in milliseconds.",
    ["status"],
    buckets=BUCKETS_MS,
)
RESUME_LATENCY: Final = Histogram(
    "sandbox_client_resume_latency_ms",
    "Time for a Sandbox resume requested by the SDK to complete, in milliseconds.",
    ["status"],
    buckets=BUCKETS_MS,
)


def observe(histogram: Histogram, *, started: float, ended: float, success: bool) -> None:
    """Record one call's latency (monotonic seconds in, milliseconds out)."""
    histogram.labels(status="success" if success else "failure").observe((ended - started) * 1000.0)


def get_metrics() -> str:
    """The Prometheus text exposition of the default registry (upstream's ``get_metrics``)."""
    return generate_latest(REGISTRY).decode("utf-8")
