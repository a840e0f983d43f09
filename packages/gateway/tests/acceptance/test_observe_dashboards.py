"""Every dashboard panel's query returns data from a real Prometheus that scraped the stack.

Prometheus (built from its Go module) scrapes the controller (``--extensions
--idle-shutdown``) and the gateway every second while a short E2B workload runs: a sandbox
claimed from a warm pool (so the pool refills), suspended by its ``autoPause`` deadline (an
idle-controller action), resumed by an E2B connect (a gateway resume), a data-plane request,
a second sandbox, then both killed. Then each query of each shipped dashboard
(manifests/observability) must return at least one series with a number.

The same Prometheus evaluates the shipped alert rules (a copy with ``for: 0s``, expressions
unchanged): a pool no node can fill fires AgentSandboxWarmPoolShort, and claims on it fire
AgentSandboxClaimsNotReady.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kube_agent_sandbox.testing.plugin import unavailable
from kube_agent_sandbox.testing.processes import ProcessSupervisor, wait_until
from kube_agent_sandbox.testing.prometheus import (
    firing_alerts,
    instant_query,
    prometheus_binary,
    start_prometheus,
)

REPO = Path(__file__).resolve().parents[4]
RULES = REPO / "manifests" / "observability" / "alerts.rules.yaml"
DASHBOARDS = sorted((REPO / "manifests" / "observability" / "dashboards").glob("*.json"))
# With --leader-elect=false (the stack's single controller) no replica reports the Lease;
# the no-leader alert's expression is checked in test_alert_rules.py instead.
NOT_IN_THIS_STACK = {"Leader"}


def _queries() -> list[tuple[str, str, str]]:
    found = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            if panel["type"] == "row" or panel["title"] in NOT_IN_THIS_STACK:
                continue
            found += [(path.stem, panel["title"], t["expr"]) for t in panel["targets"]]
    return found


def _fast_rules(path: Path) -> Path:
    """The shipped rules with ``for: 0s``: the expressions are the shipped ones, unchanged."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    path.write_text(yaml.safe_dump(rules))
    return path


def _has_number(url: str, expr: str) -> bool:
    return any(math.isfinite(float(s["value"][1])) for s in instant_query(url, expr))


@pytest.fixture(scope="module")
def prometheus(gateway_stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not prometheus_binary().is_file():
        unavailable(f"{prometheus_binary()} missing: nox -s testenv -- --with-prometheus")
    supervisor = ProcessSupervisor(tmp_path_factory.mktemp("prometheus-logs"))
    try:
        workdir = tmp_path_factory.mktemp("prometheus")
        url = start_prometheus(
            supervisor,
            workdir,
            {
                "controller": gateway_stack.controller_metrics,
                "gateway": gateway_stack.url.removeprefix("http://"),
            },
            rule_files=[_fast_rules(workdir / "rules.yaml")],
        )
        yield url
    finally:
        supervisor.stop_all()


def _workload(stack: Any, url: str) -> None:
    headers = {"X-API-Key": stack.api_key}
    with httpx.Client(base_url=stack.url, headers=headers, timeout=90) as client:
        created = client.post(
            "/sandboxes", json={"templateID": "base", "timeout": 5, "autoPause": True}
        )
        assert created.status_code == 201, created.text
        sandbox_id = created.json()["sandboxID"]
        wait_until(
            lambda: _has_number(url, "sum(agent_sandbox_idle_actions_total) > 0"),
            timeout=90,
            what="the autoPause deadline's suspension counted",
        )
        # The gateway resumes only what its own watch shows paused; connecting before the
        # suspension reaches that watch finds a running sandbox and resumes nothing.
        wait_until(
            lambda: client.get(f"/sandboxes/{sandbox_id}").json().get("state") == "paused",
            timeout=30,
            what="the gateway to see the sandbox paused",
        )
        connected = client.post(f"/sandboxes/{sandbox_id}/connect", json={"timeout": 60})
        assert connected.status_code in (200, 201), connected.text
        wait_until(
            lambda: _has_number(url, 'agent_sandbox_gateway_resumes_total{result="ok"} > 0'),
            timeout=30,
            what="the connect's resume counted",
        )
        client.get("/health", headers={"E2b-Sandbox-Id": sandbox_id})
        # A second claim: a histogram's first observation creates its series, and rate()
        # sees only what comes after it.
        second = client.post("/sandboxes", json={"templateID": "base", "timeout": 60})
        assert second.status_code == 201, second.text
        for sid in (sandbox_id, second.json()["sandboxID"]):
            assert client.delete(f"/sandboxes/{sid}").status_code == 204


def test_every_panel_query_returns_data(gateway_stack: Any, prometheus: str) -> None:
    assert len(DASHBOARDS) == 3
    _workload(gateway_stack, prometheus)
    time.sleep(3)  # a few more scrapes after the last request
    queries = _queries()
    empty = [(d, title, expr) for d, title, expr in queries if not _has_number(prometheus, expr)]
    assert not empty, "panels without data:\n" + "\n".join(map(str, empty))
    assert len(queries) >= 25


def _firing(url: str, alert: str) -> list[dict[str, Any]]:
    return [a for a in firing_alerts(url) if a["labels"]["alertname"] == alert]


def test_a_short_pool_and_claims_that_never_become_ready_fire_their_alerts(
    gateway_stack: Any, prometheus: str, cluster: Any
) -> None:
    """A pool whose pods no node takes: it stays short, and its claims never become Ready."""
    namespace = f"{gateway_stack.namespace}-alerts"
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    group = "extensions.agents.x-k8s.io/v1beta1"
    spec = {"containers": [{"name": "sandbox", "image": "nowhere:1"}]}
    spec["nodeSelector"] = {"agent-sandbox.test/no-such-node": "true"}
    cluster.apply(
        [
            {
                "apiVersion": group,
                "kind": "SandboxTemplate",
                "metadata": {"name": "stuck", "namespace": namespace},
                "spec": {"podTemplate": {"spec": spec}},
            },
            {
                "apiVersion": group,
                "kind": "SandboxWarmPool",
                "metadata": {"name": "stuck", "namespace": namespace},
                "spec": {"replicas": 2, "sandboxTemplateRef": {"name": "stuck"}},
            },
        ]
    )
    try:
        wait_until(
            lambda: len(_firing(prometheus, "AgentSandboxWarmPoolShort")) == 1,
            timeout=60,
            what="AgentSandboxWarmPoolShort firing",
        )
        (short,) = _firing(prometheus, "AgentSandboxWarmPoolShort")
        assert short["labels"]["namespace"] == namespace
        assert short["labels"]["warmpool"] == "stuck"
        assert not _firing(prometheus, "AgentSandboxClaimsNotReady")
        # A counter's series starts at its first claim, so increase() counts from the second.
        for index in range(6):
            cluster.apply(
                {
                    "apiVersion": group,
                    "kind": "SandboxClaim",
                    "metadata": {"name": f"stuck-{index}", "namespace": namespace},
                    "spec": {"warmPoolRef": {"name": "stuck"}},
                }
            )
            time.sleep(1.5)
        wait_until(
            lambda: len(_firing(prometheus, "AgentSandboxClaimsNotReady")) == 1,
            timeout=60,
            what="AgentSandboxClaimsNotReady firing",
        )
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
