"""The controller as users run it: deployed by `kubectl apply -k`, webhook included."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.node.cluster import CONTROLLER_DEPLOYMENT, CONTROLLER_NAMESPACE
from kube_agent_sandbox.testing.node.workload import SandboxHandle, sandbox_manifest

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def test_controller_runs_in_the_cluster_on_the_real_node(
    cluster: ClusterAccess, real_node_environment: object
) -> None:
    pods = json.loads(
        cluster.kubectl(
            "-n", CONTROLLER_NAMESPACE, "get", "pods", "-l", f"app={CONTROLLER_DEPLOYMENT}",
            "-o", "json",
        ).stdout
    )["items"]  # fmt: skip
    assert len(pods) == 1
    pod = pods[0]
    node = real_node_environment.cluster.node  # type: ignore[attr-defined]
    assert pod["spec"]["nodeName"] == node.options.node_name
    assert pod["spec"]["serviceAccountName"] == "agent-sandbox-controller"
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    image = real_node_environment.controller.manifest_image  # type: ignore[attr-defined]
    assert pod["spec"]["containers"][0]["image"] == image


def _ready_sleeper(
    api: client.ApiClient, namespace: str, name: str, *, image: str
) -> SandboxHandle:
    """Create a Sandbox whose container sleeps for an hour and wait until it is Ready."""
    handle = SandboxHandle.create(
        api, namespace, sandbox_manifest(name, image=image, command=["sleep", "3600"])
    )
    handle.wait_condition("Ready")
    return handle


def test_conversion_webhook_serves_v1alpha1_through_its_service(
    cluster: ClusterAccess, namespace: str, python_image: str
) -> None:
    api = cluster.api_client()
    _ready_sleeper(api, namespace, "converted", image=python_image)

    # Reading through v1alpha1 makes the apiserver call the controller's /convert endpoint
    # through the webhook Service (kube-proxy routes its ClusterIP to the controller pod).
    alpha = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "agents.x-k8s.io", "v1alpha1", namespace, "sandboxes", "converted"
    )
    assert alpha["apiVersion"] == "agents.x-k8s.io/v1alpha1"
    assert alpha["spec"]["replicas"] == 1
    containers = alpha["spec"]["podTemplate"]["spec"]["containers"]
    assert containers[0]["image"] == python_image


def test_suspending_through_v1alpha1_replicas_reaches_the_controller(
    cluster: ClusterAccess, namespace: str, python_image: str
) -> None:
    api = cluster.api_client()
    handle = _ready_sleeper(api, namespace, "alpha-suspend", image=python_image)

    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "agents.x-k8s.io",
        "v1alpha1",
        namespace,
        "sandboxes",
        "alpha-suspend",
        {"spec": {"replicas": 0}},
    )
    suspended = handle.wait_condition("Suspended")
    assert suspended["spec"]["operatingMode"] == "Suspended"
