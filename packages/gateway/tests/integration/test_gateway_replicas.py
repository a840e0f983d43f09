"""Idempotent creates across two gateway replicas against a real kube-apiserver (kwok).

Two gateway apps (own caches, own in-flight maps, one HMAC secret) serve the same tenant:
creates with one ``Idempotency-Key`` sent to both at once make one SandboxClaim and answer one
sandbox id; another body with the key is refused (422); after a kill the key makes a new
sandbox.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_stack import GatewayStack, start_gateway
from kubernetes import client

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.gateway import tenants
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import (
    kwok_template_spec,
    wait_warm_pool_ready,
    warm_template,
)
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_deletion

POOL_SIZE = 2
BODY: dict[str, Any] = {"templateID": "base", "timeout": 120}


@pytest.fixture
def second_gateway(
    gateway_stack: GatewayStack, controller_runner: ControllerRunner, namespace: str
) -> Iterator[GatewayStack]:
    """Another gateway replica with the first one's HMAC secret."""
    secret_file = gateway_stack.state.options.hmac_secret_file
    assert secret_file is not None
    stack = start_gateway(controller_runner, namespace=namespace, secret_file=Path(secret_file))
    try:
        yield stack
    finally:
        stack.stop()


def _claims(cluster: ClusterAccess, namespace: str) -> list[dict[str, Any]]:
    group, version = c.EXTENSIONS_API_VERSION.split("/")
    listed = client.CustomObjectsApi(cluster.api_client()).list_namespaced_custom_object(
        group, version, namespace, "sandboxclaims"
    )
    return [i for i in listed["items"] if not i["metadata"].get("deletionTimestamp")]


def _create(url: str, key: str, api_key: str, body: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.post(
        f"{url}/v2/sandboxes",
        json=BODY if body is None else body,
        headers={"X-API-KEY": api_key, "Idempotency-Key": key},
        timeout=60,
    )


def test_one_key_on_two_replicas_is_one_sandbox(
    cluster: ClusterAccess,
    namespace: str,
    gateway_stack: GatewayStack,
    second_gateway: GatewayStack,
) -> None:
    cluster.apply(
        warm_template(
            "base",
            template_spec=kwok_template_spec("e2b-base:test"),
            replicas=POOL_SIZE,
            namespace=namespace,
        )
    )
    api_key = tenants.generate_key()
    cluster.apply(tenants.key_secret(namespace, api_key, gateway_namespace=namespace))
    wait_warm_pool_ready(cluster, "base", namespace=namespace, replicas=POOL_SIZE)
    deadline = time.monotonic() + 30
    for stack in (gateway_stack, second_gateway):
        while stack.state.tenants.authenticate(api_key) is None:
            assert time.monotonic() < deadline, "a gateway never saw the API key"
            time.sleep(0.1)

    urls = [gateway_stack.url, second_gateway.url]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda u: _create(u, "replicated", api_key), urls * 2))
    assert [a.status_code for a in answers] == [201] * 4, [a.text for a in answers]
    ids = {a.json()["sandboxID"] for a in answers}
    assert len(ids) == 1
    (sandbox_id,) = ids
    claims = _claims(cluster, namespace)
    assert [cl["metadata"]["name"] for cl in claims] == [sandbox_id]
    first_uid = claims[0]["metadata"]["uid"]

    refused = _create(second_gateway.url, "replicated", api_key, {**BODY, "timeout": 60})
    assert refused.status_code == 422, refused.text
    assert refused.headers["should-retry"] == "false"

    killed = httpx.delete(
        f"{second_gateway.url}/sandboxes/{sandbox_id}", headers={"X-API-KEY": api_key}
    )
    assert killed.status_code == 204, killed.text
    ref = ObjectRef(c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_CLAIM, sandbox_id, namespace)
    wait_for_deletion(cluster.api_client(), ref, timeout=60)
    again = _create(gateway_stack.url, "replicated", api_key)
    assert again.status_code == 201, again.text
    assert again.json()["sandboxID"] == sandbox_id
    (claim,) = _claims(cluster, namespace)
    assert claim["metadata"]["uid"] != first_uid
