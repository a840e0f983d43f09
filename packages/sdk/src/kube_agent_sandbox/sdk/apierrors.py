"""Map a Kubernetes API answer (HTTP status + Status body) onto the SDK's error classes.

Pure: the transports hand it the status code and bytes they received, so no client library's
exception type ever reaches a caller.
"""

from __future__ import annotations

import json
from typing import Any

from kube_agent_sandbox.sdk.errors import (
    ApiRequestError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
)

_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def verb_of(method: str, *, watch: bool = False, collection: bool = False) -> str:
    """The RBAC verb of an HTTP request."""
    if watch:
        return "watch"
    if method == "GET" and collection:
        return "list"
    return _VERBS.get(method.upper(), method.lower())


def decode_status(body: bytes | str | None) -> dict[str, Any] | None:
    """The body as a dict if it is JSON, else ``None``."""
    if not body:
        return None
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


def api_error(
    status_code: int, body: bytes | str | None, *, verb: str, resource: str
) -> ApiRequestError:
    """The SDK error for a non-2xx answer.

    Args:
        status_code: HTTP status.
        body: the response body (a ``Status`` object when the API wrote it).
        verb: the RBAC verb attempted (for permission errors and messages).
        resource: ``<plural>.<group>`` or ``pods/exec`` etc.
    """
    status = decode_status(body)
    reason = str((status or {}).get("reason") or "")
    message = str((status or {}).get("message") or "")
    if not message:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
        message = text.strip()[:500] or f"HTTP {status_code}"
    if status_code in (401, 403):
        return PermissionDeniedError(
            f"cannot {verb} {resource}: {message}", status_code, verb=verb, resource=resource
        )
    if status_code == 404:
        return NotFoundError(message, status_code, reason=reason or "NotFound", body=status)
    if status_code == 409:
        return ConflictError(message, status_code, reason=reason or "Conflict", body=status)
    return ApiRequestError(
        f"{verb} {resource} failed ({status_code} {reason}): {message}",
        status_code,
        reason=reason,
        body=status,
    )
