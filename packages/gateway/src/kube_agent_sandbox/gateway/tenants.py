"""API keys and tenants: a key maps to the tenant namespace its Secret's label names.

A key is ``e2b_`` + 40 lowercase hex digits (accepted by every E2B SDK's client-side check).
Only its SHA-256 is stored, in a Secret of the gateway's own namespace labelled
:data:`LABEL_API_KEY_TENANT` with the tenant namespace it grants; the key itself is shown
once, when created, and never logged. Revoking a key deletes its Secret. The gateway caches
the labelled Secrets of its namespace with an informer (its Role there: no Secret right in
any other namespace) and looks a presented key up by its hash.

Keys of the old layout (issue 21: the Secret in the tenant namespace, labelled
:data:`~.annotations.LABEL_API_KEY`) are not read any more: :mod:`.key_migration` copies them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import Client, Obj, Reader
from kube_agent_sandbox.gateway.annotations import (
    ANNOTATION_API_KEY_CREATED,
    ANNOTATION_API_KEY_NAME,
    LABEL_API_KEY_TENANT,
)

logger = logging.getLogger(__name__)

KEY_PREFIX: Final = "e2b_"
KEY_HEX_DIGITS: Final = 40
KEY_PATTERN: Final = re.compile(r"^e2b_[0-9a-f]{40}$")
SECRET_NAME_PREFIX: Final = "gateway-api-key-"
HASH_FIELD: Final = "sha256"
KEY_HASH_INDEX: Final = "gateway-api-key-sha256"
KEY_ID_LENGTH: Final = 12
NAMESPACE_PATTERN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Tenant:
    """Who a request acts for.

    Attributes:
        namespace: the tenant namespace: every sandbox of the tenant lives there.
        key_id: the key's public id (first hex digits of its hash), for audit logs.
    """

    namespace: str
    key_id: str


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """An API key as listed (never the key itself).

    Attributes:
        key_id: public id (first 12 hex digits of the key's SHA-256).
        namespace: tenant namespace.
        name: optional human-readable name.
        created_at: RFC 3339 creation time, or "".
    """

    key_id: str
    namespace: str
    name: str
    created_at: str


def generate_key() -> str:
    """A fresh API key: ``e2b_`` + 40 lowercase hex digits from the OS's CSPRNG."""
    return KEY_PREFIX + secrets.token_hex(KEY_HEX_DIGITS // 2)


def is_valid_key(key: str) -> bool:
    """Whether ``key`` has the gateway's key format."""
    return KEY_PATTERN.fullmatch(key) is not None


def hash_key(key: str) -> str:
    """The stored form of a key: lowercase hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(key.encode()).hexdigest()


def key_id(key_hash: str) -> str:
    """The public id of a key (a prefix of its hash; safe to log)."""
    return key_hash[:KEY_ID_LENGTH]


def secret_name(key_hash: str) -> str:
    """The name of the Secret storing a key's hash."""
    return SECRET_NAME_PREFIX + key_id(key_hash)


def is_namespace_name(name: str) -> bool:
    """Whether ``name`` can be a namespace's name (an RFC 1123 label)."""
    return NAMESPACE_PATTERN.fullmatch(name) is not None


def key_secret(
    tenant: str,
    key: str,
    *,
    gateway_namespace: str,
    name: str = "",
    now: datetime | None = None,
) -> Obj:
    """The Secret manifest storing ``key``'s hash, granting ``tenant``, in the gateway's namespace.

    Raises:
        ValueError: if ``key`` has the wrong format or a namespace name is not one.
    """
    if not is_valid_key(key):
        raise ValueError("an API key is e2b_ followed by 40 lowercase hex digits")
    created = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    annotations = {ANNOTATION_API_KEY_CREATED: created}
    if name:
        annotations[ANNOTATION_API_KEY_NAME] = name
    return hash_secret(tenant, hash_key(key), gateway_namespace, annotations)


def hash_secret(
    tenant: str, digest: str, gateway_namespace: str, annotations: dict[str, str]
) -> Obj:
    """The Secret of a key's hash ``digest`` granting ``tenant`` (also what ``keys migrate``
    writes for a key of the old layout).

    Raises:
        ValueError: if a namespace name is not one.
    """
    for what, value in (("tenant", tenant), ("gateway", gateway_namespace)):
        if not is_namespace_name(value):
            raise ValueError(f"{what} namespace {value!r} is not a valid namespace name")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name(digest),
            "namespace": gateway_namespace,
            "labels": {LABEL_API_KEY_TENANT: tenant},
            "annotations": dict(annotations),
        },
        "data": {HASH_FIELD: base64.b64encode(digest.encode()).decode()},
    }


def key_tenant(secret: Obj) -> str | None:
    """The tenant namespace an API-key Secret grants, or None when its label names none."""
    tenant = ((secret.get("metadata") or {}).get("labels") or {}).get(LABEL_API_KEY_TENANT)
    return tenant if isinstance(tenant, str) and is_namespace_name(tenant) else None


