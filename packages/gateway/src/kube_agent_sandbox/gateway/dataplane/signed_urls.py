"""Signed file URLs that name no sandbox: ``<gateway>/files?path=…&signature=…``.

With one gateway URL (``E2B_SANDBOX_URL``) the SDK's ``upload_url()`` and ``download_url()``
point at that URL, and whoever opens them (a browser, curl) sends no ``E2b-Sandbox-Id``
header, so nothing in the request names the sandbox. The signature does, implicitly: it is a
SHA-256 over path, operation, user and the sandbox's envd access token, so the sandbox is the
one whose token makes it verify. The gateway tries the token of every live sandbox (an HMAC
and a SHA-256 each, a few microseconds) and then routes the request as if it carried the
header; the data plane checks the signature again as for any signed URL.
"""

from __future__ import annotations

from collections.abc import Iterable

from kube_agent_sandbox.gateway.dataplane.auth import ENVD_PORT, signed_file_query
from kube_agent_sandbox.gateway.dataplane.proxy import Scope
from kube_agent_sandbox.gateway.dataplane.target import HEADER_SANDBOX_ID, HEADER_SANDBOX_PORT

FILES_PATH = "/files"


def is_signed_file_request(scope: Scope) -> bool:
    """Whether an HTTP request is a ``GET``/``POST /files`` carrying a ``signature``."""
    return (
        scope["type"] == "http"
        and scope.get("path") == FILES_PATH
        and scope.get("method") in ("GET", "POST")
        and b"signature=" in scope.get("query_string", b"")
    )


def signing_sandbox(scope: Scope, tokens: Iterable[tuple[str, str]]) -> str | None:
    """The id of the one sandbox whose envd token signed this request, or None.

    Args:
        scope: a request for which :func:`is_signed_file_request` holds.
        tokens: ``(sandbox id, envd access token)`` of every live sandbox.
    """
    signed = signed_file_query(scope["method"], scope.get("query_string", b""))
    if signed is None:
        return None
    matches = [sandbox_id for sandbox_id, token in tokens if signed.signed_with(token)]
    return matches[0] if len(matches) == 1 else None


def addressed_to(scope: Scope, sandbox_id: str) -> Scope:
    """A copy of ``scope`` naming ``sandbox_id``'s envd port in the SDK's routing headers."""
    headers = [
        (key, value)
        for key, value in scope.get("headers") or ()
        if key.lower() not in (HEADER_SANDBOX_ID.encode(), HEADER_SANDBOX_PORT.encode())
    ]
    headers += [
        (HEADER_SANDBOX_ID.encode(), sandbox_id.encode()),
        (HEADER_SANDBOX_PORT.encode(), str(ENVD_PORT).encode()),
    ]
    return {**scope, "headers": headers}
