"""Constants and rendering helpers shared by the Helm chart tests (``test_helm_chart_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kube_agent_sandbox.controller.rbac import PolicyRule, normalize_manifest_rules
from kube_agent_sandbox.testing.helm import Helm, parse_documents

REPO = Path(__file__).resolve().parents[4]
CHART = REPO / "charts" / "agent-sandbox"
RELEASE = "agent-sandbox"
NAMESPACE = "agent-sandbox-system"
NAME = "agent-sandbox-controller"
LEASE = "a3317529.agent-sandbox.x-k8s.io"

Objects = dict[tuple[str, str], dict[str, Any]]


def render(
    helm: Helm,
    values: dict[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Objects:
    """The chart rendered by ``helm template``, by (kind, name)."""
    text = helm.template(CHART, release=release, namespace=namespace, values=values).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in parse_documents(text)}


def container(objects: Objects, name: str = NAME) -> dict[str, Any]:
    """The only container of Deployment ``name``."""
    (container,) = objects[("Deployment", name)]["spec"]["template"]["spec"]["containers"]
    return dict(container)


def rules(path: str) -> list[PolicyRule]:
    """The normalized RBAC rules of the chart file ``path``."""
    return normalize_manifest_rules(yaml.safe_load((CHART / path).read_text()))


# The documented values variants.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "extensions": {"controller": {"extensions": True}},
    # what the E2B gateway needs of the controller (docs/guides/gateway.md)
    "gateway": {"controller": {"extensions": True, "idleShutdown": True}},
    "monitoring": {
        "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
    },
    "replicas": {"replicaCount": 2},
}
