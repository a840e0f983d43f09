"""A streaming ``multipart/form-data`` parser (the daemon may depend on nothing but Starlette).

Starlette's form parsing needs ``python-multipart``, which images would have to install too, and
it spools parts to temporary files. This push parser hands each part's bytes to the caller as
they arrive, so an upload goes straight to its target file with bounded memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MAX_HEADER_BYTES = 16 * 1024


class MultipartError(ValueError):
    """The body is not valid ``multipart/form-data``."""


@dataclass
class PartHeaders:
    """The headers of one part, with its form field name and file name decoded."""

    headers: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    filename: str | None = None


def boundary_of(content_type: str) -> bytes:
    """The boundary parameter of a ``multipart/form-data`` content type.

    Raises:
        MultipartError: missing or invalid boundary.
    """
    media_type, _, params = content_type.partition(";")
    if media_type.strip().lower() != "multipart/form-data":
        raise MultipartError("not multipart/form-data")
    for key, value in _split_params(params):
        if key == "boundary":
            if not value or len(value) > 200:
                raise MultipartError("invalid multipart boundary")
            return value.encode("latin-1")
    raise MultipartError("multipart boundary missing")


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        inner = value[1:-1]
        out: list[str] = []
        escaped = False
        for char in inner:
            if escaped:
                out.append(char)
                escaped = False
            elif char == "\\":
                escaped = True
            else:
                out.append(char)
        return "".join(out)
    return value


def _split_params(params: str) -> list[tuple[str, str]]:
    """``; key=value; key="quoted; value"`` → pairs (keys lower-cased)."""
    pairs: list[tuple[str, str]] = []
    current: list[str] = []
    in_quotes = False
    escaped = False
    pieces: list[str] = []
    for char in params:
        if escaped:
            current.append(char)
            escaped = False
            continue
        if char == "\\" and in_quotes:
            current.append(char)
            escaped = True
            continue
        if char == '"':
            in_quotes = not in_quotes
        if char == ";" and not in_quotes:
            pieces.append("".join(current))
            current = []
            continue
        current.append(char)
    pieces.append("".join(current))
    for piece in pieces:
        key, sep, value = piece.partition("=")
        if sep:
            pairs.append((key.strip().lower(), _unquote(value)))
    return pairs


def parse_part_headers(block: bytes) -> PartHeaders:
    """Parse the header block of one part.

    Raises:
        MultipartError: malformed header lines.
    """
    result = PartHeaders()
    text = block.decode("utf-8", errors="replace")
    for line in text.split("\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise MultipartError(f"malformed part header {line!r}")
        result.headers[name.strip().lower()] = value.strip()
    disposition = result.headers.get("content-disposition", "")
    kind, _, params = disposition.partition(";")
    if kind.strip().lower() == "form-data":
        for key, value in _split_params(params):
            if key == "name":
                result.name = value
            elif key == "filename":
                result.filename = value
    return result


class MultipartParser:
    """Feed body chunks; get ``on_part(headers)``, ``on_data(bytes)``, ``on_part_end()`` calls."""

    def __init__(
        self,
        boundary: bytes,
        *,
        on_part: Callable[[PartHeaders], None],
        on_data: Callable[[bytes], None],
        on_part_end: Callable[[], None],
    ) -> None:
        """Create a parser for one body.

        Args:
            boundary: The boundary from the content type.
            on_part: Called with each part's headers before its data.
            on_data: Called with each piece of the current part's data.
            on_part_end: Called when the current part is complete.
        """
        self._dash_boundary = b"--" + boundary
        self._delimiter = b"\r\n--" + boundary
        self._buffer = bytearray()
        self._state = "preamble"
        self._on_part = on_part
        self._on_data = on_data
        self._on_part_end = on_part_end

    @property
    def done(self) -> bool:
        """Whether the closing boundary was seen."""
        return self._state == "done"

    def feed(self, chunk: bytes) -> None:
        """Consume the next piece of the body.

        Raises:
            MultipartError: the body is malformed.
        """
        if self._state == "done":
            return  # the epilogue is ignored
        self._buffer.extend(chunk)
        while self._step():
            pass

    def close(self) -> None:
        """Signal the end of the body.

        Raises:
            MultipartError: the body ended before the closing boundary.
        """
        if self._state != "done":
            raise MultipartError("truncated multipart body")

    def _after_boundary(self, start: int) -> bool:
        """Handle what follows a boundary at ``start``; False if more bytes are needed."""
        if len(self._buffer) < start + 2:
            return False
        tail = bytes(self._buffer[start : start + 2])
        if tail == b"--":
            self._state = "done"
            self._buffer.clear()
            return False
        # Transport padding (spaces/tabs) may precede the CRLF.
        end = self._buffer.find(b"\r\n", start)
        if end == -1:
            if len(self._buffer) - start > 256:
                raise MultipartError("malformed multipart boundary line")
            return False
        if self._buffer[start:end].strip(b" \t"):
            raise MultipartError("malformed multipart boundary line")
        del self._buffer[: end + 2]
        self._state = "headers"
        return True

    def _step(self) -> bool:
        if self._state == "preamble":
            index = self._buffer.find(self._dash_boundary)
            if index == -1:
                keep = len(self._dash_boundary) - 1
                if len(self._buffer) > keep:
                    del self._buffer[: len(self._buffer) - keep]
                return False
            return self._after_boundary(index + len(self._dash_boundary))
        if self._state == "headers":
            if len(self._buffer) < 2:
                return False
            if self._buffer.startswith(b"\r\n"):  # a part without headers
                block, consumed = b"", 2
            else:
                index = self._buffer.find(b"\r\n\r\n")
                if index == -1:
                    if len(self._buffer) > MAX_HEADER_BYTES:
                        raise MultipartError("multipart part headers too large")
                    return False
                block, consumed = bytes(self._buffer[:index]), index + 4
            if len(block) > MAX_HEADER_BYTES:
                raise MultipartError("multipart part headers too large")
            del self._buffer[:consumed]
            self._on_part(parse_part_headers(block))
            self._state = "body"
            return True
        if self._state == "body":
            index = self._buffer.find(self._delimiter)
            if index == -1:
                safe = len(self._buffer) - (len(self._delimiter) - 1)
                if safe > 0:
                    self._on_data(bytes(self._buffer[:safe]))
                    del self._buffer[:safe]
                return False
            after = index + len(self._delimiter)
            if len(self._buffer) < after + 2:
                if index > 0:
                    self._on_data(bytes(self._buffer[:index]))
                    del self._buffer[:index]
                return False
            if index > 0:
                self._on_data(bytes(self._buffer[:index]))
            self._on_part_end()
            del self._buffer[:index]
            self._state = "boundary"
            return True
        if self._state == "boundary":
            return self._after_boundary(len(self._delimiter))
        return False
