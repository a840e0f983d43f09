"""Issue 21: one tenant's credentials reach no other tenant's sandbox, through any path.

Against a real kube-apiserver (kwok), with the controllers of two tenant namespaces and the
gateway running as its ServiceAccount with the generated roles, in a namespace of its own that
holds both tenants' API keys (tenant role bound in both tenant namespaces).
Tenant A's API key, its sandbox's envd and traffic tokens and file URLs signed with them are
tried on tenant B's sandbox: the control plane, the data plane by headers and by host name,
signed file URLs, and resume on traffic (a paused sandbox of B stays paused). B's own
credentials are tried last on the same paths, so each refusal is the credential's doing.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_stack import GatewayStack, start_controllers, start_gateway

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.gateway import tenants
from kube_agent_sandbox.gateway.daemon_client import ENVD_PORT
from kube_agent_sandbox.gateway.dataplane.auth import file_signature
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import (
    kwok_template_spec,
    wait_warm_pool_ready,
    warm_template,
)
from kube_agent_sandbox.testing.plugin import namespace_name

DOMAIN = "sbx.example.test"
USER_PORT = 8000


def _wait(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result


@dataclass(frozen=True)
class Tenant:
    namespace: str
    key: str
    sandbox_id: str
    envd_token: str
    traffic_token: str


Route = Callable[[str, int], dict[str, str]]


def by_header(sandbox_id: str, port: int) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(port)}


def by_host(sandbox_id: str, port: int) -> dict[str, str]:
    return {"Host": f"{port}-{sandbox_id}.{DOMAIN}"}


@pytest.fixture
def two_tenants(
    agent_sandbox_crds: list[str],
    cluster: ClusterAccess,
    namespace: str,
    other_namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> Iterator[tuple[GatewayStack, Tenant, Tenant]]:
    """One gateway (all namespaces, ``--domain``) and a sandbox in each tenant namespace."""
    assert "sandboxclaims.extensions.agents.x-k8s.io" in agent_sandbox_crds
    root = request.config.rootpath
    gateway_namespace = namespace_name("gw-" + request.node.name)  # the runner deletes it
    for ns, name in ((namespace, "controllers-a"), (other_namespace, "controllers-b")):
        start_controllers(controller_runner, rootpath=root, namespace=ns, name=name)
    secret_file = tmp_path / "hmac"
    secret_file.write_text(secrets.token_hex(32))
    stack = start_gateway(
        controller_runner,
        namespace=gateway_namespace,
        secret_file=secret_file,
        tenants=(namespace, other_namespace),
        domain=DOMAIN,
    )
    try:
        made: list[Tenant] = []
        with httpx.Client(base_url=stack.url, timeout=90) as api:
            for ns, public in ((namespace, True), (other_namespace, False)):
                template = kwok_template_spec("e2b-base:test")
                cluster.apply(
                    warm_template("base", template_spec=template, replicas=1, namespace=ns)
                )
                key = tenants.generate_key()
                cluster.apply(tenants.key_secret(ns, key, gateway_namespace=gateway_namespace))
                wait_warm_pool_ready(cluster, "base", namespace=ns, replicas=1, what="a warm one")
                _wait(lambda k=key: stack.state.tenants.authenticate(k), "the key")  # type: ignore[misc]
                body = {
                    "templateID": "base",
                    "autoPause": True,
                    "autoResume": {"enabled": True},
                    "envVars": {"TENANT": ns},
                    "network": {"allowPublicTraffic": public},
                }
                created = api.post("/sandboxes", json=body, headers={"X-API-Key": key})
                assert created.status_code == 201, created.text
                out = created.json()
                made.append(
                    Tenant(
                        ns, key, out["sandboxID"], out["envdAccessToken"], out["trafficAccessToken"]
                    )
                )
        yield stack, made[0], made[1]
    finally:
        stack.stop()


def _sandbox(cluster: ClusterAccess, tenant: Tenant) -> dict[str, Any]:
    claim = json.loads(
        cluster.kubectl(
            "get", "sandboxclaim", tenant.sandbox_id, "-n", tenant.namespace, "-o", "json"
        ).stdout
    )
    sandbox: dict[str, Any] = json.loads(
        cluster.kubectl(
            "get",
            "sandbox",
            claim["status"]["sandbox"]["name"],
            "-n",
            tenant.namespace,
            "-o",
            "json",
        ).stdout
    )
    return sandbox


def test_one_tenants_credentials_reach_no_other_tenants_sandbox(
    cluster: ClusterAccess, two_tenants: tuple[GatewayStack, Tenant, Tenant]
) -> None:
    stack, a, b = two_tenants
    api = httpx.Client(base_url=stack.url, timeout=90)
    mine = {"X-API-Key": a.key, "Host": f"api.{DOMAIN}"}

    # control plane: B's id answers exactly like an unknown one, and nothing changes
    before = _sandbox(cluster, b)
    for method, path in (
        ("GET", "/sandboxes/{}"),
        ("POST", "/sandboxes/{}/timeout"),
        ("POST", "/sandboxes/{}/pause"),
        ("POST", "/sandboxes/{}/connect"),
        ("POST", "/v2/sandboxes/{}/connect"),
        ("GET", "/sandboxes/{}/metrics"),
        ("DELETE", "/sandboxes/{}"),
    ):
        theirs = api.request(method, path.format(b.sandbox_id), headers=mine, json={"timeout": 5})
        unknown = api.request(method, path.format("z" * 20), headers=mine, json={"timeout": 5})
        assert theirs.status_code == unknown.status_code == 404, (method, path, theirs.text)
        assert theirs.json()["message"].replace(b.sandbox_id, "z" * 20) == unknown.json()["message"]
    listed = api.get("/v2/sandboxes", headers=mine)
    assert [s["sandboxID"] for s in listed.json()] == [a.sandbox_id]
    theirs_listed = api.get("/v2/sandboxes", headers={"X-API-Key": b.key})
    assert [s["sandboxID"] for s in theirs_listed.json()] == [b.sandbox_id]
    # each key authenticates the tenant its Secret (in the gateway's namespace) names
    for tenant in (a, b):
        found = stack.state.tenants.authenticate(tenant.key)
        assert found is not None
        assert found.namespace == tenant.namespace
    after = _sandbox(cluster, b)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    # data plane, by headers and by host name: A's credentials never open B's sandbox
    a_credentials = [
        (ENVD_PORT, {"X-Access-Token": a.envd_token}),
        (ENVD_PORT, {"X-Access-Token": a.traffic_token}),
        (ENVD_PORT, {"X-API-Key": a.key}),
        (USER_PORT, {"E2b-Traffic-Access-Token": a.traffic_token}),
        (USER_PORT, {"X-Access-Token": a.envd_token}),
        (USER_PORT, {"X-API-Key": a.key}),
    ]
    routes: list[Route] = [by_header, by_host]
    for route in routes:
        for port, credentials in a_credentials:
            response = api.get(
                "/files",
                params={"path": "/etc/hostname"},
                headers={**route(b.sandbox_id, port), **credentials},
            )
            assert response.status_code == 401, (route.__name__, port, credentials)
        # signed file URLs: a signature made with A's token is no signature for B
        for operation, method in (("read", "GET"), ("write", "POST")):
            signature = file_signature("/tmp/a.txt", operation, "", a.envd_token, None)
            response = api.request(
                method,
                "/files",
                params={"path": "/tmp/a.txt", "signature": signature},
                headers=route(b.sandbox_id, ENVD_PORT),
            )
            assert response.status_code == 401, (route.__name__, operation, response.text)

    # resume on traffic: B paused by its idle policy stays paused for A's traffic
    name = after["metadata"]["name"]
    cluster.kubectl(
        "patch",
        "sandbox",
        name,
        "-n",
        b.namespace,
        "--type=merge",
        "-p",
        json.dumps(
            {
                "metadata": {"annotations": {c.ANNOTATION_SUSPENDED_BY: c.SUSPENDED_BY_IDLE}},
                "spec": {"operatingMode": c.OPERATING_MODE_SUSPENDED},
            }
        ),
    )
    _wait(
        lambda: (r := stack.state.index.lookup(b.sandbox_id)) is not None and r.suspended,
        "B's sandbox to be suspended",
    )
    paused = _sandbox(cluster, b)["metadata"]["resourceVersion"]
    for route in routes:
        for port, credentials in a_credentials:
            response = api.get(
                "/files",
                params={"path": "/x"},
                headers={**route(b.sandbox_id, port), **credentials},
            )
            assert response.status_code == 401, (route.__name__, port, response.text)
        signature = file_signature("/x", "read", "", a.envd_token, None)
        response = api.get(
            "/files",
            params={"path": "/x", "signature": signature},
            headers=route(b.sandbox_id, ENVD_PORT),
        )
        assert response.status_code == 401
    still = _sandbox(cluster, b)
    assert still["spec"]["operatingMode"] == c.OPERATING_MODE_SUSPENDED
    assert still["metadata"]["resourceVersion"] == paused
    assert stack.state.resumer.attempts == 0

    # B's own token on the same path resumes it (so the refusals above were A's credentials'),
    # with B's environment, not A's
    daemon_state = stack.sandboxd.server.config.app.state.daemon.state
    # one local daemon serves both sandboxes here: blank it as a resumed pod's would be
    daemon_state.env_vars.clear()
    daemon_state.access_token = None
    own = api.get(
        "/files",
        params={"path": "/x"},
        headers={**by_host(b.sandbox_id, ENVD_PORT), "X-Access-Token": b.envd_token},
    )
    assert own.status_code != 401, own.text
    assert stack.state.resumer.attempts == 1
    _wait(
        lambda: _sandbox(cluster, b)["spec"]["operatingMode"] == c.OPERATING_MODE_RUNNING,
        "B's sandbox to run",
    )
    _wait(lambda: daemon_state.env_vars.get("TENANT") == b.namespace, "B's environment")
    api.close()