def stored_hash(secret: Obj) -> str | None:
    """The key hash a labelled Secret stores, or None when it holds none (or garbage)."""
    encoded = (secret.get("data") or {}).get(HASH_FIELD)
    if not isinstance(encoded, str):
        return None
    try:
        digest = base64.b64decode(encoded, validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        return None
    if re.fullmatch(r"[0-9a-f]{64}", digest) is None:
        return None
    return digest


def key_hash_index(secret: Obj) -> Iterable[str]:
    """Informer index function: the key hash of an API-key Secret."""
    digest = stored_hash(secret)
    return [digest] if digest is not None else []


def key_info(secret: Obj) -> KeyInfo | None:
    """How an API-key Secret is listed, or None when it holds no valid hash or tenant."""
    digest = stored_hash(secret)
    tenant = key_tenant(secret)
    if digest is None or tenant is None:
        return None
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    return KeyInfo(
        key_id=key_id(digest),
        namespace=tenant,
        name=annotations.get(ANNOTATION_API_KEY_NAME, ""),
        created_at=annotations.get(ANNOTATION_API_KEY_CREATED, ""),
    )


UnknownKey = Callable[[str], None]
"""Told the id of each well-formed key that matches no Secret (for logs and metrics)."""


class Tenants:
    """Authenticates API keys against the cached key Secrets.

    Args:
        secrets_cache: a Reader of the key Secrets of the gateway's namespace with the
            :data:`KEY_HASH_INDEX` index (see :func:`key_hash_index`).
        only_namespace: the one tenant namespace served (``serve --namespace``): keys of
            other tenants are refused; every tenant when None.
        on_unknown: called with the key id of a well-formed key no Secret holds.
    """

    def __init__(
        self,
        secrets_cache: Reader,
        *,
        only_namespace: str | None = None,
        on_unknown: UnknownKey | None = None,
    ) -> None:
        self._secrets = secrets_cache
        self._only = only_namespace
        self._on_unknown = on_unknown

    def authenticate(self, key: str | None) -> Tenant | None:
        """The tenant of ``key``, or None for a missing, malformed or unknown key.

        Two Secrets of one key granting different namespaces make the key ambiguous: refused.
        """
        if not key or not is_valid_key(key):
            return None
        digest = hash_key(key)
        found = [
            s
            for s in self._secrets.by_index(KEY_HASH_INDEX, digest)
            if not (s.get("metadata") or {}).get("deletionTimestamp")
        ]
        granted = {key_tenant(s) for s in found} - {None}
        if len(granted) != 1:
            if len(granted) > 1:
                logger.warning("API key %s grants several namespaces: refused", key_id(digest))
            elif self._on_unknown is not None:
                self._on_unknown(key_id(digest))
            return None
        tenant = granted.pop()
        if tenant is None or (self._only is not None and tenant != self._only):
            return None
        return Tenant(namespace=tenant, key_id=key_id(digest))


async def create_key(
    api: Client, tenant: str, *, gateway_namespace: str, name: str = ""
) -> tuple[str, KeyInfo]:
    """Create a key for ``tenant`` in the gateway's namespace; returns the key (show it once)
    and its listing.

    Raises:
        ValueError: a namespace name is not one.
    """
    key = generate_key()
    body = key_secret(tenant, key, gateway_namespace=gateway_namespace, name=name)
    secret = await api.create(SECRETS, gateway_namespace, body)
    info = key_info(secret)
    if info is None:  # pragma: no cover - the API server returns what we sent
        raise RuntimeError("the created Secret holds no key hash")
    return key, info


async def list_keys(
    api: Client, *, gateway_namespace: str, tenant: str | None = None
) -> list[KeyInfo]:
    """The keys (ids, tenants, names, creation times; never keys), of ``tenant`` or all."""
    selector = LABEL_API_KEY_TENANT + (f"={tenant}" if tenant is not None else "")
    page = await api.list(SECRETS, gateway_namespace, label_selector=selector)
    infos = [key_info(item) for item in page.get("items") or []]
    return sorted(
        (i for i in infos if i is not None), key=lambda i: (i.namespace, i.created_at, i.key_id)
    )


async def revoke_key(
    api: Client, key_or_id: str, *, gateway_namespace: str, tenant: str | None = None
) -> bool:
    """Delete the Secret of a key, named by the key itself or by its id; False if absent
    (or, with ``tenant``, granting another namespace).

    Raises:
        ValueError: if ``key_or_id`` is neither a key nor a 12-hex-digit id.
    """
    if is_valid_key(key_or_id):
        ident = key_id(hash_key(key_or_id))
    elif re.fullmatch(r"[0-9a-f]{12}", key_or_id):
        ident = key_or_id
    else:
        raise ValueError("give the key itself or its 12-hex-digit id")
    for info in await list_keys(api, gateway_namespace=gateway_namespace, tenant=tenant):
        if info.key_id == ident:
            await api.delete(SECRETS, gateway_namespace, SECRET_NAME_PREFIX + ident)
            return True
    return False
