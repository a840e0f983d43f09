"""The embedding guide's example programs, run as written against the local cluster.

Each example in ``docs/examples/`` runs as its own process under a ServiceAccount bound to the
generated ``agent-sandbox-controller`` ClusterRole (plus, for the platform team's reconciler,
a ClusterRole built from the rules its plugin declares), scoped to the test's namespace with
``--namespace``. The tests create objects and wait, by watch, for what each program's
reconcilers must do; a guide whose code no longer works fails here.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.rbac import normalize_rules
from kube_agent_sandbox.testing.access import ClusterAccess, load_manifests
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess, wait_until
from kube_agent_sandbox.testing.waiting import (
    ObjectRef,
    wait_for_condition,
    wait_for_deletion,
    wait_for_object,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]
EXAMPLES = REPO / "docs" / "examples"
CORE_RBAC = REPO / "manifests" / "rbac" / "role.generated.yaml"
USAGE_ROLE = "sandbox-usage-example"


def _example(name: str) -> ModuleType:
    """Import an example file (it is not a package module) to read what it declares."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sandbox(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{c.GROUP}/{c.V1BETA1}",
        "kind": c.KIND_SANDBOX,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "agent:1"}]}}},
    }


def _start(
    runner: ControllerRunner, identity: Any, example: str, *extra: str
) -> tuple[ManagedProcess, int]:
    metrics_port, health_port = free_port(), free_port()
    argv = [
        sys.executable,
        str(EXAMPLES / f"{example}.py"),
        "--kubeconfig={kubeconfig}",
        f"--namespace={identity.namespace}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
        *extra,
    ]
    process = runner.start_command(argv, identity=identity, name=example)

    def ready() -> bool:
        url = f"http://127.0.0.1:{health_port}/readyz"
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)

    wait_until(ready, timeout=90, what=f"{example} /readyz", process=process)
    return process, metrics_port


def _stop_cleanly(process: ManagedProcess) -> None:
    process.stop(grace=40)
    assert process.returncode == 0, process.log_tail()
    assert "Traceback" not in process.log_path.read_text(), process.log_tail()


def test_own_reconciler_runs_next_to_the_sandbox_controller(
    cluster: ClusterAccess,
    controller_runner: ControllerRunner,
    namespace: str,
    agent_sandbox_crds: list[str],
) -> None:
    example = _example("embedding_own_reconciler")
    usage_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": USAGE_ROLE},
        "rules": [r.to_dict() for r in normalize_rules(example.usage_plugin.rbac_rules)],
    }
    identity = controller_runner.identity(
        "platform-operator",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller", USAGE_ROLE],
        rbac=[*load_manifests(CORE_RBAC), usage_role],
    )
    process, metrics_port = _start(controller_runner, identity, "embedding_own_reconciler")
    api = cluster.api_client()
    report = ObjectRef("v1", "ConfigMap", example.USAGE_NAME, namespace)

    cluster.apply([_sandbox("one", namespace), _sandbox("two", namespace)])
    # ours: the Sandboxes become Ready; theirs: the report counts them
    for name in ("one", "two"):
        wait_for_condition(
            api, ObjectRef(f"{c.GROUP}/{c.V1BETA1}", c.KIND_SANDBOX, name, namespace), "Ready"
        )
    counted = wait_for_object(
        api, report, lambda o: o.get("data") == {"sandboxes": "2"}, what="2 sandboxes"
    )
    assert counted["metadata"]["labels"] == {example.USAGE_LABEL: "usage"}

    cluster.kubectl("delete", "sandbox", "one", "-n", namespace, "--wait=false")
    wait_for_object(api, report, lambda o: o.get("data") == {"sandboxes": "1"}, what="1 sandbox")
    # a report deleted by hand comes back: the reconciler watches its own object too
    cluster.kubectl("delete", "configmap", example.USAGE_NAME, "-n", namespace)
    wait_for_object(api, report, lambda o: o.get("data") == {"sandboxes": "1"}, what="recreated")

    events = json.loads(
        cluster.kubectl("get", "events.events.k8s.io", "-n", namespace, "-o", "json").stdout
    )["items"]
    assert any(
        e.get("reportingController") == "sandbox-usage-controller" and e["reason"] == "Created"
        for e in events
    ), events
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as page:
        metrics = page.read().decode()
    for controller in ("sandbox", "sandbox-usage"):
        assert f'controller_runtime_reconcile_total{{controller="{controller}"' in metrics
    _stop_cleanly(process)


def test_sandbox_controller_embedded_in_another_program(
    cluster: ClusterAccess,
    controller_runner: ControllerRunner,
    namespace: str,
    agent_sandbox_crds: list[str],
) -> None:
    identity = controller_runner.identity(
        "platform-operator",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller"],
        rbac=load_manifests(CORE_RBAC),
    )
    process, _ = _start(
        controller_runner,
        identity,
        "embedding_sandbox_controller",
        f"--lease-namespace={namespace}",
    )
    api = cluster.api_client()
    lease = ObjectRef("coordination.k8s.io/v1", "Lease", c.LEADER_ELECTION_ID, namespace)
    held = wait_for_object(api, lease, lambda o: bool(o["spec"].get("holderIdentity")))
    assert held["spec"]["leaseDurationSeconds"] == 15

    cluster.apply(_sandbox("embedded", namespace))
    sandbox = ObjectRef(f"{c.GROUP}/{c.V1BETA1}", c.KIND_SANDBOX, "embedded", namespace)
    wait_for_condition(api, sandbox, "Ready")
    pod = wait_for_object(api, ObjectRef("v1", "Pod", "embedded", namespace), lambda o: True)
    assert pod["metadata"]["ownerReferences"][0]["kind"] == c.KIND_SANDBOX

    cluster.kubectl("delete", "sandbox", "embedded", "-n", namespace, "--wait=false")
    wait_for_deletion(api, sandbox, timeout=60)
    _stop_cleanly(process)
    # a clean stop hands the Lease over at once
    released = json.loads(
        cluster.kubectl("get", "lease", c.LEADER_ELECTION_ID, "-n", namespace, "-o", "json").stdout
    )
    assert released["spec"]["holderIdentity"] == ""
