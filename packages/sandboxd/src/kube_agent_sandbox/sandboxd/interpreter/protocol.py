"""Server side of the worker protocol: event frames and the sync markers in the output.

The worker (``driver.py``) sends length-prefixed JSON frames on a pipe, and before each frame it
writes a numbered sync marker to its stdout and stderr. This module reads the frames from an
asyncio stream and splits the output streams at the markers (which may span reads), so the server
can put output and events back in the order the worker produced them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kube_agent_sandbox.sandboxd.interpreter.driver import (
    _HEADER,
    MAX_FRAME,
    MAX_SEQ_DIGITS,
    SYNC_END,
    SYNC_START,
    encode_frame,
)

__all__ = [
    "MAX_FRAME",
    "FrameError",
    "SyncSplitter",
    "encode_frame",
    "read_frame",
    "sync_prefix",
]


class FrameError(Exception):
    """A frame on the event pipe is malformed (the worker is broken or not our driver)."""


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """Reads one frame.

    Args:
        reader: The stream of the worker's event pipe.

    Returns:
        The message, or None when the pipe closed (also mid-frame: the worker died).

    Raises:
        FrameError: The frame is too large or not a JSON object.
    """
    try:
        header = await reader.readexactly(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        if size > MAX_FRAME:
            raise FrameError(f"frame of {size} bytes exceeds the limit of {MAX_FRAME}")
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"frame is not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise FrameError("frame is not a JSON object")
    return message


def sync_prefix(token: str, start: bytes = SYNC_START) -> bytes:
    """Returns the bytes that open a sync marker of the worker with this token.

    Args:
        token: The worker's random token (hex).
        start: The marker's opening bytes (``SYNC_START`` unless the driver cannot write NUL).

    Returns:
        The prefix; a marker is ``prefix + <seq> + end``.
    """
    return start + token.encode("ascii") + b"-"


class SyncSplitter:
    """Splits a worker's output stream into text and sync markers, across arbitrary chunks.

    The driver writes ``prefix + <seq> + SYNC_END`` to stdout and stderr before each event it
    sends, so the server knows all output written before the event has arrived. Bytes that might
    be the start of a marker are held back until the next chunk decides.

    Args:
        token: The worker's token (the marker prefix names it).
        start: The bytes that open a marker.
        end: The bytes that close a marker.
    """

    def __init__(self, token: str, start: bytes = SYNC_START, end: bytes = SYNC_END) -> None:
        self.prefix = sync_prefix(token, start)
        self.end = end
        self._held = b""

    def feed(self, chunk: bytes) -> list[bytes | int]:
        """Splits a chunk.

        Args:
            chunk: The bytes just read.

        Returns:
            Output bytes and sync sequence numbers, in stream order.
        """
        data = self._held + chunk
        self._held = b""
        parts: list[bytes | int] = []
        prefix = self.prefix
        while data:
            index = data.find(prefix)
            if index < 0:
                keep = _partial_suffix(data, prefix)
                if keep:
                    self._held = data[-keep:]
                    data = data[:-keep]
                if data:
                    parts.append(data)
                break
            if index:
                parts.append(data[:index])
            rest = data[index + len(prefix) :]
            end = rest.find(self.end)
            if end < 0:
                if len(rest) > MAX_SEQ_DIGITS:  # not a marker after all
                    parts.append(data[index : index + len(prefix)])
                    data = rest
                    continue
                self._held = data[index:]
                break
            digits = rest[:end]
            if digits.isdigit() and len(digits) <= MAX_SEQ_DIGITS:
                parts.append(int(digits))
            else:
                parts.append(data[index : index + len(prefix) + end + len(self.end)])
            data = rest[end + len(self.end) :]
        return parts

    def flush(self) -> bytes:
        """Returns the held-back bytes (at end of stream).

        Returns:
            The bytes not yet returned.
        """
        held, self._held = self._held, b""
        return held


def _partial_suffix(data: bytes, prefix: bytes) -> int:
    for size in range(min(len(prefix) - 1, len(data)), 0, -1):
        if data.endswith(prefix[:size]):
            return size
    return 0
