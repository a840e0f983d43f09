"""Idempotent creates across gateway replicas: two gateway states on one FakeApi.

The claim of a create with an ``Idempotency-Key`` is named by a keyed hash of (tenant, key),
so the API server's ``AlreadyExists`` de-duplicates whichever replica a retry reaches.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from gateway_fakes import TENANT, Gateway, Replica, second_replica

from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS
from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.gateway.annotations import (
    ANNOTATION_IDEMPOTENCY_KEY,
    ANNOTATION_IDEMPOTENCY_REQUEST,
)
from kube_agent_sandbox.gateway.controlplane.create import idempotent_sandbox_id
from kube_agent_sandbox.gateway.controlplane.ids import is_sandbox_id
from kube_agent_sandbox.gateway.envvars import decode_env, env_secret_name

BODY: dict[str, Any] = {"templateID": "base", "timeout": 300}


async def _post(
    client: httpx.AsyncClient, gw: Gateway, key: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    return await client.post(
        "/v2/sandboxes",
        json=BODY if body is None else body,
        headers={**gw.headers(), "Idempotency-Key": key},
    )


def _claim_creates(gw: Gateway) -> int:
    return sum(1 for call in gw.api.writes(SANDBOX_CLAIMS) if call.verb == "create")


async def test_concurrent_creates_on_two_replicas_make_one_sandbox(gateway: Gateway) -> None:
    async with second_replica(gateway) as other:
        first, second = await asyncio.gather(
            _post(gateway.client, gateway, "retry-me"), _post(other.client, gateway, "retry-me")
        )
        assert first.status_code == second.status_code == 201, (first.text, second.text)
        sandbox_id = first.json()["sandboxID"]
        assert second.json()["sandboxID"] == sandbox_id
        assert first.json()["envdAccessToken"] == second.json()["envdAccessToken"]
        (claim,) = gateway.api.objects(SANDBOX_CLAIMS)
        assert claim["metadata"]["name"] == sandbox_id
        # both replicas tried: the API server's AlreadyExists decided
        assert _claim_creates(gateway) == 2
        # a later retry on either replica answers the same sandbox, writing nothing
        gateway.api.clear_calls()
        for client in (gateway.client, other.client):
            again = await _post(client, gateway, "retry-me")
            assert again.status_code == 201
            assert again.json()["sandboxID"] == sandbox_id
        assert _claim_creates(gateway) == 0


async def test_the_keyed_id_looks_like_any_sandbox_id(gateway: Gateway) -> None:
    async with second_replica(gateway) as other:
        response = await _post(other.client, gateway, "k")
    sandbox_id = response.json()["sandboxID"]
    assert is_sandbox_id(sandbox_id)
    assert sandbox_id == idempotent_sandbox_id(gateway.state, TENANT, "k")
    annotations = gateway.api.objects(SANDBOX_CLAIMS)[0]["metadata"]["annotations"]
    assert annotations[ANNOTATION_IDEMPOTENCY_KEY] == "k"
    assert len(annotations[ANNOTATION_IDEMPOTENCY_REQUEST]) == 64
    # another tenant's key of the same spelling is another sandbox
    assert idempotent_sandbox_id(gateway.state, "tenant-b", "k") != sandbox_id


async def test_different_keys_on_two_replicas_make_two_sandboxes(gateway: Gateway) -> None:
    async with second_replica(gateway) as other:
        first, second = await asyncio.gather(
            _post(gateway.client, gateway, "key-1"), _post(other.client, gateway, "key-2")
        )
    assert first.status_code == second.status_code == 201
    assert first.json()["sandboxID"] != second.json()["sandboxID"]
    assert len(gateway.api.objects(SANDBOX_CLAIMS)) == 2


async def test_the_key_makes_a_new_sandbox_after_the_kill(gateway: Gateway) -> None:
    body = {**BODY, "envVars": {"TOKEN": "old"}}
    async with second_replica(gateway) as other:
        first = await _post(gateway.client, gateway, "again", body)
        sandbox_id = first.json()["sandboxID"]
        old_uid = gateway.api.objects(SANDBOX_CLAIMS)[0]["metadata"]["uid"]
        killed = await other.client.delete(f"/sandboxes/{sandbox_id}", headers=gateway.headers())
        assert killed.status_code == 204
        await _wait_cache_gone(other, sandbox_id)
        # the FakeApi has no garbage collector: the env Secret of the gone claim is still there
        assert gateway.api.obj(SECRETS, env_secret_name(sandbox_id), TENANT) is not None
        new_body = {**BODY, "envVars": {"TOKEN": "new"}}  # the key is free: any body goes
        second = await _post(other.client, gateway, "again", new_body)
    assert second.status_code == 201, second.text
    assert second.json()["sandboxID"] == sandbox_id  # the same id, a new sandbox
    (claim,) = gateway.api.objects(SANDBOX_CLAIMS)
    assert claim["metadata"]["uid"] != old_uid
    assert second.json()["envdAccessToken"] != first.json()["envdAccessToken"]
    secret = gateway.api.obj(SECRETS, env_secret_name(sandbox_id), TENANT)
    assert secret is not None
    assert secret["metadata"]["ownerReferences"][0]["uid"] == claim["metadata"]["uid"]
    assert decode_env(secret) == {"TOKEN": "new"}


async def test_a_claim_being_deleted_is_waited_out(gateway: Gateway) -> None:
    async with second_replica(gateway) as other:
        first = await _post(gateway.client, gateway, "slow-delete")
        sandbox_id = first.json()["sandboxID"]

        def hold(obj: dict[str, Any]) -> None:
            obj["metadata"]["finalizers"] = ["test/hold"]

        gateway.api.mutate(SANDBOX_CLAIMS, sandbox_id, hold, namespace=TENANT)
        await gateway.api.delete(SANDBOX_CLAIMS, TENANT, sandbox_id)
        old_uid = gateway.api.objects(SANDBOX_CLAIMS)[0]["metadata"]["uid"]
        retry = asyncio.create_task(_post(other.client, gateway, "slow-delete"))
        await asyncio.sleep(0.3)
        assert not retry.done()
        held = gateway.api.obj(SANDBOX_CLAIMS, sandbox_id, TENANT)
        assert held is not None
        held["metadata"]["finalizers"] = []
        await gateway.api.update(SANDBOX_CLAIMS, TENANT, sandbox_id, held)
        response = await retry
    assert response.status_code == 201, response.text
    (claim,) = gateway.api.objects(SANDBOX_CLAIMS)
    assert claim["metadata"]["uid"] != old_uid


async def test_another_body_with_the_key_is_refused_on_any_replica(gateway: Gateway) -> None:
    async with second_replica(gateway) as other:
        first = await _post(gateway.client, gateway, "one-body")
        assert first.status_code == 201
        same_reordered = {"timeout": 300, "templateID": "base"}
        assert (await _post(other.client, gateway, "one-body", same_reordered)).status_code == 201
        for client in (other.client, gateway.client):
            refused = await _post(client, gateway, "one-body", {**BODY, "timeout": 60})
            assert refused.status_code == 422
            assert refused.headers["should-retry"] == "false"
            message = refused.json()["message"]
            assert "Idempotency-Key" in message
            assert "another request body" in message
    assert len(gateway.api.objects(SANDBOX_CLAIMS)) == 1


async def test_another_body_joining_an_inflight_create_is_refused(gateway: Gateway) -> None:
    """In one process the answer is the same as across replicas."""
    gateway.controller.mode = "pending"
    first = asyncio.create_task(_post(gateway.client, gateway, "inflight"))
    for _ in range(200):
        if gateway.state.creates:
            break
        await asyncio.sleep(0.01)
    refused = await _post(gateway.client, gateway, "inflight", {**BODY, "timeout": 60})
    assert refused.status_code == 422
    (claim,) = gateway.api.objects(SANDBOX_CLAIMS)
    gateway.controller.mode = "ready"
    gateway.controller.bind(claim)
    assert (await first).status_code == 201


async def _wait_cache_gone(replica: Replica, sandbox_id: str) -> None:
    for _ in range(200):
        if replica.state.index.claims.get(TENANT, sandbox_id) is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the claim never left the cache")
