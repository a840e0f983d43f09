"""Claim metrics: names, buckets, help texts, label resolution and skip rules.

Upstream v0.5.6 internal/metrics/metrics.go; docs/concepts/claims.md, Metrics.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kube_agent_sandbox.extensions.claim.metrics import ClaimMetrics, whole_millis

NOW = dt.datetime(2026, 8, 5, 12, 0, 0, tzinfo=dt.UTC)
STARTUP = "agent_sandbox_claim_startup_latency_ms"
CONTROLLER = "agent_sandbox_claim_controller_startup_latency_ms"
CLIENT = "agent_sandbox_client_claim_startup_latency_ms"
CREATION = "agent_sandbox_creation_latency_ms"
COUNTER = "agent_sandbox_claim_creation_total"
STARTUP_LE = (
    "100.0,250.0,500.0,750.0,1000.0,1250.0,1500.0,2000.0,2500.0,5000.0,10000.0,30000.0,"
    "60000.0,120000.0,240000.0,+Inf"
)
CREATION_LE = (
    "50.0,100.0,250.0,500.0,1000.0,2500.0,5000.0,10000.0,30000.0,60000.0,120000.0,240000.0,"
    "300000.0,600000.0,+Inf"
)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def _text(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_exposition_names_help_and_buckets(registry: CollectorRegistry) -> None:
    metrics = ClaimMetrics(registry)
    claim = _claim(
        webhook="2026-08-05T11:59:59Z",
        controller="2026-08-05T11:59:59Z",
        client="2026-08-05T11:59:59Z",
    )
    metrics.observe_first_ready(claim, _sandbox(), now=NOW)
    metrics.record_creation(
        namespace="ns",
        sandbox_template="t",
        launch_type="cold",
        warmpool_name="p",
        pod_condition="not_ready",
        created_by="python-client",
    )
    text = _text(registry)
    helps = {
        STARTUP: "End-to-end latency from SandboxClaim creation to Sandbox Ready state in "
        "milliseconds.",
        CONTROLLER: "Latency from controller first observed SandboxClaim to Sandbox Ready state "
        "in milliseconds.",
        CLIENT: "End-to-end latency from client request to SandboxClaim Ready state in "
        "milliseconds. Note: This metric may be affected by clock skew between the client and "
        "controller.",
        CREATION: "Latency from Sandbox creation to Pod Ready state in milliseconds. For warm "
        "launches, this measures controller synchronization overhead since the Pod is "
        "pre-provisioned.",
        COUNTER: "Total number of SandboxClaims created, labeled by namespace, sandbox template, "
        "launch type, warmpool name, pod condition, and created_by.",
    }
    for name, help_text in helps.items():
        assert f"# HELP {name} {help_text}\n" in text
    assert f"# TYPE {COUNTER} counter" in text
    for name in (STARTUP, CONTROLLER, CLIENT, CREATION):
        assert f"# TYPE {name} histogram" in text
    for name, expected in ((STARTUP, STARTUP_LE), (CONTROLLER, STARTUP_LE), (CLIENT, STARTUP_LE)):
        bounds = [
            line.split('le="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith(f"{name}_bucket{{")
        ]
        assert ",".join(bounds) == expected
    bounds = [
        line.split('le="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith(f"{CREATION}_bucket{{")
    ]
    assert ",".join(bounds) == CREATION_LE
    assert (
        f'{COUNTER}{{created_by="python-client",launch_type="cold",namespace="ns",'
        'pod_condition="not_ready",sandbox_template="t",warmpool_name="p"} 1.0' in text
    )


def test_constructing_twice_on_one_registry_reuses_the_collectors(
    registry: CollectorRegistry,
) -> None:
    first = ClaimMetrics(registry)
    second = ClaimMetrics(registry)
    for m in (first, second):
        m.record_creation(
            namespace="ns",
            sandbox_template="t",
            launch_type="warm",
            warmpool_name="p",
            pod_condition="ready",
            created_by="go-client",
        )
    labels = {
        "namespace": "ns",
        "sandbox_template": "t",
        "launch_type": "warm",
        "warmpool_name": "p",
        "pod_condition": "ready",
        "created_by": "go-client",
    }
    assert registry.get_sample_value(COUNTER, labels) == 2.0
    assert ClaimMetrics(CollectorRegistry()) is not None  # a fresh registry is independent


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("go-client", "go-client"),
        ("python-client", "python-client"),
        ("controller", "controller"),
        ("", "unknown"),
        ("kubectl", "unknown"),
        ("Python-Client", "unknown"),
    ],
)
def test_record_creation_normalizes_created_by(
    registry: CollectorRegistry, raw: str, normalized: str
) -> None:
    ClaimMetrics(registry).record_creation(
        namespace="ns",
        sandbox_template="t",
        launch_type="cold",
        warmpool_name="",
        pod_condition="not_ready",
        created_by=raw,
    )
    labels = {
        "namespace": "ns",
        "sandbox_template": "t",
        "launch_type": "cold",
        "warmpool_name": "",
        "pod_condition": "not_ready",
        "created_by": normalized,
    }
    assert registry.get_sample_value(COUNTER, labels) == 1.0


def _claim(
    *, webhook: str | None = None, controller: str | None = None, client: str | None = None
) -> dict[str, Any]:
    annotations = {}
    if webhook is not None:
        annotations["agents.x-k8s.io/webhook-first-observed-at"] = webhook
    if controller is not None:
        annotations["agents.x-k8s.io/controller-first-observed-at"] = controller
    if client is not None:
        annotations["agents.x-k8s.io/client-first-requested-at"] = client
    return {"metadata": {"name": "c", "namespace": "ns", "annotations": annotations}}


def _sandbox(
    *,
    launch: str | None = "cold",
    template: str | None = "tpl",
    created: str | None = "2026-08-05T11:00:00Z",
    ready: tuple[str, str | None] | None = ("True", "2026-08-05T11:00:01.5Z"),
) -> dict[str, Any]:
    labels = {"agents.x-k8s.io/launch-type": launch} if launch is not None else {}
    annotations = {"agents.x-k8s.io/sandbox-template-ref": template} if template is not None else {}
    sandbox: dict[str, Any] = {
        "metadata": {
            "name": "sb",
            "namespace": "sbns",
            "labels": labels,
            "annotations": annotations,
        }
    }
    if created is not None:
        sandbox["metadata"]["creationTimestamp"] = created
    if ready is not None:
        condition: dict[str, Any] = {"type": "Ready", "status": ready[0]}
        if ready[1] is not None:
            condition["lastTransitionTime"] = ready[1]
        sandbox["status"] = {"conditions": [{"type": "Suspended", "status": "False"}, condition]}
    return sandbox


def _observed(registry: CollectorRegistry) -> set[str]:
    """The histograms with at least one observation, whatever their labels."""
    return {
        sample.name.removesuffix("_count")
        for family in registry.collect()
        for sample in family.samples
        if sample.name.endswith("_count") and sample.value > 0
    }


def _sum(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> float | None:
    return registry.get_sample_value(f"{name}_sum", labels)


def _count(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> float | None:
    return registry.get_sample_value(f"{name}_count", labels)


@pytest.mark.parametrize(
    ("sandbox", "launch_type", "template"),
    [
        pytest.param(_sandbox(), "cold", "tpl", id="cold"),
        pytest.param(_sandbox(launch="warm"), "warm", "tpl", id="warm"),
        pytest.param(_sandbox(launch=None), "cold", "tpl", id="no-label-is-cold"),
        pytest.param(_sandbox(launch="Warm"), "cold", "tpl", id="other-value-is-cold"),
        pytest.param(_sandbox(template=None), "cold", "__unknown__", id="no-template"),
        pytest.param(_sandbox(template=""), "cold", "__unknown__", id="empty-template"),
        pytest.param(None, "unknown", "__unknown__", id="no-sandbox"),
    ],
)
def test_label_resolution(
    registry: CollectorRegistry,
    sandbox: dict[str, Any] | None,
    launch_type: str,
    template: str,
) -> None:
    claim = _claim(
        webhook="2026-08-05T11:59:58.000Z",
        controller="2026-08-05T11:59:59.250Z",
        client="2026-08-05T11:59:57.9999Z",
    )
    ClaimMetrics(registry).observe_first_ready(claim, sandbox, now=NOW)
    observed = _observed(registry)
    labels = {"launch_type": launch_type, "sandbox_template": template}
    assert _sum(registry, STARTUP, labels) == 2000.0
    assert _sum(registry, CONTROLLER, labels) == 750.0
    assert _sum(registry, CLIENT, labels) == 2000.0  # 2000.1 ms truncated
    assert {STARTUP, CONTROLLER, CLIENT} <= set(observed)
    if sandbox is None:
        assert CREATION not in observed
    else:
        creation_labels = {"namespace": "sbns", **labels}
        assert _sum(registry, CREATION, creation_labels) == 1500.0
        assert _count(registry, CREATION, creation_labels) == 1.0


BAD_TIMES = ["", "garbage", "2026-08-05", "2026-08-05T11:00:00", "2026-08-05 11:00:00Z"]


@pytest.mark.parametrize("value", [None, *BAD_TIMES, "2026-08-05T12:00:00.001Z"])
def test_webhook_and_controller_skip_missing_unparseable_future(
    registry: CollectorRegistry, value: str | None
) -> None:
    claim = _claim(webhook=value, controller=value)
    ClaimMetrics(registry).observe_first_ready(claim, _sandbox(), now=NOW)
    observed = _observed(registry)
    labels = {"launch_type": "cold", "sandbox_template": "tpl"}
    assert STARTUP not in observed
    assert CONTROLLER not in observed
    assert _count(registry, STARTUP, labels) is None
    assert _count(registry, CONTROLLER, labels) is None
    assert CREATION in observed  # the others are independent


def test_start_equal_to_now_is_zero_not_skipped(registry: CollectorRegistry) -> None:
    claim = _claim(webhook="2026-08-05T12:00:00Z", controller="2026-08-05T14:00:00+02:00")
    ClaimMetrics(registry).observe_first_ready(claim, None, now=NOW)
    observed = _observed(registry)
    labels = {"launch_type": "unknown", "sandbox_template": "__unknown__"}
    assert observed == {STARTUP, CONTROLLER}
    assert _sum(registry, STARTUP, labels) == 0.0
    assert _sum(registry, CONTROLLER, labels) == 0.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, None, id="missing"),
        *[pytest.param(v, None, id=f"bad-{i}") for i, v in enumerate(BAD_TIMES)],
        pytest.param("2026-08-05T12:00:00.001Z", None, id="negative"),
        pytest.param("2026-08-05T12:00:00.0004Z", 0.0, id="sub-ms-future-truncates-to-zero"),
        pytest.param("2026-08-05T11:59:58.123456+00:00", 1876.0, id="python-sdk-format"),
        pytest.param("2026-08-05T11:59:58+00:00", 2000.0, id="python-sdk-no-fraction"),
        pytest.param("2026-08-05T04:59:58.5-07:00", 1500.0, id="offset"),
    ],
)
def test_client_latency(
    registry: CollectorRegistry, value: str | None, expected: float | None
) -> None:
    ClaimMetrics(registry).observe_first_ready(_claim(client=value), None, now=NOW)
    observed = _observed(registry)
    labels = {"launch_type": "unknown", "sandbox_template": "__unknown__"}
    assert _sum(registry, CLIENT, labels) == expected
    assert (CLIENT in observed) is (expected is not None)


@pytest.mark.parametrize(
    "sandbox",
    [
        pytest.param(_sandbox(created=None), id="no-creation-timestamp"),
        pytest.param(_sandbox(created="bad"), id="bad-creation-timestamp"),
        pytest.param(_sandbox(ready=None), id="no-ready"),
        pytest.param(_sandbox(ready=("False", "2026-08-05T11:00:01Z")), id="ready-false"),
        pytest.param(_sandbox(ready=("True", None)), id="ready-without-time"),
        pytest.param(_sandbox(ready=("True", "2026-08-05T10:59:59Z")), id="ready-before-create"),
    ],
)
def test_creation_latency_skips(registry: CollectorRegistry, sandbox: dict[str, Any]) -> None:
    ClaimMetrics(registry).observe_first_ready(_claim(), sandbox, now=NOW)
    observed = _observed(registry)
    assert observed == set()
    assert (
        _count(
            registry,
            CREATION,
            {"namespace": "sbns", "launch_type": "cold", "sandbox_template": "tpl"},
        )
        is None
    )


def test_creation_latency_zero_is_recorded(registry: CollectorRegistry) -> None:
    sandbox = _sandbox(created="2026-08-05T11:00:00Z", ready=("True", "2026-08-05T11:00:00Z"))
    ClaimMetrics(registry).observe_first_ready(_claim(), sandbox, now=NOW)
    assert _observed(registry) == {CREATION}
    labels = {"namespace": "sbns", "launch_type": "cold", "sandbox_template": "tpl"}
    assert _sum(registry, CREATION, labels) == 0.0


@pytest.mark.parametrize(
    ("delta", "millis"),
    [
        (dt.timedelta(0), 0),
        (dt.timedelta(microseconds=999), 0),
        (dt.timedelta(milliseconds=1), 1),
        (dt.timedelta(seconds=2, microseconds=1500), 2001),
        (dt.timedelta(microseconds=-999), 0),
        (dt.timedelta(microseconds=-1001), -1),
        (dt.timedelta(days=1), 86_400_000),
    ],
)
def test_whole_millis_truncates_toward_zero(delta: dt.timedelta, millis: int) -> None:
    assert whole_millis(delta) == millis
