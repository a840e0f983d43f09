"""envd's wire shapes as the exec fallback writes and reads them, with no exec in sight.

Connect unary errors (HTTP status of the code + ``{"code", "message"}``), envd's REST errors
(``{"code": <status>, "message"}``), Connect streaming envelopes (1 flag byte, 4-byte length,
JSON), and reading an ASGI request body whole (bounded) or chunk by chunk. The shapes are what
the ``e2b`` client's envd transport parses; :mod:`.execfallback` answers with them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

from starlette.responses import Response

from kube_agent_sandbox.gateway.dataplane.proxy import Receive, Scope

CONNECT_STATUS = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "already_exists": 409,
    "failed_precondition": 400,
    "internal": 500,
    "unimplemented": 501,
    "unavailable": 503,
}


class ExecFailure(Exception):
    """A request the fallback refuses with a Connect code (mapped by the caller)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def connect_error(code: str, message: str) -> Response:
    """A unary Connect error: HTTP status of the code, ``{"code", "message"}``."""
    body = json.dumps({"code": code, "message": message}).encode()
    return Response(body, status_code=CONNECT_STATUS.get(code, 500), media_type="application/json")


def rest_error(status: int, message: str) -> Response:
    """An envd REST error body ``{"code": <status>, "message"}``."""
    body = json.dumps({"code": status, "message": message}).encode()
    return Response(body, status_code=status, media_type="application/json")


def envelope(message: dict[str, Any], *, end: bool = False) -> bytes:
    """One Connect streaming frame carrying ``message`` as JSON."""
    payload = json.dumps(message, separators=(",", ":")).encode()
    return (b"\x02" if end else b"\x00") + len(payload).to_bytes(4, "big") + payload


def read_envelopes(body: bytes) -> list[dict[str, Any]]:
    """The JSON messages of a Connect streaming request body.

    Raises:
        ValueError: on a truncated frame, compressed frame or non-object JSON.
    """
    messages, rest = take_envelopes(body)
    if rest:
        raise ValueError("truncated Connect frame")
    return messages


def take_envelopes(
    buffer: bytes, *, limit: int | None = None
) -> tuple[list[dict[str, Any]], bytes]:
    """The whole frames at the start of ``buffer`` (their messages) and the bytes after them.

    Args:
        buffer: bytes of a Connect stream received so far.
        limit: the largest message accepted.

    Raises:
        ValueError: on a compressed frame, a frame over ``limit`` or non-object JSON.
    """
    messages: list[dict[str, Any]] = []
    view = buffer
    while len(view) >= 5:
        flags, size = view[0], int.from_bytes(view[1:5], "big")
        if flags & 0x01:
            raise ValueError("compressed Connect frames are not supported")
        if limit is not None and size > limit:
            raise ValueError(f"a Connect message is over {limit} bytes")
        if len(view) < 5 + size:
            break
        decoded = json.loads(view[5 : 5 + size] or b"{}")
        if not isinstance(decoded, dict):
            raise ValueError("a Connect message must be a JSON object")
        if not flags & 0x02:
            messages.append(decoded)
        view = view[5 + size :]
    return messages, bytes(view)


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, at most ``limit`` bytes.

    Raises:
        ExecFailure: the client went away, or the body is larger.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ExecFailure("canceled", "client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise ExecFailure("invalid_argument", "request body too large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def body_chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body chunk by chunk, as it arrives (ExecFailure if the client goes away)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ExecFailure("canceled", "client disconnected")
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


def header(scope: Scope, name: bytes) -> str:
    """The value of request header ``name`` (lower case), or an empty string."""
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return ""


def query(scope: Scope) -> dict[str, list[str]]:
    """The parsed query string (blank values kept)."""
    raw: bytes = scope.get("query_string", b"")
    return parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
