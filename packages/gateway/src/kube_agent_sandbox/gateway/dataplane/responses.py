"""The data plane's own answers, worded as E2B's proxy words them.

The SDK reads the JSON ``message`` of a 502 and branches on substrings: ``was not found`` means
the sandbox is gone (``SandboxNotRunningException``), ``port is not open`` that it runs but
nothing listens (``SandboxUnreachableException``). The same not-found answer covers an unknown
id, another tenant's sandbox and a sandbox that is not running, so ids cannot be probed. Bodies
are ``{"code": <status>, "message": ...}`` (an int ``code`` is read as the HTTP status by the
SDK's Connect transport, so RPC paths map these correctly too).
"""

from __future__ import annotations

import json

from starlette.responses import Response

SANDBOX_NOT_FOUND = "The sandbox was not found"
PORT_NOT_OPEN = "The sandbox is running but port is not open"
UNAUTHORIZED = "Unauthorized: invalid or missing access token"
RESUMING = "The sandbox is being resumed, retry the request"


def error(
    status: int,
    message: str,
    *,
    should_retry: bool | None = None,
    retry_after: int | None = None,
) -> Response:
    """A JSON error response ``{"code", "message"}`` with E2B's retry headers when given."""
    headers: dict[str, str] = {}
    if should_retry is not None:
        headers["Should-Retry"] = "true" if should_retry else "false"
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    body = json.dumps({"code": status, "message": message}).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def not_found(sandbox_id: str) -> Response:
    """502 for an unknown, foreign or stopped sandbox (``SandboxNotRunningException``)."""
    return error(502, f"{SANDBOX_NOT_FOUND}: {sandbox_id}")


def port_not_open(sandbox_id: str, port: int) -> Response:
    """502 for a running sandbox whose port refuses (``SandboxUnreachableException``)."""
    return error(502, f"{PORT_NOT_OPEN}: {port} ({sandbox_id})")


def unreachable(sandbox_id: str) -> Response:
    """502 when the pod cannot be reached for another reason (state unknown to the SDK)."""
    return error(502, f"The sandbox could not be reached: {sandbox_id}")


def unauthorized() -> Response:
    """401 for a missing or wrong access token (``AuthenticationException`` in the SDK)."""
    return error(401, UNAUTHORIZED)


def bad_request(message: str) -> Response:
    """400 for a malformed target, header or request."""
    return error(400, message)


def resuming(retry_after: int) -> Response:
    """503 asking the client to retry while a suspended sandbox comes back."""
    return error(503, RESUMING, should_retry=True, retry_after=retry_after)
