"""kwok serves pod logs through the real kube-apiserver (``pods/log``, ``kubectl logs``).

The API server finds kwok's log server by the Node's InternalIP and advertised kubelet port,
checks its certificate against the cluster CA, and relays what kwok reads from the file that
the pod's ``Logs`` object names.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.podlogs import serve_pod_log
from kube_agent_sandbox.testing.waiting import ObjectRef

pytestmark = pytest.mark.integration

LINES = [f"line {i}: the sandbox says hello" for i in range(1, 8)]


def _pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def _logs_when_served(cluster: ClusterAccess, namespace: str, pod: str, *args: str) -> str:
    """``kubectl logs`` once kwok's watch has seen the pod's Logs object (a moment at most)."""
    deadline = time.monotonic() + 30
    while True:
        result = cluster.kubectl("logs", "-n", namespace, pod, *args, check=False)
        if result.returncode == 0 or time.monotonic() > deadline:
            assert result.returncode == 0, result.stderr
            return result.stdout
        time.sleep(0.3)


def test_kubectl_logs_returns_the_configured_lines(
    kwok_pod_logs: ClusterAccess, namespace: str, tmp_path: Path
) -> None:
    cluster = kwok_pod_logs
    cluster.apply(_pod("talker", namespace))
    cluster.wait_for_condition(ObjectRef("v1", "Pod", "talker", namespace), "Ready")
    serve_pod_log(cluster, namespace, "talker", LINES, tmp_path / "talker.log")

    assert _logs_when_served(cluster, namespace, "talker").splitlines() == LINES
    assert _logs_when_served(cluster, namespace, "talker", "--tail=2").splitlines() == LINES[-2:]
    # the API the gateway's console calls, with its parameters
    api = client.CoreV1Api(cluster.api_client())
    text = api.read_namespaced_pod_log("talker", namespace, tail_lines=3, limit_bytes=65536)
    assert text.splitlines() == LINES[-3:]


def test_a_pod_without_a_log_rule_gets_kwoks_refusal(
    kwok_pod_logs: ClusterAccess, namespace: str
) -> None:
    cluster = kwok_pod_logs
    cluster.apply(_pod("silent", namespace))
    cluster.wait_for_condition(ObjectRef("v1", "Pod", "silent", namespace), "Ready")
    api = client.CoreV1Api(cluster.api_client())
    with pytest.raises(ApiException) as refused:
        api.read_namespaced_pod_log("silent", namespace)
    # kwok answered (the API server reached it), and it has no file for this pod
    assert refused.value.status == 400
    assert "no logs found" in str(refused.value.body), refused.value.body
