"""The controller installed with `helm install` (charts/agent-sandbox), once per session.

The suite deploys the controller with ``kubectl apply -k manifests/`` (conftest). This module
installs the chart as a second release into its own namespace and release name
(``sandbox-helm`` in ``agent-sandbox-helm``, so its ClusterRoles and bindings are
``sandbox-helm-agent-sandbox-controller*`` and never meet the kustomize ones). Two controllers
would both reconcile every Sandbox (their Leases live in different namespaces) and both point
the CRDs' conversion webhook at themselves, so the kustomize Deployment is scaled to zero while
the release runs and scaled back afterwards; on start it patches the CRDs back to its own
webhook Service. The chart's CRDs already exist, so helm leaves them alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kube_agent_sandbox.controller.webhook.check import dry_run_params, probe_sandbox
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.helm import Helm, find_helm
from kube_agent_sandbox.testing.node.cluster import CONTROLLER_DEPLOYMENT, CONTROLLER_NAMESPACE
from kube_agent_sandbox.testing.node.workload import SandboxHandle, sandbox_manifest
from kube_agent_sandbox.testing.plugin import unavailable

# Set-up stops one controller and installs another: more than the default 300 s allowed.
pytestmark = [pytest.mark.e2e, pytest.mark.realnode, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[1]
CHART = REPO_ROOT / "charts" / "agent-sandbox"
RELEASE = "sandbox-helm"
RELEASE_NAMESPACE = "agent-sandbox-helm"
NAME = f"{RELEASE}-agent-sandbox-controller"
TIMEOUT = 180


@dataclass
class Release:
    """The installed release: its Deployment, and how conversion did right after install."""

    deployment: dict[str, Any]
    #: The error of one v1alpha1 dry-run create sent as soon as ``helm install`` returned
    #: (None: converted). No retry: a user's first request gets none either.
    conversion_error: str | None


def _convert_once(cluster: ClusterAccess) -> str | None:
    """One request the API server answers only through the conversion webhook."""
    try:
        client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(
            "agents.x-k8s.io", "v1alpha1", RELEASE_NAMESPACE, "sandboxes", probe_sandbox(),
            dry_run=dry_run_params()["dryRun"],
        )  # fmt: skip
    except client.ApiException as err:
        return f"{err.status}: {err.body}"
    return None


def _scale_kustomize_controller(cluster: ClusterAccess, replicas: int) -> None:
    cluster.kubectl(
        "-n", CONTROLLER_NAMESPACE, "scale", f"deployment/{CONTROLLER_DEPLOYMENT}",
        f"--replicas={replicas}",
    )  # fmt: skip
    if replicas == 0:
        # Wait until no pod of it is left (its Lease is released on a clean stop).
        pods = client.CoreV1Api(cluster.api_client())
        deadline = time.monotonic() + TIMEOUT
        while pods.list_namespaced_pod(
            CONTROLLER_NAMESPACE, label_selector=f"app={CONTROLLER_DEPLOYMENT}"
        ).items:
            assert time.monotonic() < deadline, "the kustomize controller did not stop"
            time.sleep(1)
    else:
        cluster.kubectl(
            "-n", CONTROLLER_NAMESPACE, "rollout", "status",
            f"deployment/{CONTROLLER_DEPLOYMENT}", f"--timeout={TIMEOUT}s",
            timeout=TIMEOUT + 30,
        )  # fmt: skip


@pytest.fixture(scope="module")
def helm_release(
    cluster: ClusterAccess,
    real_node_environment: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Release]:
    """The chart installed with default values (image: the one the suite imported)."""
    binary = find_helm()
    if binary is None:
        unavailable("helm not found: run `nox -s testenv -- --only helm`")
    helm = Helm(binary, state_dir=tmp_path_factory.mktemp("helm"), kubeconfig=cluster.kubeconfig)
    image: str = real_node_environment.controller.manifest_image
    repository, _, tag = image.rpartition(":")
    _scale_kustomize_controller(cluster, 0)
    try:
        helm.install(
            CHART,
            release=RELEASE,
            namespace=RELEASE_NAMESPACE,
            values={"image": {"repository": repository, "tag": tag}},
            timeout=TIMEOUT,
        )
        conversion_error = _convert_once(cluster)
        deployment = json.loads(
            cluster.kubectl("-n", RELEASE_NAMESPACE, "get", "deployment", NAME, "-o", "json").stdout
        )
        yield Release(deployment, conversion_error)
    finally:
        helm.run("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", check=False)
        cluster.kubectl(
            "delete", "namespace", RELEASE_NAMESPACE, "--ignore-not-found",
            f"--timeout={TIMEOUT}s", check=False, timeout=TIMEOUT + 30,
        )  # fmt: skip
        _scale_kustomize_controller(cluster, 1)


def test_helm_release_becomes_available(cluster: ClusterAccess, helm_release: Release) -> None:
    deployment = helm_release.deployment
    conditions = {c["type"]: c["status"] for c in deployment["status"]["conditions"]}
    assert conditions["Available"] == "True"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    assert f"--webhook-namespace={RELEASE_NAMESPACE}" in container["args"]
    lease = json.loads(
        cluster.kubectl(
            "-n", RELEASE_NAMESPACE, "get", "lease", "a3317529.agent-sandbox.x-k8s.io",
            "-o", "json",
        ).stdout
    )  # fmt: skip
    assert lease["spec"]["holderIdentity"]


def test_conversion_works_as_soon_as_helm_install_returns(
    cluster: ClusterAccess, helm_release: Release
) -> None:
    """The chart's post-install hook holds `helm install` until the API server converts.

    Without it, `helm install --wait` returned once the controller Pod was Ready, and a
    conversion right after could still fail (CI: "dial tcp <ClusterIP>:443: connect: connection
    refused"): the Service's endpoints and kube-proxy's rules follow the Pod's readiness.
    """
    assert helm_release.conversion_error is None
    # The hook's objects are deleted once it succeeded.
    left = cluster.kubectl(
        "-n", RELEASE_NAMESPACE, "get", "job,serviceaccount,role,rolebinding",
        "-l", "app.kubernetes.io/component=conversion-check", "-o", "name",
    ).stdout  # fmt: skip
    assert left.strip() == ""


def test_helm_release_reconciles_a_sandbox_and_serves_conversion(
    cluster: ClusterAccess,
    helm_release: Release,
    namespace: str,
    python_image: str,
) -> None:
    api = cluster.api_client()
    handle = SandboxHandle.create(
        api, namespace, sandbox_manifest("from-helm", image=python_image, command=["sleep", "3600"])
    )
    handle.wait_condition("Ready")
    # The release's controller pointed the CRDs' conversion webhook at its own Service.
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(
        "sandboxes.agents.x-k8s.io"
    )
    service = crd.spec.conversion.webhook.client_config.service
    assert (service.namespace, service.name) == (RELEASE_NAMESPACE, "agent-sandbox-webhook-service")
    alpha = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "agents.x-k8s.io", "v1alpha1", namespace, "sandboxes", "from-helm"
    )
    assert alpha["apiVersion"] == "agents.x-k8s.io/v1alpha1"
