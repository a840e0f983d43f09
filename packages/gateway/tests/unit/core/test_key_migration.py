"""Keys of the old layout (in tenant namespaces): ``keys migrate`` and the startup check."""

from __future__ import annotations

import base64
from typing import Any

from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import ApiError, FakeApi
from kube_agent_sandbox.gateway import key_migration, tenants
from kube_agent_sandbox.gateway.annotations import (
    ANNOTATION_API_KEY_CREATED,
    ANNOTATION_API_KEY_NAME,
    LABEL_API_KEY,
    LABEL_API_KEY_TENANT,
)

GW = "gateway-system"


def legacy_secret(namespace: str, key: str, *, name: str = "") -> dict[str, Any]:
    """A key Secret as versions before the move wrote it: in its tenant namespace."""
    digest = tenants.hash_key(key)
    annotations = {ANNOTATION_API_KEY_CREATED: "2026-01-02T03:04:05Z", "other.io/x": "y"}
    if name:
        annotations[ANNOTATION_API_KEY_NAME] = name
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name or tenants.secret_name(digest),
            "namespace": namespace,
            "labels": {LABEL_API_KEY: "true"},
            "annotations": annotations,
        },
        "data": {"sha256": base64.b64encode(digest.encode()).decode()},
    }


class GatewayNamespaceKeys:
    """What the gateway's informer holds: the labelled key Secrets of its namespace only."""

    def __init__(self, api: FakeApi) -> None:
        self._secrets = [
            s
            for s in api.objects(SECRETS)
            if s["metadata"]["namespace"] == GW and LABEL_API_KEY_TENANT in s["metadata"]["labels"]
        ]

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        assert index == tenants.KEY_HASH_INDEX
        return [s for s in self._secrets if value in tenants.key_hash_index(s)]


def authenticator(api: FakeApi) -> tenants.Tenants:
    return tenants.Tenants(GatewayNamespaceKeys(api))  # type: ignore[arg-type]


async def test_migrate_copies_old_keys_and_keeps_them_until_told() -> None:
    api = FakeApi()
    key_a, key_b, own = tenants.generate_key(), tenants.generate_key(), tenants.generate_key()
    api.add(SECRETS, legacy_secret("team-a", key_a, name="laptop-key"))
    api.add(SECRETS, legacy_secret("team-b", key_b))
    api.add(SECRETS, legacy_secret(GW, own))  # the gateway's namespace was a tenant too
    broken = legacy_secret("team-b", tenants.generate_key(), name="broken")
    broken["data"]["sha256"] = "!!"
    api.add(SECRETS, broken)
    assert authenticator(api).authenticate(key_a) is None  # not read where it is

    done = await key_migration.migrate_keys(api, gateway_namespace=GW, delete_old=False)
    outcomes = {(m.source, m.outcome) for m in done.moved}
    assert outcomes == {
        ("team-a/laptop-key", key_migration.COPIED),
        (f"team-b/{tenants.secret_name(tenants.hash_key(key_b))}", key_migration.COPIED),
        (f"{GW}/{tenants.secret_name(tenants.hash_key(own))}", key_migration.COPIED),
        ("team-b/broken", key_migration.SKIPPED),
    }
    assert not done.ok  # one Secret holds no key: the command fails, naming it
    auth = authenticator(api)
    for key, tenant in ((key_a, "team-a"), (key_b, "team-b"), (own, GW)):
        found = auth.authenticate(key)
        assert found is not None
        assert found.namespace == tenant
    copy = api.obj(SECRETS, tenants.secret_name(tenants.hash_key(key_a)), GW)
    assert copy is not None
    # the copy keeps the key's name and date, not foreign annotations, and has no old label
    assert copy["metadata"]["annotations"] == {
        ANNOTATION_API_KEY_CREATED: "2026-01-02T03:04:05Z",
        ANNOTATION_API_KEY_NAME: "laptop-key",
    }
    assert copy["metadata"]["labels"] == {LABEL_API_KEY_TENANT: "team-a"}
    assert api.obj(SECRETS, "laptop-key", "team-a") is not None  # old gateways still read it

    again = await key_migration.migrate_keys(api, gateway_namespace=GW, delete_old=True)
    assert {m.source: m.outcome for m in again.moved if m.key_id} == {
        "team-a/laptop-key": key_migration.ALREADY,
        f"team-b/{tenants.secret_name(tenants.hash_key(key_b))}": key_migration.ALREADY,
        f"{GW}/{tenants.secret_name(tenants.hash_key(own))}": key_migration.ALREADY,
    }
    assert api.obj(SECRETS, "laptop-key", "team-a") is None
    assert api.obj(SECRETS, tenants.secret_name(tenants.hash_key(key_b)), "team-b") is None
    in_place = api.obj(SECRETS, tenants.secret_name(tenants.hash_key(own)), GW)
    assert in_place is not None
    assert in_place["metadata"]["labels"] == {LABEL_API_KEY_TENANT: GW}
    assert authenticator(api).authenticate(own) is not None
    assert api.obj(SECRETS, "broken", "team-b") is not None  # skipped: never deleted


async def test_migrate_never_overwrites_a_secret_of_another_key() -> None:
    api = FakeApi()
    key = tenants.generate_key()
    api.add(SECRETS, legacy_secret("team-a", key))
    clash = tenants.key_secret("team-z", key, gateway_namespace=GW)  # same name, other tenant
    api.add(SECRETS, clash)
    done = await key_migration.migrate_keys(api, gateway_namespace=GW, delete_old=True)
    [moved] = done.moved
    assert moved.outcome == key_migration.SKIPPED
    assert "grants another namespace" in moved.detail
    assert not done.ok
    kept = api.obj(SECRETS, tenants.secret_name(tenants.hash_key(key)), GW)
    assert kept is not None
    assert tenants.key_tenant(kept) == "team-z"
    assert api.obj(SECRETS, tenants.secret_name(tenants.hash_key(key)), "team-a") is not None


async def test_startup_check_counts_unmigrated_keys_when_it_may_look() -> None:
    api = FakeApi()
    moved, left = tenants.generate_key(), tenants.generate_key()
    api.add(SECRETS, legacy_secret("team-a", moved))
    api.add(SECRETS, legacy_secret("team-b", left))
    copy = tenants.key_secret("team-a", moved, gateway_namespace=GW)
    found = await key_migration.check_legacy_keys(
        api, keys=[copy], sandbox_namespaces={"team-a", "team-b", "team-c"}
    )
    assert found.legacy == {"team-b": 1}  # team-a's is migrated (not deleted yet)
    assert found.keyless == ("team-b", "team-c")


async def test_startup_check_without_the_right_to_look() -> None:
    api = FakeApi()
    api.fail("list", "secrets", ApiError(403, "Forbidden", "secrets is forbidden"))
    copy = tenants.key_secret("team-a", tenants.generate_key(), gateway_namespace=GW)
    found = await key_migration.check_legacy_keys(
        api, keys=[copy], sandbox_namespaces={"team-a", "team-b"}
    )
    assert found.legacy is None
    assert found.keyless == ("team-b",)
