"""A streaming ``multipart/form-data`` reader for uploads the exec fallback writes to pods.

``files.write`` sends each file as a part (field ``file``, ``filename`` = the target path).
Parts are read as the body arrives and their bytes passed on in chunks, so an upload never
sits in the gateway's memory as a whole. Only what uploads need: part headers
``Content-Disposition`` (name, filename) and ``Content-Type``; no nested multiparts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from email.message import Message

MAX_HEADER_BYTES = 16 * 1024


class MultipartError(ValueError):
    """The body is not valid multipart/form-data."""


@dataclass(frozen=True)
class PartStart:
    """A new part begins.

    Attributes:
        name: the form field name.
        filename: the file name given by the client (the target path for envd uploads).
        content_type: the part's content type.
    """

    name: str
    filename: str | None
    content_type: str


def boundary_of(content_type: str) -> bytes:
    """The boundary parameter of a ``multipart/form-data`` content type.

    Raises:
        MultipartError: if the content type is not multipart/form-data with a boundary.
    """
    message = Message()
    message["content-type"] = content_type
    if message.get_content_type() != "multipart/form-data":
        raise MultipartError("not multipart/form-data")
    boundary = message.get_param("boundary")
    if not isinstance(boundary, str) or not 0 < len(boundary) <= 70:
        raise MultipartError("missing or invalid multipart boundary")
    return boundary.encode("latin-1")


def _part_start(raw: bytes) -> PartStart:
    message = Message()
    for line in raw.split(b"\r\n"):
        if not line:
            continue
        key, sep, value = line.partition(b":")
        if not sep:
            raise MultipartError("malformed part header")
        message[key.decode("latin-1").strip()] = value.decode("utf-8", "replace").strip()
    if message.get("content-disposition") is None:
        raise MultipartError("part without Content-Disposition")
    name = message.get_param("name", header="content-disposition")
    filename = message.get_param("filename", header="content-disposition")
    return PartStart(
        name=str(name) if isinstance(name, str) else "",
        filename=str(filename) if isinstance(filename, str) else None,
        content_type=message.get_content_type(),
    )


async def parts(chunks: AsyncIterator[bytes], boundary: bytes) -> AsyncIterator[PartStart | bytes]:
    """Events of a multipart body: a :class:`PartStart`, then that part's data chunks, ...

    Raises:
        MultipartError: on a malformed or truncated body.
    """
    delimiter = b"\r\n--" + boundary
    buffer = b"\r\n"  # so the first delimiter matches like every other
    state = "preamble"
    async for chunk in chunks:
        buffer += chunk
        while True:
            if state == "preamble":
                at = buffer.find(delimiter)
                if at < 0:
                    buffer = buffer[-len(delimiter) :]
                    break
                buffer = buffer[at + len(delimiter) :]
                state = "after-delimiter"
            if state == "after-delimiter":
                if len(buffer) < 2:
                    break
                if buffer.startswith(b"--"):
                    return
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > 1024:
                        raise MultipartError("malformed multipart delimiter line")
                    break
                buffer = buffer[end + 2 :]
                state = "headers"
            if state == "headers":
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if buffer.startswith(b"\r\n"):  # a part without headers
                        raise MultipartError("part without Content-Disposition")
                    if len(buffer) > MAX_HEADER_BYTES:
                        raise MultipartError("part headers too large")
                    break
                yield _part_start(buffer[:end])
                buffer = buffer[end + 4 :]
                state = "data"
            if state == "data":
                at = buffer.find(delimiter)
                if at < 0:
                    keep = len(delimiter) - 1
                    if len(buffer) > keep:
                        yield buffer[: len(buffer) - keep]
                        buffer = buffer[len(buffer) - keep :]
                    break
                if at:
                    yield buffer[:at]
                buffer = buffer[at + len(delimiter) :]
                state = "after-delimiter"
    raise MultipartError("truncated multipart body")
