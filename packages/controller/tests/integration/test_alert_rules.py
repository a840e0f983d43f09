"""The shipped alert rules, evaluated by Prometheus' own rule engine (``promtool test rules``).

For each alert, series that provoke it: it must not fire before its ``for:`` duration, must
fire once (one alert, the expected labels and rendered annotations) after it, and must stay
silent on healthy series. The rules file is the shipped one (manifests/observability), not a
copy; promtool is built from Prometheus' Go module (``testenv -- --with-prometheus``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.plugin import unavailable

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]
RULES = REPO / "manifests" / "observability" / "alerts.rules.yaml"
LEASE = 'name="a3317529.agent-sandbox.x-k8s.io"'
READY_COUNT = 'agent_sandbox_claim_controller_startup_latency_ms_count{launch_type="cold"}'


def _promtool() -> Path:
    promtool = versions.bin_dir() / "promtool"
    if not promtool.is_file():
        unavailable(f"{promtool} missing: nox -s testenv -- --with-prometheus")
    return promtool


def _rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"]}


def _minutes(duration: str) -> int:
    match = re.fullmatch(r"(\d+)m", duration)
    assert match, f"for: {duration} is not in whole minutes"
    return int(match[1])


def _rendered(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    def render(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], text)

    return {k: render(v) for k, v in rule["annotations"].items()}


# alert -> (series that provoke it, labels of the alert, series of a healthy system)
CASES: dict[str, tuple[list[dict[str, str]], dict[str, str], list[dict[str, str]]]] = {
    "AgentSandboxWarmPoolShort": (
        [
            {
                "series": 'agent_sandbox_warmpool_desired_replicas{namespace="ns",warmpool="p"}',
                "values": "3x60",
            },
            {
                "series": 'agent_sandbox_warmpool_ready_replicas{namespace="ns",warmpool="p"}',
                "values": "1x60",
            },
        ],
        {"namespace": "ns", "warmpool": "p"},
        [
            {
                "series": 'agent_sandbox_warmpool_desired_replicas{namespace="ns",warmpool="p"}',
                "values": "3x60",
            },
            {
                "series": 'agent_sandbox_warmpool_ready_replicas{namespace="ns",warmpool="p"}',
                "values": "3x60",
            },
        ],
    ),
    "AgentSandboxClaimsNotReady": (
        # Two claims a minute served, none Ready: the latency histogram has no series at all.
        [
            {
                "series": 'agent_sandbox_claim_creation_total{namespace="ns",launch_type="cold"}',
                "values": "0+2x60",
            }
        ],
        {},
        [
            {
                "series": 'agent_sandbox_claim_creation_total{namespace="ns",launch_type="cold"}',
                "values": "0+2x60",
            },
            {
                "series": READY_COUNT,
                "values": "0+2x60",
            },
        ],
    ),
    "AgentSandboxReconcileErrors": (
        [
            {
                "series": 'controller_runtime_reconcile_errors_total{controller="sandbox"}',
                "values": "0+3x60",
            }
        ],
        {"controller": "sandbox"},
        [
            {
                "series": 'controller_runtime_reconcile_errors_total{controller="sandbox"}',
                "values": "0x60",
            }
        ],
    ),
    "AgentSandboxGatewayEnvFailures": (
        [
            {
                "series": 'agent_sandbox_gateway_env_failures_total{operation="restore"}',
                "values": "0+1x60",
            }
        ],
        {"operation": "restore"},
        [
            {
                "series": 'agent_sandbox_gateway_env_failures_total{operation="restore"}',
                "values": "0x60",
            }
        ],
    ),
    "AgentSandboxNoLeader": (
        [
            {"series": f'leader_election_master_status{{{LEASE},pod="a"}}', "values": "0x60"},
            {"series": f'leader_election_master_status{{{LEASE},pod="b"}}', "values": "0x60"},
        ],
        {"name": "a3317529.agent-sandbox.x-k8s.io"},
        [
            {"series": f'leader_election_master_status{{{LEASE},pod="a"}}', "values": "1x60"},
            {"series": f'leader_election_master_status{{{LEASE},pod="b"}}', "values": "0x60"},
        ],
    ),
}


def test_every_shipped_alert_has_a_case() -> None:
    assert sorted(_rules()) == sorted(CASES)


def test_the_rules_file_is_valid() -> None:
    result = subprocess.run(
        [str(_promtool()), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(CASES)} rules found" in result.stdout


@pytest.mark.parametrize("alert", sorted(CASES))
def test_the_alert_fires_once_after_its_duration_and_not_when_healthy(
    alert: str, tmp_path: Path
) -> None:
    promtool = _promtool()
    rule = _rules()[alert]
    provoke, labels, healthy = CASES[alert]
    hold = _minutes(rule["for"])
    expected = {**labels, **rule["labels"]}
    fired = {"exp_labels": expected, "exp_annotations": _rendered(rule, expected)}
    # The first minutes give rate() and increase() their two samples.
    tests = [
        {
            "interval": "1m",
            "input_series": provoke,
            "alert_rule_test": [
                {"eval_time": f"{hold - 1}m", "alertname": alert, "exp_alerts": []},
                {"eval_time": f"{hold + 5}m", "alertname": alert, "exp_alerts": [fired]},
            ],
        },
        {
            "interval": "1m",
            "input_series": healthy,
            "alert_rule_test": [
                {"eval_time": f"{hold + 5}m", "alertname": alert, "exp_alerts": []},
            ],
        },
    ]
    spec = tmp_path / "test.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests})
    )
    result = subprocess.run(
        [str(promtool), "test", "rules", str(spec)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
