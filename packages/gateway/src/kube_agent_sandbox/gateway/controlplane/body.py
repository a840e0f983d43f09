"""Reading request bodies with a size bound: a client cannot make the gateway buffer more.

Every control-plane body is a small JSON object; anything over :data:`MAX_BODY_BYTES` is
refused with 413 before it is fully read.
"""

from __future__ import annotations

import json
from typing import Any, Final

from starlette.requests import Request

from kube_agent_sandbox.gateway.controlplane.models import BadRequest

MAX_BODY_BYTES: Final = 1 << 20


class BodyTooLarge(BadRequest):
    """The body exceeds :data:`MAX_BODY_BYTES` (answered with 413)."""


async def read_json_object(request: Request, *, required: bool) -> dict[str, Any]:
    """The request's JSON object body (``{}`` when empty and not ``required``).

    Raises:
        BodyTooLarge: if the body is larger than the bound.
        BadRequest: if it is not a JSON object.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise BodyTooLarge(f"the request body exceeds {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge(f"the request body exceeds {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        if required:
            raise BadRequest("the request body must be a JSON object")
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body
