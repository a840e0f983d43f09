"""Issue 21 against a real kube-apiserver with real RBAC: the gateway's Secret rights per tenant.

The gateway runs as its ServiceAccount bound only to the generated roles: ``agent-sandbox-gateway``
cluster-wide (no ``get``/``create`` on Secrets) and ``agent-sandbox-gateway-tenant`` by a
RoleBinding in its tenant namespaces, as ``agent-sandbox-gateway keys create`` makes it.

* Without the binding, a create with ``envVars`` fails with an error that names the fix and
  leaves no sandbox; a create without them works; a resume (connect, or traffic) of a sandbox
  whose environment is unreadable fails loudly and leaves it paused; ``keys bind`` repairs it.
* ``keys create`` binds the tenant role (a tenant namespace's admin may), idempotently, and
  refuses a binding of that name to another role; it stores the key in the gateway's
  namespace, so it also takes the right to create Secrets there (the operator's).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway_stack import GatewayStack

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.gateway import cli, tenant_rbac, tenants
from kube_agent_sandbox.gateway.daemon_client import ENVD_PORT
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import (
    gateway_identity,
    kwok_template_spec,
    wait_warm_pool_ready,
    warm_template,
)
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_condition

GATEWAY_SA = "agent-sandbox-gateway"


def wait_until(check: Any, what: str, timeout: float = 60) -> Any:
    """Poll ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result


def gateway_may(cluster: ClusterAccess, verb: str, namespace: str, sa_namespace: str) -> bool:
    """What the API server's authorizer answers for the gateway's ``verb`` on Secrets."""
    done = cluster.kubectl(
        "auth",
        "can-i",
        verb,
        "secrets",
        "-n",
        namespace,
        f"--as=system:serviceaccount:{sa_namespace}:{GATEWAY_SA}",
        check=False,
    )
    return done.stdout.strip() == "yes"


def add_key(cluster: ClusterAccess, stack: GatewayStack, namespace: str) -> str:
    key = tenants.generate_key()
    cluster.apply(tenants.key_secret(namespace, key, gateway_namespace=namespace))
    wait_until(lambda: stack.state.tenants.authenticate(key), "the gateway to see the key")
    return key


def env_failures(stack: GatewayStack, operation: str) -> float:
    value = stack.state.metrics.registry.get_sample_value(
        "agent_sandbox_gateway_env_failures_total", {"operation": operation}
    )
    return value or 0.0


def claim_names(cluster: ClusterAccess, namespace: str) -> set[str]:
    out = cluster.kubectl("get", "sandboxclaims", "-n", namespace, "-o", "name").stdout
    return {line.rsplit("/", 1)[1] for line in out.split()}


