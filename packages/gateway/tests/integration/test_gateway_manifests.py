"""The gateway's kustomize component against a real API server: builds, dry-runs, least privilege.

``kubectl apply -k manifests/overlays/gateway --dry-run=server`` runs every object of the core
install, the extensions component and the gateway component through admission and validation
without changing the cluster. The built objects are then checked for the deployment shape
(non-root, read-only root filesystem, probes, the HMAC key Secret mounted), the Deployment's
arguments are parsed by the gateway's own flag parser, and the ClusterRole must hold exactly
the rules the gateway's code declares.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_agent_sandbox.controller.config import parse_args as parse_controller_args
from kube_agent_sandbox.controller.rbac import normalize_manifest_rules
from kube_agent_sandbox.gateway import rbacgen
from kube_agent_sandbox.gateway.cli import build_parser, options_from_args
from kube_agent_sandbox.testing.access import ClusterAccess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]
OVERLAY = REPO / "manifests" / "overlays" / "gateway"
NAMESPACE = "agent-sandbox-system"
GATEWAY_OBJECTS = {
    "serviceaccount/agent-sandbox-gateway",
    "clusterrole.rbac.authorization.k8s.io/agent-sandbox-gateway",
    "clusterrolebinding.rbac.authorization.k8s.io/agent-sandbox-gateway",
    "role.rbac.authorization.k8s.io/agent-sandbox-gateway-keys",
    "rolebinding.rbac.authorization.k8s.io/agent-sandbox-gateway-keys",
    "service/agent-sandbox-gateway",
    "deployment.apps/agent-sandbox-gateway",
}


@pytest.fixture(scope="module")
def system_namespace(cluster: ClusterAccess) -> Iterator[str]:
    """The namespace must exist for a dry run of the objects inside it; removed if created."""
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


def _build(cluster: ClusterAccess) -> dict[tuple[str, str], dict[str, Any]]:
    text = cluster.kubectl("kustomize", str(OVERLAY)).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


@pytest.mark.usefixtures("system_namespace")
def test_server_side_dry_run(cluster: ClusterAccess) -> None:
    result = cluster.kubectl("apply", "-k", str(OVERLAY), "--dry-run=server", check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout
    applied = {line.split(" ")[0] for line in lines}
    assert applied >= GATEWAY_OBJECTS
    # The controller with its extensions comes along (the gateway creates claims on pools).
    assert "clusterrole.rbac.authorization.k8s.io/agent-sandbox-controller-extensions" in applied


def test_deployment_shape_and_arguments(cluster: ClusterAccess) -> None:
    objects = _build(cluster)
    deployment = objects[("Deployment", "agent-sandbox-gateway")]
    assert deployment["metadata"]["namespace"] == NAMESPACE
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "agent-sandbox-gateway"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    assert container["image"] == "kube-agent-sandbox-gateway:0.1.0"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert "tcpSocket" in container["livenessProbe"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8080}
    # The flags parse with the gateway's own parser; the HMAC key comes from the Secret.
    args = build_parser().parse_args(container["args"])
    assert args.command == "serve"
    options = options_from_args(args)
    assert options.bind == ("0.0.0.0", 8080)
    assert options.pod_address_override is None
    assert options.gateway_namespace is None  # its pod's: where the keys Role is bound
    assert options.pod_port_map == {}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert options.hmac_secret_file is not None
    assert options.hmac_secret_file.startswith(mounts["hmac"]["mountPath"] + "/")
    assert mounts["hmac"]["readOnly"] is True
    assert volumes["hmac"]["secret"]["secretName"] == "agent-sandbox-gateway-hmac"
    assert "optional" not in volumes["hmac"]["secret"]
    assert "emptyDir" in volumes[next(n for n, m in mounts.items() if m["mountPath"] == "/tmp")]


def test_the_controller_runs_what_the_gateway_hands_it(cluster: ClusterAccess) -> None:
    """Claims on pools (--extensions) and pause-at / idle timeouts (--idle-shutdown)."""
    deployment = _build(cluster)[("Deployment", "agent-sandbox-controller")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    options = parse_controller_args(container["args"])
    assert options.extensions is True
    assert options.idle_shutdown is True


def test_service_and_least_privilege_role(cluster: ClusterAccess) -> None:
    objects = _build(cluster)
    service = objects[("Service", "agent-sandbox-gateway")]["spec"]
    assert service["selector"] == {"app": "agent-sandbox-gateway"}
    assert service["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]
    binding = objects[("ClusterRoleBinding", "agent-sandbox-gateway")]
    assert binding["roleRef"]["name"] == "agent-sandbox-gateway"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "agent-sandbox-gateway", "namespace": NAMESPACE}
    ]
    role = objects[("ClusterRole", "agent-sandbox-gateway")]
    assert normalize_manifest_rules(role["rules"]) == rbacgen.gateway_rules()
    # the API keys: list/watch of the Secrets of the gateway's own namespace, bound there
    keys = objects[("Role", "agent-sandbox-gateway-keys")]
    assert keys["metadata"]["namespace"] == NAMESPACE
    assert normalize_manifest_rules(keys["rules"]) == rbacgen.keys_rules()
    keys_binding = objects[("RoleBinding", "agent-sandbox-gateway-keys")]
    assert keys_binding["metadata"]["namespace"] == NAMESPACE
    assert keys_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "agent-sandbox-gateway-keys",
    }
    assert keys_binding["subjects"] == binding["subjects"]
    # the tenant role ships unbound: operators bind it per tenant namespace
    tenant = objects[("ClusterRole", "agent-sandbox-gateway-tenant")]
    assert normalize_manifest_rules(tenant["rules"]) == rbacgen.tenant_rules()
    assert not [
        obj
        for (kind, _), obj in objects.items()
        if kind in ("ClusterRoleBinding", "RoleBinding")
        and obj["roleRef"]["name"] == "agent-sandbox-gateway-tenant"
    ]


def test_the_gateway_cannot_do_more_than_declared(cluster: ClusterAccess) -> None:
    """The built role, bound to a ServiceAccount, asked through the API server (can-i)."""
    objects = _build(cluster)
    # Copies under a name of this test's own, so no other test's role is touched.
    name = f"agent-sandbox-gateway-can-i-{secrets.token_hex(3)}"
    role = copy.deepcopy(objects[("ClusterRole", "agent-sandbox-gateway")])
    role["metadata"]["name"] = name
    binding = copy.deepcopy(objects[("ClusterRoleBinding", "agent-sandbox-gateway")])
    binding["metadata"]["name"] = name
    binding["roleRef"]["name"] = name
    binding["subjects"][0]["name"] = name
    cluster.apply([role, binding])
    try:
        user = f"--as=system:serviceaccount:{NAMESPACE}:{name}"
        allowed = {
            ("create", "sandboxclaims.extensions.agents.x-k8s.io"),
            ("delete", "sandboxclaims.extensions.agents.x-k8s.io"),
            ("patch", "sandboxes.agents.x-k8s.io"),
            ("watch", "pods"),
            ("list", "events"),  # the web console's details
        }
        denied = {
            ("create", "sandboxes.agents.x-k8s.io"),
            ("delete", "sandboxes.agents.x-k8s.io"),
            ("create", "pods"),
            ("delete", "nodes"),
            ("create", "secrets"),
            ("get", "secrets"),
            ("list", "secrets"),  # issue 21: the API keys are read in its namespace only
            ("watch", "secrets"),
            ("update", "secrets"),
            ("delete", "secrets"),
            ("update", "sandboxwarmpools.extensions.agents.x-k8s.io"),
            ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
            ("create", "events"),
            ("delete", "events"),
        }
        for verb, resource in allowed | denied:
            answer = cluster.kubectl("auth", "can-i", verb, resource, user, "-A", check=False)
            expected = "yes" if (verb, resource) in allowed else "no"
            assert answer.stdout.strip() == expected, (verb, resource, answer.stdout)
        # the console reads a pod's log; it can never write to a pod through a subresource
        for verb, subresource, expected in (
            ("get", "log", "yes"),
            ("create", "eviction", "no"),
            ("patch", "status", "no"),
        ):
            answer = cluster.kubectl(
                "auth",
                "can-i",
                verb,
                "pods",
                f"--subresource={subresource}",
                user,
                "-A",
                check=False,
            )
            assert answer.stdout.strip() == expected, (verb, subresource, answer.stdout)
    finally:
        cluster.kubectl("delete", "clusterrolebinding", name, "--ignore-not-found")
        cluster.kubectl("delete", "clusterrole", name, "--ignore-not-found")
