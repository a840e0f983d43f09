"""``agent-sandbox-controller`` as a real process, as its ServiceAccount, on the generated RBAC.

The command runs under a ServiceAccount bound only to the generated ClusterRole
(``manifests/rbac/role.generated.yaml``), so a permission missing from the generated RBAC fails
this test. It must win the upstream Lease, serve probes and metrics (with the build-info gauge),
reconcile a Sandbox into a Pod, and on SIGTERM exit 0 and release the Lease.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.controller.webhook.certs import generate_certificates, write_serving_files
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess, wait_until
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]
CLUSTER_ROLE = REPO / "manifests" / "rbac" / "role.generated.yaml"
LEASE = "a3317529.agent-sandbox.x-k8s.io"


def _http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _start(
    runner: ControllerRunner, namespace: str, tmp_path: Path, *extra: str
) -> tuple[ManagedProcess, int, int]:
    identity = runner.identity(
        "agent-sandbox-controller",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller"],
        rbac=CLUSTER_ROLE,
    )
    cert_dir = tmp_path / "certs"
    certs = generate_certificates(
        service_name="agent-sandbox-webhook-service",
        namespace=namespace,
        cluster_domain="cluster.local",
    )
    write_serving_files(cert_dir, certs)
    metrics_port, health_port = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "kube_agent_sandbox.controller",
        "--kubeconfig={kubeconfig}",
        f"-leader-election-namespace={namespace}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--health-probe-bind-address",
        f"127.0.0.1:{health_port}",
        f"--webhook-port={free_port()}",
        "--manage-webhook-certs=false",
        f"--webhook-cert-dir={cert_dir}",
        "--sandbox-concurrent-workers=4",
        *extra,
    ]
    process = runner.start_command(argv, identity=identity, name="agent-sandbox-controller")
    wait_until(
        lambda: _http(f"http://127.0.0.1:{health_port}/readyz")[0] == 200,
        timeout=90,
        what="controller /readyz",
        process=process,
    )
    return process, metrics_port, health_port


def _sandbox(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "agent", "image": "agent:latest"}]}}
        },
    }


def test_command_runs_on_generated_rbac(
    cluster: ClusterAccess, controller_runner: ControllerRunner, namespace: str, tmp_path: Path
) -> None:
    process, metrics_port, health_port = _start(controller_runner, namespace, tmp_path)

    lease = wait_for_object(
        cluster.api_client(),
        ObjectRef("coordination.k8s.io/v1", "Lease", LEASE, namespace),
        lambda o: bool((o.get("spec") or {}).get("holderIdentity")),
        timeout=60,
        what="held",
    )
    assert lease["spec"]["leaseDurationSeconds"] == 15
    assert _http(f"http://127.0.0.1:{health_port}/healthz")[0] == 200

    cluster.apply(_sandbox(namespace, "cli-sandbox"))
    pod = wait_for_object(
        cluster.api_client(),
        ObjectRef("v1", "Pod", "cli-sandbox", namespace),
        lambda o: any(
            ref.get("kind") == "Sandbox" and ref.get("controller")
            for ref in o["metadata"].get("ownerReferences", [])
        ),
        timeout=60,
        what="created by the controller",
    )
    assert pod["metadata"]["labels"]["agents.x-k8s.io/sandbox-name-hash"]

    status, metrics = _http(f"http://127.0.0.1:{metrics_port}/metrics")
    assert status == 200
    build_info = next(m for m in metrics.splitlines() if m.startswith("agent_sandbox_build_info{"))
    assert 'git_version="0.1.0"' in build_info
    assert build_info.endswith(" 1.0")
    assert 'controller_runtime_reconcile_total{controller="sandbox"' in metrics

    process.stop(grace=40)
    assert process.returncode == 0, process.log_tail()
    released = cluster.kubectl("get", "lease", LEASE, "-n", namespace, "-o", "json").stdout
    assert not json.loads(released)["spec"].get("holderIdentity")

    records = [json.loads(line) for line in process.log_path.read_text().splitlines() if line]
    assert {"level", "ts", "logger", "msg"} <= set(records[0])
    assert any(r["msg"] == "starting manager" for r in records)
    assert not [r for r in records if r["level"] == "error"], records


def test_command_without_lease_rights_cannot_lead(
    cluster: ClusterAccess, controller_runner: ControllerRunner, namespace: str, tmp_path: Path
) -> None:
    """Negative control: the same process without the ClusterRole never becomes ready."""
    identity = controller_runner.identity("no-rights", namespace=namespace)
    health_port = free_port()
    process = controller_runner.start_command(
        [
            sys.executable,
            "-m",
            "kube_agent_sandbox.controller",
            f"--leader-election-namespace={namespace}",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            "--enable-webhook=false",
        ],
        identity=identity,
        name="no-rights",
    )
    wait_until(
        lambda: (
            "leases" in process.log_path.read_text()
            and "forbidden" in process.log_path.read_text().lower()
        ),
        timeout=60,
        what="a forbidden Lease request in the log",
        process=process,
    )
    assert cluster.kubectl("get", "lease", LEASE, "-n", namespace, check=False).returncode != 0


@pytest.mark.parametrize("separate_watch", [False, True], ids=["shared-watch", "separate-watch"])
def test_command_with_three_api_connections(
    cluster: ClusterAccess,
    controller_runner: ControllerRunner,
    namespace: str,
    tmp_path: Path,
    separate_watch: bool,
) -> None:
    """--api-connections=3: requests and watches spread over three pools; Sandboxes get Ready."""
    process, _, _ = _start(
        controller_runner,
        namespace,
        tmp_path,
        "--api-connections=3",
        f"--separate-watch-connection={str(separate_watch).lower()}",
    )
    for name in ("pools-a", "pools-b", "pools-c"):
        cluster.apply(_sandbox(namespace, name))
    for name in ("pools-a", "pools-b", "pools-c"):
        wait_for_object(
            cluster.api_client(),
            ObjectRef("agents.x-k8s.io/v1beta1", "Sandbox", name, namespace),
            lambda o: any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (o.get("status") or {}).get("conditions") or ()
            ),
            timeout=90,
            what="Ready",
        )
    process.stop(grace=40)
    assert process.returncode == 0, process.log_tail()
    records = [json.loads(line) for line in process.log_path.read_text().splitlines() if line]
    sharding = [r for r in records if r["msg"].startswith("API transport sharding enabled")]
    assert sharding, records
    assert sharding[0].get("connections") == 3
    assert not [r for r in records if r["level"] == "error"], records
