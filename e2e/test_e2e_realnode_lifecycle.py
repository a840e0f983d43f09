"""Sandbox lifecycle on a real node: probes, volumes across suspend/resume, pod completion."""

from __future__ import annotations

import secrets

import pytest

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.workload import SandboxHandle, ready_reason, sandbox_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

READY_FILE = "/tmp/ready"


def test_sandbox_becomes_ready_only_when_its_readiness_probe_passes(
    cluster: ClusterAccess, namespace: str, python_image: str
) -> None:
    api = cluster.api_client()
    manifest = sandbox_manifest(
        "probe",
        image=python_image,
        command=["python3", "-c", "import time; time.sleep(3600)"],
        readiness_probe={
            "exec": {"command": ["test", "-f", READY_FILE]},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    )
    sandbox = SandboxHandle.create(api, namespace, manifest)

    # The container runs, but the kubelet's probe fails: the Sandbox must not be Ready.
    running = sandbox.wait_ready_message("Pod is Running but not Ready")
    assert ready_reason(running) == "DependenciesNotReady"

    assert sandbox.exec(["touch", READY_FILE]).exit_code == 0
    ready = sandbox.wait_condition("Ready")
    assert ready_reason(ready) == "DependenciesReady"
    pod = sandbox.pod()
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    assert ready["status"]["podIPs"] == [ip["ip"] for ip in pod["status"]["podIPs"]]


def test_data_on_the_claim_survives_suspend_and_resume(
    cluster: ClusterAccess, namespace: str, python_image: str
) -> None:
    api = cluster.api_client()
    token = secrets.token_hex(8)
    manifest = sandbox_manifest(
        "keeper",
        image=python_image,
        command=["python3", "-c", "import time; time.sleep(3600)"],
        volume_size="64Mi",
    )
    sandbox = SandboxHandle.create(api, namespace, manifest)
    sandbox.wait_condition("Ready")
    first_pod_uid = sandbox.pod()["metadata"]["uid"]
    write = sandbox.exec(["sh", "-c", f"echo {token} > /data/token && sync"])
    assert write.exit_code == 0, write.stderr

    suspended = sandbox.suspend()
    assert ready_reason(suspended) == "SandboxSuspended"
    claim = cluster.kubectl(
        "-n", namespace, "get", "pvc", "data-keeper", "-o", "jsonpath={.status.phase}"
    ).stdout
    assert claim == "Bound"

    sandbox.resume()
    assert sandbox.pod()["metadata"]["uid"] != first_pod_uid
    read = sandbox.exec(["cat", "/data/token"])
    assert read.exit_code == 0, read.stderr
    assert read.stdout.strip() == token


@pytest.mark.parametrize(
    ("exit_code", "reason"), [(0, "PodSucceeded"), (1, "PodFailed")], ids=["exit-0", "exit-1"]
)
def test_a_pod_that_exits_finishes_the_sandbox(
    cluster: ClusterAccess, namespace: str, python_image: str, exit_code: int, reason: str
) -> None:
    api = cluster.api_client()
    manifest = sandbox_manifest(
        f"exits-{exit_code}",
        image=python_image,
        command=["python3", "-c", f"import sys; print('done'); sys.exit({exit_code})"],
        restart_policy="Never",
    )
    sandbox = SandboxHandle.create(api, namespace, manifest)

    finished = sandbox.wait_condition("Finished")
    conditions = {c["type"]: c for c in finished["status"]["conditions"]}
    assert conditions["Finished"]["reason"] == reason
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == reason
    pod = sandbox.pod()
    assert pod["status"]["phase"] == ("Succeeded" if exit_code == 0 else "Failed")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == exit_code
    logs = cluster.kubectl("-n", namespace, "logs", sandbox.name).stdout
    assert logs.strip() == "done"
