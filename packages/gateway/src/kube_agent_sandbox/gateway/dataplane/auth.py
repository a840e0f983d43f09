"""Data-plane authorization: the sandbox's own access tokens, never the tenant's API key.

envd's port (49983) requires ``X-Access-Token`` equal to the sandbox's envd access token, as
envd itself does once initialized, with envd's exceptions: ``GET /health`` is open (the SDK's
``is_running`` probe), and ``GET``/``POST /files`` also accept a signed URL (the SDK's
``download_url``/``upload_url``: ``signature=v1_<base64 sha256(path:op:user:token[:exp])>``,
optionally ``signature_expiration``). Every other port is open when the sandbox's
traffic is public (E2B's default), else accepts the traffic access token in
``E2B-Traffic-Access-Token`` (what the code interpreter's context calls send) or the envd
token. Comparisons are constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qs

ENVD_PORT = 49983
HEADER_ACCESS_TOKEN = b"x-access-token"
HEADER_TRAFFIC_TOKEN = b"e2b-traffic-access-token"


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of header ``name`` (lowercase) decoded as latin-1, or None."""
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _equal(given: str | None, expected: str) -> bool:
    if given is None or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def file_signature(path: str, operation: str, user: str, token: str, expiration: int | None) -> str:
    """The v1 signature of a file URL, as the E2B SDK computes it."""
    raw = f"{path}:{operation}:{user}:{token}"
    if expiration is not None:
        raw += f":{expiration}"
    digest = hashlib.sha256(raw.encode()).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True)
class SignedFileQuery:
    """The signed part of a ``/files`` URL, parsed once, to check against tokens."""

    operation: str
    path: str
    user: str
    signature: str
    expiration: int | None

    def signed_with(self, token: str) -> bool:
        """Whether the signature was made with ``token`` (constant-time comparison)."""
        expected = file_signature(self.path, self.operation, self.user, token, self.expiration)
        return _equal(self.signature, expected)


def signed_file_query(
    method: str, query_string: bytes, *, now: float | None = None
) -> SignedFileQuery | None:
    """The signature fields of a ``/files`` query; None when absent, malformed or expired."""
    try:
        query = parse_qs(query_string.decode("ascii"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        return None
    signatures = query.get("signature", [])
    paths = query.get("path", [""])
    users = query.get("username", [""])
    expirations = query.get("signature_expiration", [])
    if len(signatures) != 1 or len(paths) != 1 or len(users) != 1 or len(expirations) > 1:
        return None
    expiration: int | None = None
    if expirations:
        if not expirations[0].isdigit():
            return None
        expiration = int(expirations[0])
        if expiration < (time.time() if now is None else now):
            return None
    operation = "read" if method == "GET" else "write"
    return SignedFileQuery(operation, paths[0], users[0], signatures[0], expiration)


def signed_file_url_ok(
    method: str, query_string: bytes, token: str, *, now: float | None = None
) -> bool:
    """Whether a ``/files`` request carries a valid, unexpired signature for ``token``."""
    signed = signed_file_query(method, query_string, now=now)
    return signed is not None and signed.signed_with(token)


def authorized(
    *,
    port: int,
    method: str,
    path: str,
    query_string: bytes,
    headers: Iterable[tuple[bytes, bytes]],
    envd_token: str,
    traffic_token: str,
    public_traffic: bool = False,
) -> bool:
    """Whether a request may reach ``port`` of the sandbox whose tokens are given.

    ``public_traffic``: the sandbox's other ports are open to anyone (E2B's default), as
    ``get_host(port)`` URLs opened in a browser need.
    """
    items = list(headers)
    access = header(items, HEADER_ACCESS_TOKEN)
    if port == ENVD_PORT:
        if method in ("GET", "HEAD") and path == "/health":
            return True
        if _equal(access, envd_token):
            return True
        if path == "/files" and method in ("GET", "POST"):
            return signed_file_url_ok(method, query_string, envd_token)
        return False
    if public_traffic:
        return True
    return _equal(header(items, HEADER_TRAFFIC_TOKEN), traffic_token) or _equal(access, envd_token)
