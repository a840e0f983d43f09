"""The deployment manifests against a real API server: kustomize builds, server-side dry run.

``kubectl apply -k manifests/ --dry-run=server`` runs every object through the API server's
admission and validation (CRDs, RBAC, Deployment, Services) without changing the cluster; the
built objects are then checked for the deployment shape of upstream v0.5.6 k8s/controller.yaml
(docs/reference/deployment.md), and the
Deployment's arguments are parsed by the controller's own flag parser.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_agent_sandbox.controller import rbacgen
from kube_agent_sandbox.controller.config import parse_args, validate
from kube_agent_sandbox.controller.rbac import normalize_manifest_rules
from kube_agent_sandbox.testing.access import ClusterAccess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]
CORE = REPO / "manifests"
EXTENSIONS = REPO / "manifests" / "overlays" / "extensions"
NAMESPACE = "agent-sandbox-system"

CORE_OBJECTS = {
    "namespace/agent-sandbox-system",
    "customresourcedefinition.apiextensions.k8s.io/sandboxes.agents.x-k8s.io",
    "customresourcedefinition.apiextensions.k8s.io/sandboxclaims.extensions.agents.x-k8s.io",
    "customresourcedefinition.apiextensions.k8s.io/sandboxtemplates.extensions.agents.x-k8s.io",
    "customresourcedefinition.apiextensions.k8s.io/sandboxwarmpools.extensions.agents.x-k8s.io",
    "customresourcedefinition.apiextensions.k8s.io/sandboxsnapshots.extensions.agents.x-k8s.io",
    "serviceaccount/agent-sandbox-controller",
    "clusterrole.rbac.authorization.k8s.io/agent-sandbox-controller",
    "clusterrolebinding.rbac.authorization.k8s.io/agent-sandbox-controller",
    "role.rbac.authorization.k8s.io/agent-sandbox-controller",
    "rolebinding.rbac.authorization.k8s.io/agent-sandbox-controller",
    "service/agent-sandbox-controller",
    "service/agent-sandbox-webhook-service",
    "deployment.apps/agent-sandbox-controller",
}
EXTENSION_OBJECTS = CORE_OBJECTS | {
    "clusterrole.rbac.authorization.k8s.io/agent-sandbox-controller-extensions",
    "clusterrolebinding.rbac.authorization.k8s.io/agent-sandbox-controller-extensions",
}


@pytest.fixture(scope="module")
def controller_namespace(cluster: ClusterAccess) -> Iterator[str]:
    """The namespace must exist for a dry run of the objects inside it (a dry-run Namespace
    creation does not persist); created for these tests when missing, then removed again."""
    phase = cluster.kubectl(
        "get", "namespace", NAMESPACE, "-o", "jsonpath={.status.phase}", check=False
    )
    if phase.returncode == 0 and phase.stdout == "Terminating":
        cluster.kubectl("wait", "--for=delete", f"namespace/{NAMESPACE}", "--timeout=120s")
    missing = phase.returncode != 0 or phase.stdout == "Terminating"
    if missing:
        cluster.kubectl("create", "namespace", NAMESPACE)
    try:
        yield NAMESPACE
    finally:
        if missing:
            cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def _build(cluster: ClusterAccess, path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    text = cluster.kubectl("kustomize", str(path)).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


@pytest.mark.usefixtures("controller_namespace")
@pytest.mark.parametrize(
    ("path", "expected"), [(CORE, CORE_OBJECTS), (EXTENSIONS, EXTENSION_OBJECTS)]
)
def test_server_side_dry_run(cluster: ClusterAccess, path: Path, expected: set[str]) -> None:
    result = cluster.kubectl("apply", "-k", str(path), "--dry-run=server", check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout
    assert {line.split(" ")[0] for line in lines} == expected


def test_deployment_shape(cluster: ClusterAccess) -> None:
    objects = _build(cluster, CORE)
    deployment = objects[("Deployment", "agent-sandbox-controller")]
    assert deployment["metadata"]["namespace"] == NAMESPACE
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["selector"]["matchLabels"] == {"app": "agent-sandbox-controller"}
    assert pod["serviceAccountName"] == "agent-sandbox-controller"
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["name"] == "agent-sandbox-controller"
    assert container["image"] == "kube-agent-sandbox-controller:0.1.0"
    assert container["args"] == ["--leader-elect=true"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "healthz": 8081, "webhook": 9443}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healthz"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "memory" in container["resources"]["limits"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    # The webhook cert dir default lives on the writable emptyDir.
    options = parse_args(container["args"])
    assert options.webhook_cert_dir.startswith("/tmp/")
    assert validate(options) == []


def test_services_and_bindings(cluster: ClusterAccess) -> None:
    objects = _build(cluster, CORE)
    metrics = objects[("Service", "agent-sandbox-controller")]["spec"]
    assert metrics["selector"] == {"app": "agent-sandbox-controller"}
    assert metrics["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    webhook = objects[("Service", "agent-sandbox-webhook-service")]["spec"]
    assert webhook["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    subject = {"kind": "ServiceAccount", "name": "agent-sandbox-controller", "namespace": NAMESPACE}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = objects[(kind, "agent-sandbox-controller")]
        assert binding["subjects"] == [subject]
        assert binding["roleRef"]["name"] == "agent-sandbox-controller"


def test_extensions_overlay_turns_extensions_on(cluster: ClusterAccess) -> None:
    objects = _build(cluster, EXTENSIONS)
    pod = objects[("Deployment", "agent-sandbox-controller")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["--leader-elect=true", "--extensions"]
    assert parse_args(container["args"]).extensions is True
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/etc/sandbox-config")
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"] == {"name": "agent-sandbox-config", "optional": True}
    binding = objects[("ClusterRoleBinding", "agent-sandbox-controller-extensions")]
    assert binding["roleRef"]["name"] == "agent-sandbox-controller-extensions"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "agent-sandbox-controller", "namespace": NAMESPACE}
    ]
    # The rules the extension controllers declare, as rbacgen wrote them.
    role = objects[("ClusterRole", "agent-sandbox-controller-extensions")]
    assert normalize_manifest_rules(role.get("rules") or []) == rbacgen.extension_rules()


def test_image_is_overridable(cluster: ClusterAccess, tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(CORE, overlay)],
                "images": [
                    {
                        "name": "kube-agent-sandbox-controller",
                        "newName": "registry.example/agent-sandbox/controller",
                        "newTag": "v9",
                    }
                ],
            }
        )
    )
    result = cluster.kubectl("kustomize", "--load-restrictor=LoadRestrictionsNone", str(overlay))
    deployment = next(
        d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Deployment"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/agent-sandbox/controller:v9"
