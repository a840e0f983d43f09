"""API keys and tenants: a key maps to the namespace its hash is stored in.

A key is ``e2b_`` + 40 lowercase hex digits (accepted by every E2B SDK's client-side check).
Only its SHA-256 is stored, in a Secret labelled :data:`LABEL_API_KEY` in the tenant
namespace; the key itself is shown once, when created, and never logged. Revoking a key
deletes its Secret. The gateway caches the labelled Secrets with an informer and looks a
presented key up by its hash.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import Client, Obj, Reader
from kube_agent_sandbox.gateway.annotations import (
    ANNOTATION_API_KEY_CREATED,
    ANNOTATION_API_KEY_NAME,
    LABEL_API_KEY,
)

logger = logging.getLogger(__name__)

KEY_PREFIX: Final = "e2b_"
KEY_HEX_DIGITS: Final = 40
KEY_PATTERN: Final = re.compile(r"^e2b_[0-9a-f]{40}$")
SECRET_NAME_PREFIX: Final = "gateway-api-key-"
HASH_FIELD: Final = "sha256"
KEY_HASH_INDEX: Final = "gateway-api-key-sha256"
KEY_ID_LENGTH: Final = 12


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


def key_secret(namespace: str, key: str, *, name: str = "", now: datetime | None = None) -> Obj:
    """The Secret manifest storing ``key``'s hash in ``namespace``.

    Raises:
        ValueError: if ``key`` has the wrong format.
    """
    if not is_valid_key(key):
        raise ValueError("an API key is e2b_ followed by 40 lowercase hex digits")
    digest = hash_key(key)
    created = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    annotations = {ANNOTATION_API_KEY_CREATED: created}
    if name:
        annotations[ANNOTATION_API_KEY_NAME] = name
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name(digest),
            "namespace": namespace,
            "labels": {LABEL_API_KEY: "true"},
            "annotations": annotations,
        },
        "data": {HASH_FIELD: base64.b64encode(digest.encode()).decode()},
    }


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
    """How an API-key Secret is listed, or None when it holds no valid hash."""
    digest = stored_hash(secret)
    if digest is None:
        return None
    meta = secret.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return KeyInfo(
        key_id=key_id(digest),
        namespace=meta.get("namespace", ""),
        name=annotations.get(ANNOTATION_API_KEY_NAME, ""),
        created_at=annotations.get(ANNOTATION_API_KEY_CREATED, ""),
    )


class Tenants:
    """Authenticates API keys against the cached key Secrets.

    Args:
        secrets_cache: a Reader of the labelled Secrets with the :data:`KEY_HASH_INDEX`
            index (see :func:`key_hash_index`).
    """

    def __init__(self, secrets_cache: Reader) -> None:
        self._secrets = secrets_cache

    def authenticate(self, key: str | None) -> Tenant | None:
        """The tenant of ``key``, or None for a missing, malformed or unknown key.

        Two Secrets of one key in different namespaces make the key ambiguous: refused.
        """
        if not key or not is_valid_key(key):
            return None
        digest = hash_key(key)
        found = [
            s
            for s in self._secrets.by_index(KEY_HASH_INDEX, digest)
            if not (s.get("metadata") or {}).get("deletionTimestamp")
        ]
        namespaces = {(s.get("metadata") or {}).get("namespace", "") for s in found}
        if len(namespaces) != 1:
            if len(namespaces) > 1:
                logger.warning("API key %s is in several namespaces: refused", key_id(digest))
            return None
        return Tenant(namespace=namespaces.pop(), key_id=key_id(digest))


async def create_key(api: Client, namespace: str, *, name: str = "") -> tuple[str, KeyInfo]:
    """Create a key for ``namespace``; returns the key (show it once) and its listing."""
    key = generate_key()
    secret = await api.create(SECRETS, namespace, key_secret(namespace, key, name=name))
    info = key_info(secret)
    if info is None:  # pragma: no cover - the API server returns what we sent
        raise RuntimeError("the created Secret holds no key hash")
    return key, info


async def list_keys(api: Client, namespace: str) -> list[KeyInfo]:
    """The keys of ``namespace`` (ids, names, creation times; never keys)."""
    page = await api.list(SECRETS, namespace, label_selector=f"{LABEL_API_KEY}=true")
    infos = [key_info(item) for item in page.get("items") or []]
    return sorted((i for i in infos if i is not None), key=lambda i: (i.created_at, i.key_id))


async def revoke_key(api: Client, namespace: str, key_or_id: str) -> bool:
    """Delete the Secret of a key, named by the key itself or by its id; False if absent.

    Raises:
        ValueError: if ``key_or_id`` is neither a key nor a 12-hex-digit id.
    """
    if is_valid_key(key_or_id):
        ident = key_id(hash_key(key_or_id))
    elif re.fullmatch(r"[0-9a-f]{12}", key_or_id):
        ident = key_or_id
    else:
        raise ValueError("give the key itself or its 12-hex-digit id")
    for info in await list_keys(api, namespace):
        if info.key_id == ident:
            await api.delete(SECRETS, namespace, SECRET_NAME_PREFIX + ident)
            return True
    return False
