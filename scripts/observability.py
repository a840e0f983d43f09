"""Write the Grafana dashboards and the Prometheus alert rules from one source of truth.

Outputs (all generated, do not edit):

* ``manifests/observability/dashboards/<uid>.json``: Grafana dashboards to import;
* ``manifests/observability/alerts.rules.yaml``: a plain Prometheus rules file;
* ``charts/agent-sandbox/files/observability/``: the same dashboards and rule groups, which the
  chart ships (opt-in) as ConfigMaps for Grafana's sidecar and as a PrometheusRule.

``python scripts/observability.py --check`` exits 1 when a file differs from what would be
generated (``nox -s check-generated`` runs it). The tests in ``packages/testing/tests/observe``
run every panel's query and every rule against a real Prometheus.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests" / "observability"
CHART_FILES = ROOT / "charts" / "agent-sandbox" / "files" / "observability"
RUNBOOKS = "docs/observe/alerts.md"
LEASE = "a3317529.agent-sandbox.x-k8s.io"
WINDOW = "5m"


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel and the legend of its series."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """A time-series panel."""

    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str = ""


@dataclass(frozen=True)
class Dashboard:
    """A dashboard: rows of panels, two panels per line."""

    uid: str
    title: str
    rows: tuple[tuple[str, tuple[Panel, ...]], ...]
    tags: tuple[str, ...] = field(default=("agent-sandbox",))


def _rate(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}[{WINDOW}]))"


def _quantile(q: float, histogram: str, by: str = "") -> str:
    labels = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({labels}) (rate({histogram}_bucket[{WINDOW}])))"


def _quantiles(histogram: str, by: str = "", legend: str = "") -> tuple[Query, ...]:
    prefix = f"{legend} " if legend else ""
    return tuple(
        Query(_quantile(q, histogram, by), f"{prefix}p{int(q * 100)}") for q in (0.5, 0.9, 0.99)
    )


CLAIM_READY = "agent_sandbox_claim_controller_startup_latency_ms"

CLAIMS_AND_POOLS = Dashboard(
    uid="agent-sandbox-claims",
    title="Agent Sandbox / Claims and warm pools",
    rows=(
        (
            "Claims",
            (
                Panel(
                    "Claims served, warm vs cold",
                    "reqps",
                    (
                        Query(
                            _rate("agent_sandbox_claim_creation_total", "launch_type"),
                            "{{launch_type}}",
                        ),
                    ),
                    "SandboxClaims given a Sandbox per second: adopted from a warm pool or "
                    "created cold.",
                ),
                Panel(
                    "Claim → Ready latency",
                    "ms",
                    _quantiles(CLAIM_READY),
                    "From the controller's first sight of a claim to its Ready condition.",
                ),
                Panel(
                    "Claim → Ready p90, warm vs cold",
                    "ms",
                    (Query(_quantile(0.9, CLAIM_READY, "launch_type"), "{{launch_type}}"),),
                ),
                Panel(
                    "Sandbox creation → Pod Ready p90",
                    "ms",
                    (
                        Query(
                            _quantile(0.9, "agent_sandbox_creation_latency_ms", "launch_type"),
                            "{{launch_type}}",
                        ),
                    ),
                ),
            ),
        ),
        (
            "Warm pools",
            (
                Panel(
                    "Ready vs desired members",
                    "short",
                    (
                        Query(
                            "sum by (namespace, warmpool) (agent_sandbox_warmpool_ready_replicas)",
                            "{{namespace}}/{{warmpool}} ready",
                        ),
                        Query(
                            "sum by (namespace, warmpool) "
                            "(agent_sandbox_warmpool_desired_replicas)",
                            "{{namespace}}/{{warmpool}} desired",
                        ),
                    ),
                ),
                Panel(
                    "Refill rate",
                    "ops",
                    (
                        Query(
                            _rate(
                                "agent_sandbox_warmpool_members_created_total",
                                "namespace, warmpool",
                            ),
                            "{{namespace}}/{{warmpool}}",
                        ),
                    ),
                    "Members a pool creates per second to replace adopted or lost ones.",
                ),
            ),
        ),
        (
            "Sandboxes",
            (
                Panel(
                    "Sandboxes by state",
                    "short",
                    (
                        Query(
                            "sum by (ready_condition, expired, owned_by) (agent_sandboxes)",
                            "ready={{ready_condition}} expired={{expired}} {{owned_by}}",
                        ),
                    ),
                ),
                Panel(
                    "Idle suspensions and deletions (1h)",
                    "short",
                    (
                        Query(
                            "sum by (action, reason) "
                            "(increase(agent_sandbox_idle_actions_total[1h]))",
                            "{{action}} ({{reason}})",
                        ),
                    ),
                ),
            ),
        ),
    ),
)

CONTROLLERS = Dashboard(
    uid="agent-sandbox-controllers",
    title="Agent Sandbox / Controllers",
    rows=(
        (
            "Reconciles",
            (
                Panel(
                    "Reconcile rate",
                    "ops",
                    (
                        Query(
                            _rate("controller_runtime_reconcile_total", "controller, result"),
                            "{{controller}} {{result}}",
                        ),
                    ),
                ),
                Panel(
                    "Reconcile time p99",
                    "s",
                    (
                        Query(
                            _quantile(
                                0.99, "controller_runtime_reconcile_time_seconds", "controller"
                            ),
                            "{{controller}}",
                        ),
                    ),
                ),
                Panel(
                    "Errors by class",
                    "ops",
                    (
                        Query(
                            _rate("controller_runtime_reconcile_errors_total", "controller"),
                            "{{controller}} error",
                        ),
                        Query(
                            _rate(
                                "controller_runtime_terminal_reconcile_errors_total", "controller"
                            ),
                            "{{controller}} terminal",
                        ),
                        Query(
                            _rate("controller_runtime_reconcile_panics_total", "controller"),
                            "{{controller}} programming error",
                        ),
                    ),
                    "Retried errors, terminal errors (not retried) and programming errors "
                    "(the counterpart of a recovered Go panic).",
                ),
                Panel(
                    "Work-queue depth",
                    "short",
                    (Query("sum by (name) (workqueue_depth)", "{{name}}"),),
                ),
                Panel(
                    "Work-queue wait p99",
                    "s",
                    (
                        Query(
                            _quantile(0.99, "workqueue_queue_duration_seconds", "name"),
                            "{{name}}",
                        ),
                    ),
                ),
                Panel(
                    "Leader",
                    "short",
                    (
                        Query(
                            f'max by (name) (leader_election_master_status{{name="{LEASE}"}})',
                            "leader",
                        ),
                    ),
                    "1 while a replica holds the Lease (absent with --leader-elect=false).",
                ),
            ),
        ),
        (
            "Kubernetes API",
            (
                Panel(
                    "API requests by verb",
                    "reqps",
                    (Query(_rate("rest_client_requests_total", "method"), "{{method}}"),),
                ),
                Panel(
                    "API requests by code",
                    "reqps",
                    (Query(_rate("rest_client_requests_total", "code"), "{{code}}"),),
                ),
                Panel(
                    "API latency p99 by verb",
                    "s",
                    (
                        Query(
                            _quantile(0.99, "rest_client_request_duration_seconds", "verb"),
                            "{{verb}}",
                        ),
                    ),
                ),
            ),
        ),
    ),
)

GATEWAY_DURATION = "agent_sandbox_gateway_request_duration_seconds"

GATEWAY = Dashboard(
    uid="agent-sandbox-gateway",
    title="Agent Sandbox / E2B gateway",
    rows=(
        (
            "Requests",
            (
                Panel(
                    "Requests by plane and code",
                    "reqps",
                    (
                        Query(
                            _rate("agent_sandbox_gateway_requests_total", "plane, code"),
                            "{{plane}} {{code}}",
                        ),
                    ),
                ),
                Panel(
                    "Latency by plane",
                    "s",
                    (
                        *(
                            Query(_quantile(q, GATEWAY_DURATION, "plane"), f"{{{{plane}}}} p{p}")
                            for q, p in ((0.5, 50), (0.99, 99))
                        ),
                    ),
                    "To the end of the response body: a streamed command counts its stream.",
                ),
                Panel(
                    "Active streams",
                    "short",
                    (
                        Query(
                            "sum by (plane) (agent_sandbox_gateway_inflight_requests)",
                            "{{plane}}",
                        ),
                    ),
                    "Requests open now; on the data plane, process output, file transfers "
                    "and WebSockets.",
                ),
                Panel(
                    "Resumes",
                    "short",
                    (
                        Query(
                            "sum by (result) "
                            f"(increase(agent_sandbox_gateway_resumes_total[{WINDOW}]))",
                            "{{result}}",
                        ),
                    ),
                    "Suspended sandboxes brought back by traffic or an E2B connect.",
                ),
                Panel(
                    "envVars not kept or not restored",
                    "short",
                    (
                        Query(
                            "sum by (operation) "
                            f"(increase(agent_sandbox_gateway_env_failures_total[{WINDOW}]))",
                            "{{operation}}",
                        ),
                    ),
                    "Creates refused (store) and resumes refused (restore) because the "
                    "gateway could not write or read a sandbox's envVars Secret.",
                ),
            ),
        ),
    ),
)

DASHBOARDS = (CLAIMS_AND_POOLS, CONTROLLERS, GATEWAY)


@dataclass(frozen=True)
class Alert:
    """One alert rule; ``for_`` is the duration its condition must hold."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str


