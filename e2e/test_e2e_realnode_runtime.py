"""RuntimeClass on a real node: the Sandbox's runtimeClassName picks the containerd handler."""

from __future__ import annotations

import pytest
from kubernetes import client, watch

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.containerd import ALTERNATE_RUNTIME
from kube_agent_sandbox.testing.node.workload import SandboxHandle, sandbox_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def _container_id(pod: dict[str, object]) -> str:
    status = pod["status"]
    assert isinstance(status, dict)
    container_id = str(status["containerStatuses"][0]["containerID"])
    assert container_id.startswith("containerd://")
    return container_id.removeprefix("containerd://")


def test_runtime_class_name_runs_the_pod_with_the_second_handler(
    cluster: ClusterAccess, namespace: str, python_image: str, real_node_environment: object
) -> None:
    node = real_node_environment.node  # type: ignore[attr-defined]
    calls = node.runtime_calls_file(ALTERNATE_RUNTIME)
    manifest = sandbox_manifest(
        "alt",
        image=python_image,
        command=["python3", "-c", "import time; time.sleep(3600)"],
        runtime_class=ALTERNATE_RUNTIME,
    )
    handle = SandboxHandle.create(cluster.api_client(), namespace, manifest)
    handle.wait_condition("Ready")

    pod = handle.pod()
    assert pod["spec"]["runtimeClassName"] == ALTERNATE_RUNTIME
    assert _container_id(pod) in calls.read_text()


def test_the_default_handler_does_not_go_through_the_second_one(
    cluster: ClusterAccess, namespace: str, python_image: str, real_node_environment: object
) -> None:
    node = real_node_environment.node  # type: ignore[attr-defined]
    calls = node.runtime_calls_file(ALTERNATE_RUNTIME)
    manifest = sandbox_manifest(
        "default", image=python_image, command=["python3", "-c", "import time; time.sleep(3600)"]
    )
    handle = SandboxHandle.create(cluster.api_client(), namespace, manifest)
    handle.wait_condition("Ready")

    recorded = calls.read_text() if calls.exists() else ""
    assert _container_id(handle.pod()) not in recorded


def test_a_runtime_class_without_a_handler_on_the_node_never_starts_the_pod(
    cluster: ClusterAccess, namespace: str, python_image: str
) -> None:
    api = cluster.api_client()
    runtime_class = f"missing-{namespace}"[:63]
    cluster.apply(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": runtime_class},
            "handler": "no-such-handler",
        }
    )
    try:
        manifest = sandbox_manifest(
            "nohandler",
            image=python_image,
            command=["sleep", "3600"],
            runtime_class=runtime_class,
        )
        handle = SandboxHandle.create(api, namespace, manifest)

        # The kubelet asks containerd for the handler, which refuses: an event says why.
        events = watch.Watch()
        message = ""
        for event in events.stream(  # type: ignore[no-untyped-call]
            client.CoreV1Api(api).list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.name={handle.name},reason=FailedCreatePodSandBox",
            timeout_seconds=120,
        ):
            message = event["object"].message or ""
            events.stop()  # type: ignore[no-untyped-call]
        assert "no-such-handler" in message

        # The status is written asynchronously (progress before Ready within at most
        # --sandbox-status-coalesce-window): wait for the condition instead of reading once.
        sandbox = handle.wait_condition("Ready", status="False", timeout=30)
        ready = {c["type"]: c for c in sandbox["status"]["conditions"]}["Ready"]
        assert ready["status"] == "False"
        assert ready["reason"] == "DependenciesNotReady"
    finally:
        cluster.kubectl("delete", "runtimeclass", runtime_class, "--ignore-not-found")
