"""Error responses in the E2B shape, with the retry headers the SDK understands.

The SDK reads ``message`` from a JSON body ``{"code", "message"}`` and retries on
``Should-Retry: true`` (or 429/502/503/504 without that header), honouring ``Retry-After``;
``Should-Retry: false`` is never retried. Every error the gateway answers goes through here.
"""

from __future__ import annotations

from starlette.responses import JSONResponse, Response

NOT_FOUND_MESSAGE = "The sandbox was not found"


def e2b_error(
    status: int,
    message: str,
    *,
    should_retry: bool | None = None,
    retry_after: int | None = None,
    error_code: str | None = None,
) -> Response:
    """An E2B error response.

    Args:
        status: HTTP status, also the body's ``code``.
        message: the body's ``message`` (what the SDK shows).
        should_retry: sets ``Should-Retry`` to ``true``/``false``; None omits the header.
        retry_after: seconds for ``Retry-After``; None omits it.
        error_code: optional semantic ``error_code``.

    Returns:
        The JSON response.
    """
    body: dict[str, object] = {"code": status, "message": message}
    if error_code is not None:
        body["error_code"] = error_code
    headers: dict[str, str] = {}
    if should_retry is not None:
        headers["Should-Retry"] = "true" if should_retry else "false"
    if retry_after is not None:
        headers["Retry-After"] = str(max(0, retry_after))
    return JSONResponse(body, status_code=status, headers=headers)


def sandbox_not_found(sandbox_id: str) -> Response:
    """404 for an unknown sandbox, or one of another tenant (indistinguishable)."""
    return e2b_error(404, f"sandbox {sandbox_id!r} not found")


def unauthorized() -> Response:
    """401 for a missing or unknown API key."""
    return e2b_error(401, "Invalid API key, it must start with e2b_ and be a valid key")


def bad_request(message: str) -> Response:
    """400 for a malformed request; retrying it cannot help."""
    return e2b_error(400, message, should_retry=False)