ALERTS = (
    Alert(
        "AgentSandboxWarmPoolShort",
        "max by (namespace, warmpool) (agent_sandbox_warmpool_desired_replicas"
        " - agent_sandbox_warmpool_ready_replicas) > 0",
        "15m",
        "warning",
        "Warm pool {{ $labels.namespace }}/{{ $labels.warmpool }} stays short",
        "The pool has had fewer Ready members than it asks for during 15 minutes: claims "
        "fall back to cold starts.",
    ),
    Alert(
        "AgentSandboxClaimsNotReady",
        f"(sum(increase({CLAIM_READY}_count[15m])) or vector(0))"
        " / sum(increase(agent_sandbox_claim_creation_total[15m])) < 0.5",
        "10m",
        "critical",
        "Most SandboxClaims do not become Ready",
        "Fewer than half of the claims served in the last 15 minutes reached Ready.",
    ),
    Alert(
        "AgentSandboxReconcileErrors",
        "sum by (controller) (increase(controller_runtime_reconcile_errors_total[10m])) > 0",
        "15m",
        "warning",
        "Controller {{ $labels.controller }} keeps failing reconciles",
        "Reconciles of {{ $labels.controller }} have raised errors without a pause for 15 minutes.",
    ),
    Alert(
        "AgentSandboxNoLeader",
        f'max by (name) (leader_election_master_status{{name="{LEASE}"}}) < 1',
        "5m",
        "critical",
        "No Agent Sandbox controller replica leads",
        "Replicas run but none has held the leader Lease for 5 minutes: nothing reconciles.",
    ),
    Alert(
        "AgentSandboxGatewayEnvFailures",
        "sum by (operation) (increase(agent_sandbox_gateway_env_failures_total[10m])) > 0",
        "5m",
        "warning",
        "The gateway cannot {{ $labels.operation }} sandboxes' envVars",
        "Creates with envVars fail (store) or paused sandboxes are not resumed (restore), "
        "typically because the gateway's tenant role is not bound in their namespace.",
    ),
)


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": q.expr,
                "legendFormat": q.legend,
            }
            for i, q in enumerate(panel.queries)
        ],
    }


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    """The Grafana model of ``dashboard`` (schema 39, one Prometheus data source variable)."""
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for title, row in dashboard.rows:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        for index, panel in enumerate(row):
            panels.append(_panel_json(panel, next_id, 12 * (index % 2), y + 8 * (index // 2)))
            next_id += 1
        y += 8 * ((len(row) + 1) // 2)
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "tags": list(dashboard.tags),
        "editable": True,
        "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                }
            ]
        },
        "panels": panels,
    }


def rule_groups() -> list[dict[str, Any]]:
    """The alert rules as Prometheus rule groups."""
    return [
        {
            "name": "agent-sandbox",
            "rules": [
                {
                    "alert": a.name,
                    "expr": a.expr,
                    "for": a.for_,
                    "labels": {"severity": a.severity},
                    "annotations": {
                        "summary": a.summary,
                        "description": a.description,
                        "runbook": f"{RUNBOOKS}#{a.name.lower()}",
                    },
                }
                for a in ALERTS
            ],
        }
    ]


def outputs() -> dict[Path, str]:
    """Every generated file and its content."""
    header = "# Generated by scripts/observability.py: do not edit.\n"
    files: dict[Path, str] = {}
    for dashboard in DASHBOARDS:
        text = json.dumps(dashboard_json(dashboard), indent=2, ensure_ascii=False) + "\n"
        files[MANIFESTS / "dashboards" / f"{dashboard.uid}.json"] = text
        files[CHART_FILES / "dashboards" / f"{dashboard.uid}.json"] = text
    groups = yaml.safe_dump(rule_groups(), sort_keys=False, width=100)
    files[MANIFESTS / "alerts.rules.yaml"] = header + yaml.safe_dump(
        {"groups": rule_groups()}, sort_keys=False, width=100
    )
    files[CHART_FILES / "alerts.groups.yaml"] = header + groups
    return files


def main(argv: list[str] | None = None) -> int:
    """Generate, or with ``--check`` compare."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, content in outputs().items():
        if args.check:
            if not path.is_file() or path.read_text() != content:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    if stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        sys.stderr.write(f"stale: {names}; run python scripts/observability.py\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