def sandbox_of(cluster: ClusterAccess, namespace: str, sandbox_id: str) -> dict[str, Any]:
    claim = json.loads(
        cluster.kubectl("get", "sandboxclaim", sandbox_id, "-n", namespace, "-o", "json").stdout
    )
    name = claim["status"]["sandbox"]["name"]
    sandbox: dict[str, Any] = json.loads(
        cluster.kubectl("get", "sandbox", name, "-n", namespace, "-o", "json").stdout
    )
    return sandbox


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``agent-sandbox-gateway`` as an operator runs it (its own process)."""
    return subprocess.run(
        ["agent-sandbox-gateway", *argv], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def api(gateway_stack: GatewayStack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway_stack.url, timeout=90) as client:
        yield client


def test_env_vars_need_the_tenant_role_and_are_never_lost(
    cluster: ClusterAccess,
    namespace: str,
    gateway_stack: GatewayStack,
    api: httpx.Client,
) -> None:
    cluster.apply(
        warm_template(
            "base",
            template_spec=kwok_template_spec("e2b-base:test"),
            replicas=2,
            namespace=namespace,
        )
    )
    key = add_key(cluster, gateway_stack, namespace)
    auth = {"X-API-Key": key}
    wait_warm_pool_ready(cluster, "base", namespace=namespace, replicas=2, what="2 warm sandboxes")
    with_env = {
        "templateID": "base",
        "envVars": {"GREETING": "hello"},
        "autoPause": True,
        "autoResume": {"enabled": True},
    }
    created = api.post("/sandboxes", json=with_env, headers=auth)
    assert created.status_code == 201, created.text
    sid, envd_token = created.json()["sandboxID"], created.json()["envdAccessToken"]

    # the operator never bound the tenant role here (an install upgraded without `keys bind`)
    cluster.kubectl("delete", "rolebinding", tenant_rbac.BINDING_NAME, "-n", namespace)
    wait_until(lambda: not gateway_may(cluster, "create", namespace, namespace), "the unbinding")

    # 1. a create with envVars fails, saying how to fix it, and leaves no sandbox behind
    refused = api.post("/sandboxes", json=with_env, headers=auth)
    assert refused.status_code == 500, refused.text
    message = refused.json()["message"]
    assert "cannot keep the sandbox's envVars" in message
    assert f"agent-sandbox-gateway keys bind --namespace {namespace}" in message
    assert "the sandbox was deleted" in message
    wait_until(lambda: claim_names(cluster, namespace) == {sid}, "the refused claim to go")
    assert env_failures(gateway_stack, "store") == 1
    # 2. without envVars nothing needs a Secret right
    plain = api.post("/sandboxes", json={"templateID": "base"}, headers=auth)
    assert plain.status_code == 201, plain.text

    # 3. a resume of the env sandbox fails loudly and leaves it paused
    assert api.post(f"/sandboxes/{sid}/pause", headers=auth).status_code == 204
    name = sandbox_of(cluster, namespace, sid)["metadata"]["name"]
    sandbox_ref = ObjectRef(c.SANDBOX_API_VERSION, c.KIND_SANDBOX, name, namespace)
    wait_for_condition(cluster.api_client(), sandbox_ref, c.CONDITION_SUSPENDED, timeout=60)
    connect = api.post(f"/sandboxes/{sid}/connect", json={"timeout": 60}, headers=auth)
    assert connect.status_code == 500, connect.text
    assert "its envVars cannot be restored" in connect.json()["message"]
    assert f"keys bind --namespace {namespace}" in connect.json()["message"]
    assert sandbox_of(cluster, namespace, sid)["spec"]["operatingMode"] == "Suspended"
    assert env_failures(gateway_stack, "restore") == 1
    # ... and so does traffic, when the idle policy paused it (resume on traffic)
    cluster.kubectl(
        "annotate",
        "sandbox",
        name,
        "-n",
        namespace,
        "--overwrite",
        f"{c.ANNOTATION_SUSPENDED_BY}={c.SUSPENDED_BY_IDLE}",
    )
    wait_until(
        lambda: (
            (record := gateway_stack.state.index.lookup(sid)) is not None
            and record.sandbox is not None
            and record.sandbox["metadata"]["annotations"].get(c.ANNOTATION_SUSPENDED_BY)
            == c.SUSPENDED_BY_IDLE
        ),
        "the gateway to see the idle suspend",
    )
    envd = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(ENVD_PORT), "X-Access-Token": envd_token}
    traffic = api.get("/files", params={"path": "/tmp/x"}, headers=envd)
    assert traffic.status_code == 500, traffic.text  # not 503 "retry": retrying cannot help
    assert "its envVars cannot be restored" in traffic.json()["message"]
    assert traffic.headers.get("should-retry") != "true"
    assert sandbox_of(cluster, namespace, sid)["spec"]["operatingMode"] == "Suspended"
    assert env_failures(gateway_stack, "restore") == 2

    # 4. `keys bind` (what `keys create` does too) repairs it: the resumed pod gets its env
    bound = run_cli(
        "keys",
        "bind",
        "--namespace",
        namespace,
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--gateway-namespace",
        namespace,
    )
    assert bound.returncode == 0, bound.stderr
    wait_until(lambda: gateway_may(cluster, "get", namespace, namespace), "the binding")
    daemon_state = gateway_stack.sandboxd.server.config.app.state.daemon.state
    daemon_state.env_vars.clear()  # the resumed pod's daemon starts blank
    resumed = api.post(f"/sandboxes/{sid}/connect", json={"timeout": 60}, headers=auth)
    assert resumed.status_code == 201, resumed.text
    assert daemon_state.env_vars.get("GREETING") == "hello"
    assert env_failures(gateway_stack, "restore") == 2


def _binding(cluster: ClusterAccess, namespace: str) -> dict[str, Any]:
    done = cluster.kubectl(
        "get", "rolebinding", tenant_rbac.BINDING_NAME, "-n", namespace, "-o", "json"
    )
    binding: dict[str, Any] = json.loads(done.stdout)
    return binding


def test_keys_create_binds_the_tenant_role_and_stores_the_key_with_the_gateway(
    cluster: ClusterAccess,
    namespace: str,
    other_namespace: str,
    controller_runner: ControllerRunner,
) -> None:
    # the gateway's roles exist (installed); it is a tenant of no namespace yet
    gateway_identity(controller_runner, namespace=namespace, tenants=())
    tenant_admin = controller_runner.identity("tenant-admin", namespace=other_namespace)
    controller_runner.bind_in_namespace(tenant_admin, "admin", other_namespace)
    # the operator: admin of the tenant namespace and of the gateway's (where keys are)
    admin = controller_runner.identity("operator", namespace=other_namespace)
    controller_runner.bind_in_namespace(admin, "admin", other_namespace)
    controller_runner.bind_in_namespace(admin, "admin", namespace)
    viewer = controller_runner.identity("tenant-viewer", namespace=other_namespace)
    controller_runner.bind_in_namespace(viewer, "view", other_namespace)
    common = ("--namespace", other_namespace, "--gateway-namespace", namespace)

    # a user who may not bind gets a clear refusal and no key (binding comes first)
    denied = run_cli("keys", "create", *common, "--kubeconfig", str(viewer.kubeconfig))
    assert denied.returncode == 1
    assert "forbidden" in denied.stderr
    assert not denied.stdout
    assert not gateway_may(cluster, "create", other_namespace, namespace)

    # the tenant's admin may bind (it holds every right the tenant role grants there) but not
    # write a key into the gateway's namespace: a tenant cannot mint keys by itself
    bound_only = run_cli("keys", "create", *common, "--kubeconfig", str(tenant_admin.kubeconfig))
    assert bound_only.returncode == 1
    assert "forbidden" in bound_only.stderr
    assert not bound_only.stdout
    wait_until(lambda: gateway_may(cluster, "create", other_namespace, namespace), "the binding")
    listed = run_cli(
        "keys", "list", "--gateway-namespace", namespace, "--kubeconfig", str(cluster.kubeconfig)
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == ""

    # the operator may (and the binding made above is kept: idempotent)
    keys = []
    for _ in range(2):  # idempotent
        made = run_cli("keys", "create", *common, "--kubeconfig", str(admin.kubeconfig))
        assert made.returncode == 0, made.stderr
        keys.append(made.stdout.strip())
    assert all(tenants.is_valid_key(k) for k in keys)
    assert keys[0] != keys[1]
    # both stored in the gateway's namespace, granting the tenant; listed by tenant
    listed = run_cli(*("keys", "list", *common), "--kubeconfig", str(admin.kubeconfig))
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert sorted(row[0] for row in rows) == sorted(
        tenants.key_id(tenants.hash_key(k)) for k in keys
    )
    assert {row[1] for row in rows} == {other_namespace}
    for key in keys:
        secret = json.loads(
            cluster.kubectl(
                "get",
                "secret",
                tenants.secret_name(tenants.hash_key(key)),
                "-n",
                namespace,
                "-o",
                "json",
            ).stdout
        )
        assert tenants.key_tenant(secret) == other_namespace
    binding = _binding(cluster, other_namespace)
    assert binding["roleRef"]["name"] == "agent-sandbox-gateway-tenant"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": GATEWAY_SA, "namespace": namespace}
    ]
    wait_until(lambda: gateway_may(cluster, "create", other_namespace, namespace), "the binding")
    assert gateway_may(cluster, "get", other_namespace, namespace)
    # still nothing more than the tenant role there, nothing in other namespaces
    assert not gateway_may(cluster, "delete", other_namespace, namespace)
    assert not gateway_may(cluster, "get", "default", namespace)

    # a second gateway (another ServiceAccount) is added to the same binding
    second = run_cli(
        "keys",
        "bind",
        *common,
        "--gateway-service-account",
        "gateway-b",
        "--kubeconfig",
        str(admin.kubeconfig),
    )
    assert second.returncode == 0, second.stderr
    assert [s["name"] for s in _binding(cluster, other_namespace)["subjects"]] == [
        GATEWAY_SA,
        "gateway-b",
    ]

    # a binding of that name to another role is refused, never overwritten
    cluster.kubectl("delete", "rolebinding", tenant_rbac.BINDING_NAME, "-n", other_namespace)
    cluster.kubectl(
        "create",
        "rolebinding",
        tenant_rbac.BINDING_NAME,
        "-n",
        other_namespace,
        "--clusterrole=view",
        f"--serviceaccount={namespace}:{GATEWAY_SA}",
    )
    clash = run_cli("keys", "create", *common, "--kubeconfig", str(admin.kubeconfig))
    assert clash.returncode == 1
    assert "refers to ClusterRole view" in clash.stderr
    assert not clash.stdout
    assert _binding(cluster, other_namespace)["roleRef"]["name"] == "view"
    # --no-bind: the operator binds the gateway's rights some other way
    unbound = run_cli("keys", "create", *common, "--no-bind", "--kubeconfig", str(admin.kubeconfig))
    assert unbound.returncode == 0, unbound.stderr
    assert tenants.is_valid_key(unbound.stdout.strip())


def test_cli_refuses_bad_arguments() -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["keys", "bind"])
    assert exited.value.code == 2
