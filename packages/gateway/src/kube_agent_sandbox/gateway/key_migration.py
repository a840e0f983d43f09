"""API keys of the old layout: finding them, and moving them into the gateway's namespace.

Before issue 21's narrowing, a key's hash lived in a Secret of its tenant namespace labelled
:data:`~.annotations.LABEL_API_KEY`, and the gateway listed Secrets in every namespace to find
them. It now reads only its own namespace, so such keys stop authenticating until
``agent-sandbox-gateway keys migrate`` (run by someone who may list Secrets cluster-wide)
copies each into the gateway's namespace with the tenant label. The copies carry no
``LABEL_API_KEY``, so a gateway of the old version (which would refuse a key stored in two
namespaces) never sees them: migrate first, upgrade, then ``keys migrate --delete-old``.

At startup the gateway says when keys may be left behind (:func:`check_legacy_keys`): exactly
when it may still list them (its old ClusterRole still bound), else by the namespaces holding
its sandboxes that no key of its namespace grants.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj
from kube_agent_sandbox.gateway.annotations import LABEL_API_KEY, LABEL_API_KEY_TENANT
from kube_agent_sandbox.gateway.tenants import (
    hash_secret,
    key_id,
    key_tenant,
    secret_name,
    stored_hash,
)

logger = logging.getLogger(__name__)

LEGACY_SELECTOR: Final = f"{LABEL_API_KEY}=true"
COPIED: Final = "copied"
ALREADY: Final = "already migrated"
SKIPPED: Final = "skipped"


@dataclass(frozen=True, slots=True)
class Moved:
    """What ``keys migrate`` did with one Secret of the old layout.

    Attributes:
        source: ``namespace/name`` of the old Secret (its namespace is the tenant).
        key_id: the key's public id ("" when the Secret holds no valid hash).
        outcome: :data:`COPIED`, :data:`ALREADY` or :data:`SKIPPED`.
        detail: why it was skipped, or "" .
        deleted: whether the old Secret was deleted (or, in the gateway's own namespace,
            lost its old label).
    """

    source: str
    key_id: str
    outcome: str
    detail: str = ""
    deleted: bool = False


@dataclass
class Migration:
    """Every old-layout Secret found, and what became of it."""

    moved: list[Moved] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every key now authenticates through the gateway's namespace."""
        return all(m.outcome != SKIPPED for m in self.moved)


async def migrate_keys(api: Client, *, gateway_namespace: str, delete_old: bool) -> Migration:
    """Copy every key of the old layout into ``gateway_namespace`` (idempotent).

    Args:
        api: a client that may list Secrets in every namespace and create them (and, with
            ``delete_old``, delete them) in the gateway's.
        gateway_namespace: where the gateway reads its keys.
        delete_old: delete the old Secrets once their copy exists (after the upgrade).

    Raises:
        ApiError: the API server refused (e.g. 403: no cluster-wide list of Secrets).
    """
    page = await api.list(SECRETS, None, label_selector=LEGACY_SELECTOR)
    result = Migration()
    items = sorted(page.get("items") or [], key=_source)
    for secret in items:
        result.moved.append(await _migrate_one(api, secret, gateway_namespace, delete_old))
    return result


def _source(secret: Obj) -> str:
    meta = secret.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


async def _migrate_one(api: Client, secret: Obj, gateway_namespace: str, delete_old: bool) -> Moved:
    meta = secret.get("metadata") or {}
    tenant, name = meta.get("namespace", ""), meta.get("name", "")
    digest = stored_hash(secret)
    if digest is None:
        return Moved(_source(secret), "", SKIPPED, "holds no valid key hash")
    ident = key_id(digest)
    if tenant == gateway_namespace and name == secret_name(digest):
        # the copy would be this very Secret: label it in place
        labels: dict[str, str | None] = {LABEL_API_KEY_TENANT: tenant}
        if delete_old:
            labels[LABEL_API_KEY] = None
        await api.patch(SECRETS, tenant, name, {"metadata": {"labels": labels}})
        already = key_tenant(secret) == tenant
        return Moved(_source(secret), ident, ALREADY if already else COPIED, deleted=delete_old)
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(_PREFIX)
    }
    body = hash_secret(tenant, digest, gateway_namespace, annotations)
    outcome = COPIED
    try:
        await api.create(SECRETS, gateway_namespace, body)
    except ApiError as exc:
        if not exc.already_exists:
            raise
        existing = await api.get(SECRETS, gateway_namespace, secret_name(digest))
        if stored_hash(existing) != digest or key_tenant(existing) != tenant:
            detail = (
                f"{gateway_namespace}/{secret_name(digest)} exists and holds another key or"
                " grants another namespace: left as it is"
            )
            return Moved(_source(secret), ident, SKIPPED, detail)
        outcome = ALREADY
    if delete_old:
        try:
            await api.delete(SECRETS, tenant, name)
        except ApiError as exc:
            if not exc.not_found:
                raise
    return Moved(_source(secret), ident, outcome, deleted=delete_old)


_PREFIX: Final = LABEL_API_KEY.rsplit("/", 1)[0] + "/"
"""The key annotations (name, creation time) are the project's: copied; others are not."""


@dataclass(frozen=True, slots=True)
class LegacyCheck:
    """What the gateway found at startup about keys of the old layout.

    Attributes:
        legacy: namespace -> count of old-layout key Secrets there; None when the gateway may
            not list Secrets cluster-wide (the intended setup), so it could not look.
        keyless: namespaces holding the gateway's sandboxes that no key of its namespace
            grants (their keys may still be stored the old way).
    """

    legacy: dict[str, int] | None
    keyless: tuple[str, ...]


async def check_legacy_keys(
    api: Client, *, keys: Iterable[Obj], sandbox_namespaces: Iterable[str]
) -> LegacyCheck:
    """Look for keys the gateway no longer reads (see the module's description).

    Args:
        api: the gateway's client.
        keys: the key Secrets of the gateway's namespace (its cache).
        sandbox_namespaces: the namespaces of the gateway's SandboxClaims.
    """
    read = {(key_tenant(s), stored_hash(s)) for s in keys}
    legacy: dict[str, int] | None = None
    try:
        page = await api.list(SECRETS, None, label_selector=LEGACY_SELECTOR)
    except ApiError as exc:
        if exc.status != 403:
            raise
    else:
        legacy = {}
        for item in page.get("items") or []:
            namespace = (item.get("metadata") or {}).get("namespace", "")
            if (namespace, stored_hash(item)) not in read:  # else migrated, not deleted yet
                legacy[namespace] = legacy.get(namespace, 0) + 1
    granted = {tenant for tenant, _ in read if tenant is not None}
    keyless = tuple(sorted(set(sandbox_namespaces) - granted))
    return LegacyCheck(legacy=legacy, keyless=keyless)
