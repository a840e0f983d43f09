"""Issue 21 against a real kube-apiserver with only the generated roles: the API keys live in
the gateway's own namespace, and the gateway reads Secrets nowhere else.

* The gateway's ServiceAccount may not list, watch or get Secrets cluster-wide (asked as the
  gateway itself, a SelfSubjectAccessReview, and tried), nor list them in a tenant namespace;
  it may list and watch them in its own namespace only.
* A key stored the old way (in its tenant namespace) no longer authenticates, and the gateway
  says so at startup (log and metric) and on each use; ``keys migrate`` makes it work again
  and ``--delete-old`` removes the old Secret.
"""

from __future__ import annotations

import logging
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_stack import start_gateway

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.gateway import tenants
from kube_agent_sandbox.gateway.annotations import LABEL_API_KEY, LABEL_GATEWAY_SANDBOX
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import gateway_identity
from kube_agent_sandbox.testing.plugin import namespace_name


def can_i(cluster: ClusterAccess, kubeconfig: Path, verb: str, *scope: str) -> bool:
    """The API server's answer to the gateway asking about itself (SelfSubjectAccessReview)."""
    done = cluster.kubectl(
        "auth", "can-i", verb, "secrets", *scope, f"--kubeconfig={kubeconfig}", check=False
    )
    return done.stdout.strip() == "yes"


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["agent-sandbox-gateway", *argv], capture_output=True, text=True, timeout=60, check=False
    )


def wait_until(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result


def test_the_gateway_reads_secrets_only_in_its_own_namespace(
    cluster: ClusterAccess,
    namespace: str,
    other_namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
) -> None:
    own = namespace_name("gw-" + request.node.name)
    gateway = gateway_identity(controller_runner, namespace=own, tenants=(namespace,))
    kubeconfig = gateway.kubeconfig
    for verb in ("list", "watch", "get", "create"):
        assert not can_i(cluster, kubeconfig, verb, "--all-namespaces"), verb
        assert not can_i(cluster, kubeconfig, verb, "-n", other_namespace), verb  # no tenant
    # a tenant namespace: get and create of its sandboxes' env Secrets, no list
    assert not can_i(cluster, kubeconfig, "list", "-n", namespace)
    assert not can_i(cluster, kubeconfig, "watch", "-n", namespace)
    assert can_i(cluster, kubeconfig, "get", "-n", namespace)
    # its own namespace: list and watch (the key informer), nothing else
    assert can_i(cluster, kubeconfig, "list", "-n", own)
    assert can_i(cluster, kubeconfig, "watch", "-n", own)
    for verb in ("get", "create", "delete", "update"):
        assert not can_i(cluster, kubeconfig, verb, "-n", own), verb
    # and a real cluster-wide list is refused
    listed = cluster.kubectl(
        "get", "secrets", "--all-namespaces", f"--kubeconfig={kubeconfig}", check=False
    )
    assert listed.returncode != 0
    assert "forbidden" in listed.stderr.lower()


def old_layout_key(namespace: str, key: str) -> dict[str, Any]:
    """A key Secret as versions before the move stored it: in its tenant namespace."""
    secret = tenants.key_secret(namespace, key, gateway_namespace=namespace)
    secret["metadata"]["labels"] = {LABEL_API_KEY: "true"}
    return secret


def test_old_keys_are_reported_then_migrated(
    cluster: ClusterAccess,
    agent_sandbox_crds: list[str],
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert "sandboxclaims.extensions.agents.x-k8s.io" in agent_sandbox_crds
    own = namespace_name("gw-" + request.node.name)
    key = tenants.generate_key()
    ident = tenants.key_id(tenants.hash_key(key))
    old = old_layout_key(namespace, key)
    cluster.apply(old)
    # a sandbox the gateway made there before the upgrade (its claim: no controller needed)
    cluster.apply(
        {
            "apiVersion": c.EXTENSIONS_API_VERSION,
            "kind": c.KIND_SANDBOX_CLAIM,
            "metadata": {
                "name": "before-upgrade",
                "namespace": namespace,
                "labels": {LABEL_GATEWAY_SANDBOX: "true"},
            },
            "spec": {"warmPoolRef": {"name": "none"}},
        }
    )
    secret_file = tmp_path / "hmac"
    secret_file.write_text(secrets.token_hex(32))
    caplog.set_level(logging.WARNING, logger="kube_agent_sandbox.gateway.state")
    stack = start_gateway(
        controller_runner, namespace=own, secret_file=secret_file, tenants=(namespace,)
    )
    try:
        registry = stack.state.metrics.registry
        # startup: the namespace with sandboxes and no key is named, with the fix
        assert registry.get_sample_value("agent_sandbox_gateway_keyless_tenant_namespaces") == 1
        assert registry.get_sample_value("agent_sandbox_gateway_legacy_api_keys") == 0
        startup = [
            r.getMessage() for r in caplog.records if "hold this gateway's" in r.getMessage()
        ]
        assert len(startup) == 1
        assert namespace in startup[0]
        assert f"keys migrate --gateway-namespace {own}" in startup[0]
        cluster.kubectl("delete", "sandboxclaim", "before-upgrade", "-n", namespace)

        with httpx.Client(base_url=stack.url, timeout=30) as api:
            auth = {"X-API-Key": key}
            assert api.get("/v2/sandboxes", headers=auth).status_code == 401
            unknown = "agent_sandbox_gateway_unknown_api_keys_total"
            assert registry.get_sample_value(unknown) == 1
            assert any(
                f"unknown API key {ident}" in r.getMessage() and "keys migrate" in r.getMessage()
                for r in caplog.records
            )

            # the operator migrates: the key works again, the old Secret stays for old gateways
            admin = ("--gateway-namespace", own, "--kubeconfig", str(cluster.kubeconfig))
            migrated = run_cli("keys", "migrate", *admin)
            assert migrated.returncode == 0, migrated.stderr
            source = f"{namespace}/{old['metadata']['name']}"
            assert f"{source}\t{ident}\tcopied\n" in migrated.stdout
            wait_until(lambda: stack.state.tenants.authenticate(key), "the migrated key")
            listed = api.get("/v2/sandboxes", headers=auth)
            assert listed.status_code == 200, listed.text
            assert (
                cluster.kubectl(
                    "get", "secret", old["metadata"]["name"], "-n", namespace, check=False
                ).returncode
                == 0
            )
            listed_keys = run_cli("keys", "list", *admin)
            assert listed_keys.stdout.startswith(f"{ident}\t{namespace}\t")

            # after the upgrade: --delete-old removes the old Secret; the key still works
            cleaned = run_cli("keys", "migrate", "--delete-old", *admin)
            assert cleaned.returncode == 0, cleaned.stderr
            assert f"{source}\t{ident}\talready migrated\told Secret deleted" in cleaned.stdout
            gone = cluster.kubectl(
                "get", "secret", old["metadata"]["name"], "-n", namespace, check=False
            )
            assert "NotFound" in gone.stderr
            assert api.get("/v2/sandboxes", headers=auth).status_code == 200
            again = run_cli("keys", "migrate", *admin)
            assert again.stdout == "no API keys stored the old way\n"
    finally:
        stack.stop()
