"""The Connect protocol's JSON codec, server side, without any protobuf runtime.

E2B clients speak Connect with the JSON codec to envd. The daemon must not depend on the ``e2b``
package or on a protobuf library (it is installed alone into sandbox images), so this module
implements the small part of the protocol the clients use: unary calls (``POST
/<package>.<Service>/<Method>`` with ``application/json``; errors are an HTTP status plus
``{"code", "message"}``) and server streams (``application/connect+json``; each message is one
flag byte, a 4-byte big-endian length and the JSON; the final frame has flag ``0x02`` and carries
``{}`` or ``{"error": {...}}``). Messages are plain dicts in proto3 JSON form (camelCase names,
base64 bytes, zero values omitted); the services build them directly.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import struct
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

logger = logging.getLogger(__name__)

UNARY_CONTENT_TYPE = "application/json"
STREAM_CONTENT_TYPE = "application/connect+json"
FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
ENVELOPE_HEADER = struct.Struct(">BI")
# A request message is a small JSON document; anything bigger is refused before it is read.
MAX_REQUEST_BYTES = 4 * 1024 * 1024

Message = dict[str, Any]


class Code(Enum):
    """Connect error codes with the HTTP status each maps to."""

    CANCELED = ("canceled", 499)
    UNKNOWN = ("unknown", 500)
    INVALID_ARGUMENT = ("invalid_argument", 400)
    DEADLINE_EXCEEDED = ("deadline_exceeded", 504)
    NOT_FOUND = ("not_found", 404)
    ALREADY_EXISTS = ("already_exists", 409)
    PERMISSION_DENIED = ("permission_denied", 403)
    RESOURCE_EXHAUSTED = ("resource_exhausted", 429)
    FAILED_PRECONDITION = ("failed_precondition", 400)
    ABORTED = ("aborted", 409)
    OUT_OF_RANGE = ("out_of_range", 400)
    UNIMPLEMENTED = ("unimplemented", 501)
    INTERNAL = ("internal", 500)
    UNAVAILABLE = ("unavailable", 503)
    DATA_LOSS = ("data_loss", 500)
    UNAUTHENTICATED = ("unauthenticated", 401)

    @property
    def wire_name(self) -> str:
        """The code as it appears in the JSON error body."""
        return str(self.value[0])

    @property
    def http_status(self) -> int:
        """The HTTP status of a unary error response with this code."""
        return int(self.value[1])


class ConnectError(Exception):
    """An error a handler raises to answer with a Connect error."""

    def __init__(self, code: Code, message: str) -> None:
        """Create the error.

        Args:
            code: The Connect code.
            message: Human-readable text (sent to the client).
        """
        super().__init__(message)
        self.code = code
        self.message = message

    def to_json(self) -> Message:
        """The error in its wire form."""
        return {"code": self.code.wire_name, "message": self.message}


def error_response(error: ConnectError) -> Response:
    """A unary (or pre-stream) error response."""
    return Response(
        json.dumps(error.to_json()),
        status_code=error.code.http_status,
        media_type=UNARY_CONTENT_TYPE,
    )


def encode_envelope(message: Message, *, end: bool = False) -> bytes:
    """Frame one message of a server stream."""
    data = json.dumps(message, separators=(",", ":")).encode()
    return ENVELOPE_HEADER.pack(FLAG_END_STREAM if end else 0, len(data)) + data


def decode_envelopes(data: bytes) -> list[tuple[int, bytes]]:
    """Split a complete body of enveloped messages into ``(flags, payload)`` pairs.

    Raises:
        ConnectError: ``invalid_argument`` when the body is truncated.
    """
    frames: list[tuple[int, bytes]] = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < ENVELOPE_HEADER.size:
            raise ConnectError(Code.INVALID_ARGUMENT, "truncated envelope header")
        flags, length = ENVELOPE_HEADER.unpack_from(data, offset)
        offset += ENVELOPE_HEADER.size
        if len(data) - offset < length:
            raise ConnectError(Code.INVALID_ARGUMENT, "truncated envelope payload")
        frames.append((flags, data[offset : offset + length]))
        offset += length
    return frames


def parse_json_message(data: bytes) -> Message:
    """Parse one JSON message; a request must be a JSON object.

    Raises:
        ConnectError: ``invalid_argument`` for anything that is not a JSON object.
    """
    try:
        value = json.loads(data) if data.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConnectError(Code.INVALID_ARGUMENT, f"invalid JSON message: {exc}") from exc
    if not isinstance(value, dict):
        raise ConnectError(Code.INVALID_ARGUMENT, "the message must be a JSON object")
    return value


# --- proto3 JSON helpers ---------------------------------------------------------------------


def b64encode(data: bytes) -> str:
    """Encode ``bytes`` the proto3 JSON way (standard base64 with padding)."""
    return base64.b64encode(data).decode("ascii")


def b64decode(value: object, *, field: str) -> bytes:
    """Decode a proto3 JSON ``bytes`` field (standard or URL-safe base64, padding optional).

    Raises:
        ConnectError: ``invalid_argument`` when it is not base64 text.
    """
    if value is None:
        return b""
    if not isinstance(value, str):
        raise ConnectError(Code.INVALID_ARGUMENT, f"{field}: expected base64 text")
    text = value.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConnectError(Code.INVALID_ARGUMENT, f"{field}: invalid base64") from exc


def get_str(message: Mapping[str, Any], name: str, *, default: str = "") -> str:
    """Read a ``string`` field (absent = default).

    Raises:
        ConnectError: ``invalid_argument`` when present with another type.
    """
    value = message.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ConnectError(Code.INVALID_ARGUMENT, f"{name}: expected a string")
    return value


def get_int(message: Mapping[str, Any], name: str, *, default: int = 0) -> int:
    """Read an integer field (proto3 JSON allows numbers and decimal strings).

    Raises:
        ConnectError: ``invalid_argument`` when present but not an integer.
    """
    value = message.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        raise ConnectError(Code.INVALID_ARGUMENT, f"{name}: expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    raise ConnectError(Code.INVALID_ARGUMENT, f"{name}: expected an integer")


def get_bool(message: Mapping[str, Any], name: str, *, default: bool = False) -> bool:
    """Read a ``bool`` field.

    Raises:
        ConnectError: ``invalid_argument`` when present with another type.
    """
    value = message.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConnectError(Code.INVALID_ARGUMENT, f"{name}: expected a boolean")
    return value


def get_object(message: Mapping[str, Any], name: str) -> Message:
    """Read a message-typed field (absent = empty message).

    Raises:
        ConnectError: ``invalid_argument`` when present but not an object.
    """
    value = message.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConnectError(Code.INVALID_ARGUMENT, f"{name}: expected an object")
    return value


def get_str_map(message: Mapping[str, Any], name: str) -> dict[str, str]:
    """Read a ``map<string, string>`` field.

    Raises:
        ConnectError: ``invalid_argument`` when it is not an object of strings.
    """
    value = get_object(message, name)
    if not all(isinstance(v, str) for v in value.values()):
        raise ConnectError(Code.INVALID_ARGUMENT, f"{name}: values must be strings")
    return {str(k): str(v) for k, v in value.items()}


def get_str_list(message: Mapping[str, Any], name: str) -> list[str]:
    """Read a ``repeated string`` field.

    Raises:
        ConnectError: ``invalid_argument`` when it is not a list of strings.
    """
    value = message.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConnectError(Code.INVALID_ARGUMENT, f"{name}: expected a list of strings")
    return list(value)


# --- server plumbing -------------------------------------------------------------------------

UnaryHandler = Callable[[Request, Message], Awaitable[Message]]
StreamHandler = Callable[[Request, Message], AsyncGenerator[Message, None]]
ClientStreamHandler = Callable[[Request, AsyncIterator[Message]], Awaitable[Message]]


@dataclass(frozen=True)
class Method:
    """One RPC: a unary, server-stream or client-stream handler (exactly one is set)."""

    unary: UnaryHandler | None = None
    stream: StreamHandler | None = None
    client_stream: ClientStreamHandler | None = None


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _check_request_encoding(request: Request, *, stream: bool) -> None:
    header = "connect-content-encoding" if stream else "content-encoding"
    encoding = request.headers.get(header, "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ConnectError(Code.UNIMPLEMENTED, f"unsupported compression {encoding!r}")


def _internal(request: Request, exc: Exception) -> ConnectError:
    """Log an unexpected handler failure; the client gets a Connect ``internal`` error."""
    logger.error("%s failed", request.url.path, exc_info=exc)
    return ConnectError(Code.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
        raise ConnectError(Code.RESOURCE_EXHAUSTED, "request message too large")
    chunks = bytearray()
    async for chunk in request.stream():
        chunks.extend(chunk)
        if len(chunks) > MAX_REQUEST_BYTES:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, "request message too large")
    return bytes(chunks)


async def serve_unary(request: Request, handler: UnaryHandler) -> Response:
    """Decode a unary request, call the handler and encode its answer or error."""
    try:
        if _media_type(request) != UNARY_CONTENT_TYPE:
            raise ConnectError(
                Code.UNIMPLEMENTED,
                f"unsupported content type {_media_type(request)!r}; only the JSON codec is served",
            )
        _check_request_encoding(request, stream=False)
        message = parse_json_message(await _read_body(request))
        reply = await handler(request, message)
    except ConnectError as exc:
        return error_response(exc)
    except Exception as exc:
        return error_response(_internal(request, exc))
    return Response(
        json.dumps(reply, separators=(",", ":")),
        media_type=UNARY_CONTENT_TYPE,
    )


def stream_timeout_seconds(request: Request) -> float | None:
    """The deadline the client asked for (``Connect-Timeout-Ms``), in seconds, or None."""
    value = request.headers.get("connect-timeout-ms", "").strip()
    if not value.isdigit() or int(value) <= 0:
        return None
    return int(value) / 1000


async def _stream_body(
    request: Request, messages: AsyncGenerator[Message, None]
) -> AsyncIterator[bytes]:
    timeout = stream_timeout_seconds(request)
    deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
    end: Message = {}
    try:
        while True:
            # The deadline runs in this task (no inner task as with wait_for): when the server
            # cancels the response because the client left, the cancellation reaches the
            # handler's generator directly and nothing is left running for aclose() below.
            try:
                async with asyncio.timeout_at(deadline):
                    message = await anext(messages)
            except StopAsyncIteration:
                break
            yield encode_envelope(message)
    except ConnectError as exc:
        end = {"error": exc.to_json()}
    except TimeoutError:
        end = {"error": ConnectError(Code.DEADLINE_EXCEEDED, "the stream timed out").to_json()}
    except Exception as exc:
        end = {"error": _internal(request, exc).to_json()}
    finally:
        aclose = getattr(messages, "aclose", None)
        if aclose is not None:
            await aclose()
    yield encode_envelope(end, end=True)


async def serve_stream(request: Request, handler: StreamHandler) -> Response:
    """Decode a server-stream request and stream the handler's messages as envelopes.

    Errors found before the first message (bad request, unknown process) are sent the Connect
    way for streams: HTTP 200 and an end-of-stream frame carrying the error.
    """
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    try:
        if _media_type(request) != STREAM_CONTENT_TYPE:
            raise ConnectError(
                Code.UNIMPLEMENTED,
                f"unsupported content type {_media_type(request)!r}; only the JSON codec is served",
            )
        _check_request_encoding(request, stream=True)
        frames = decode_envelopes(await _read_body(request))
        if len(frames) != 1 or frames[0][0] & FLAG_END_STREAM:
            raise ConnectError(Code.INVALID_ARGUMENT, "a server stream takes exactly one message")
        if frames[0][0] & FLAG_COMPRESSED:
            raise ConnectError(Code.INVALID_ARGUMENT, "compressed messages are not accepted")
        message = parse_json_message(frames[0][1])
        messages = handler(request, message)
        # Run the handler up to its first message so set-up errors end the stream cleanly.
        first = await anext(messages)
    except StopAsyncIteration:
        return Response(
            encode_envelope({}, end=True), media_type=STREAM_CONTENT_TYPE, headers=headers
        )
    except ConnectError as exc:
        return Response(
            encode_envelope({"error": exc.to_json()}, end=True),
            media_type=STREAM_CONTENT_TYPE,
            headers=headers,
        )
    except Exception as exc:
        return Response(
            encode_envelope({"error": _internal(request, exc).to_json()}, end=True),
            media_type=STREAM_CONTENT_TYPE,
            headers=headers,
        )

    async def chained() -> AsyncGenerator[Message, None]:
        try:
            yield first
            async for item in messages:
                yield item
        finally:
            await messages.aclose()

    return StreamingResponse(
        _stream_body(request, chained()), media_type=STREAM_CONTENT_TYPE, headers=headers
    )


async def read_envelopes(chunks: AsyncIterator[bytes]) -> AsyncIterator[Message]:
    """Parse request messages as they arrive (client streams); stops at end-of-stream.

    Raises:
        ConnectError: ``invalid_argument`` for a truncated, compressed or oversized message.
    """
    buffer = bytearray()
    async for chunk in chunks:
        buffer.extend(chunk)
        while len(buffer) >= ENVELOPE_HEADER.size:
            flags, length = ENVELOPE_HEADER.unpack_from(buffer, 0)
            if length > MAX_REQUEST_BYTES:
                raise ConnectError(Code.RESOURCE_EXHAUSTED, "request message too large")
            if len(buffer) < ENVELOPE_HEADER.size + length:
                break
            payload = bytes(buffer[ENVELOPE_HEADER.size : ENVELOPE_HEADER.size + length])
            del buffer[: ENVELOPE_HEADER.size + length]
            if flags & FLAG_END_STREAM:
                return
            if flags & FLAG_COMPRESSED:
                raise ConnectError(Code.INVALID_ARGUMENT, "compressed messages are not accepted")
            yield parse_json_message(payload)
    if buffer:
        raise ConnectError(Code.INVALID_ARGUMENT, "truncated envelope")


async def serve_client_stream(request: Request, handler: ClientStreamHandler) -> Response:
    """Feed a client stream's messages to the handler; answer its one reply as a stream."""
    try:
        if _media_type(request) != STREAM_CONTENT_TYPE:
            raise ConnectError(
                Code.UNIMPLEMENTED,
                f"unsupported content type {_media_type(request)!r}; only the JSON codec is served",
            )
        _check_request_encoding(request, stream=True)
        reply = await handler(request, read_envelopes(request.stream()))
        body = encode_envelope(reply) + encode_envelope({}, end=True)
    except ConnectError as exc:
        body = encode_envelope({"error": exc.to_json()}, end=True)
    except Exception as exc:
        body = encode_envelope({"error": _internal(request, exc).to_json()}, end=True)
    return Response(body, media_type=STREAM_CONTENT_TYPE)


def unknown_method_response(path: str) -> Response:
    """The answer for a path that names no served RPC."""
    return error_response(ConnectError(Code.NOT_FOUND, f"unknown method {path}"))


async def dispatch(request: Request, method: Method | None) -> Response:
    """Serve one Connect request for a method (None = unknown method)."""
    if method is None:
        return unknown_method_response(request.url.path)
    if request.method != "POST":
        return error_response(ConnectError(Code.UNIMPLEMENTED, "only POST is served"))
    if method.unary is not None:
        return await serve_unary(request, method.unary)
    if method.stream is not None:
        return await serve_stream(request, method.stream)
    if method.client_stream is not None:
        return await serve_client_stream(request, method.client_stream)
    return error_response(ConnectError(Code.UNIMPLEMENTED, "method not implemented"))
