"""``agent-sandbox-controller --extensions`` as users run it: one process, generated RBAC.

The command loads the extension controllers through the ``kube_agent_sandbox.extensions``
entry point, runs as a ServiceAccount bound only to the two generated ClusterRoles
(``manifests/rbac/role.generated.yaml`` and ``manifests/rbac/extensions/role.generated.yaml``),
and must serve the whole claim path: a template gets its NetworkPolicy, a pool fills, a claim
takes a warm member and is Ready, and the pool refills. A permission missing from the
generated files, or a plugin that does not register, fails here.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.testing.access import ClusterAccess, load_manifests
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import wait_until
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]
RBAC = REPO / "manifests" / "rbac"
POOL_SIZE = 3


def _ready(obj: dict[str, Any]) -> bool:
    return any(
        cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in (obj.get("status") or {}).get("conditions") or ()
    )


def _objects(namespace: str) -> list[dict[str, Any]]:
    pod = {"spec": {"containers": [{"name": "agent", "image": "agent:latest"}]}}
    return [
        {
            "apiVersion": c.EXTENSIONS_API_VERSION,
            "kind": c.KIND_SANDBOX_TEMPLATE,
            "metadata": {"name": "tpl", "namespace": namespace},
            "spec": {"podTemplate": pod},
        },
        {
            "apiVersion": c.EXTENSIONS_API_VERSION,
            "kind": c.KIND_SANDBOX_WARM_POOL,
            "metadata": {"name": "pool", "namespace": namespace},
            "spec": {"replicas": POOL_SIZE, "sandboxTemplateRef": {"name": "tpl"}},
        },
    ]


def _pool_ready(cluster: ClusterAccess, namespace: str) -> int:
    out = cluster.kubectl("get", "sandboxwarmpool", "pool", "-n", namespace, "-o", "json").stdout
    return int((json.loads(out).get("status") or {}).get("readyReplicas") or 0)


def test_extensions_command_serves_a_warm_claim(
    cluster: ClusterAccess, controller_runner: ControllerRunner, namespace: str
) -> None:
    identity = controller_runner.identity(
        "agent-sandbox-controller",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller", "agent-sandbox-controller-extensions"],
        rbac=[
            *load_manifests(RBAC / "role.generated.yaml"),
            *load_manifests(RBAC / "extensions" / "role.generated.yaml"),
        ],
    )
    metrics_port, health_port = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "kube_agent_sandbox.controller",
        "--kubeconfig={kubeconfig}",
        "--extensions",
        "--leader-elect=false",
        "--enable-webhook=false",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
    ]
    process = controller_runner.start_command(argv, identity=identity, name="extensions")

    def answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_until(
        lambda: answers(f"http://127.0.0.1:{health_port}/readyz"),
        timeout=90,
        what="controller /readyz",
        process=process,
    )
    cluster.apply(_objects(namespace))
    api = cluster.api_client()
    policy = wait_for_object(
        api,
        ObjectRef("networking.k8s.io/v1", "NetworkPolicy", "tpl-network-policy", namespace),
        lambda o: True,
        timeout=60,
        what="created for the template",
    )
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    wait_until(
        lambda: _pool_ready(cluster, namespace) == POOL_SIZE,
        timeout=120,
        what=f"pool with {POOL_SIZE} Ready members",
        process=process,
    )

    cluster.apply(
        {
            "apiVersion": c.EXTENSIONS_API_VERSION,
            "kind": c.KIND_SANDBOX_CLAIM,
            "metadata": {"name": "claim", "namespace": namespace},
            "spec": {"warmPoolRef": {"name": "pool"}},
        }
    )
    claim = wait_for_object(
        api,
        ObjectRef(c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_CLAIM, "claim", namespace),
        _ready,
        timeout=60,
        what="Ready",
    )
    served = claim["status"]["sandbox"]["name"]
    assert served.startswith("pool-"), f"claim was not served warm: {served}"
    sandbox = json.loads(
        cluster.kubectl("get", "sandbox", served, "-n", namespace, "-o", "json").stdout
    )
    labels = sandbox["metadata"]["labels"]
    assert labels[c.LABEL_LAUNCH_TYPE] == c.LAUNCH_TYPE_WARM
    assert c.LABEL_WARM_POOL_SANDBOX not in labels
    [owner] = sandbox["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == (c.KIND_SANDBOX_CLAIM, "claim")
    wait_until(
        lambda: _pool_ready(cluster, namespace) == POOL_SIZE,
        timeout=120,
        what="the pool refilled after the adoption",
        process=process,
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as page:
        metrics = page.read().decode()
    assert "agent_sandbox_claim_creation_total{" in metrics
    assert 'launch_type="warm"' in metrics
    for controller in ("sandboxtemplate", "sandboxwarmpool", "sandboxclaim"):
        assert f'controller="{controller}"' in metrics, controller

    process.stop(grace=40)
    assert process.returncode == 0, process.log_tail()
    records = [json.loads(line) for line in process.log_path.read_text().splitlines() if line]
    assert not [r for r in records if r["level"] == "error"], records
