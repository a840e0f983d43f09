"""A raw ASGI app standing in for a pod: slow streams, echo, header dump, abrupt ends."""

from __future__ import annotations

import asyncio
import json
from typing import Any


class Upstream:
    """The pod's behaviour, steered by the test through events.

    Attributes:
        release: set by the test to let ``/slow`` send its second chunk.
        first_chunk_in: set once ``/echo-slow`` has read the first request chunk.
        seen: the last request's headers, lowercased.
        disconnected: set when a client of ``/forever`` went away.
    """

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.first_chunk_in = asyncio.Event()
        self.disconnected = asyncio.Event()
        self.seen: dict[str, str] = {}
        self.seen_raw: list[tuple[bytes, bytes]] = []
        self.seen_target = b""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.seen_raw = list(scope["headers"])
        self.seen = {k.decode().lower(): v.decode("latin-1") for k, v in scope["headers"]}
        self.seen_target = scope.get("raw_path", b"") + (
            b"?" + scope["query_string"] if scope.get("query_string") else b""
        )
        path = scope["path"]
        if path == "/slow":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/plain")],
                }
            )
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
            await self.release.wait()
            await send({"type": "http.response.body", "body": b"second", "more_body": False})
        elif path == "/echo-slow":
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if chunks[-1]:
                    self.first_chunk_in.set()
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
            await send(
                {
                    "type": "http.response.start",
                    "status": 201,
                    "headers": [(b"content-length", str(len(body)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": body})
        elif path == "/headers":
            body = json.dumps(self.seen).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close, x-secret-hop"),
                        (b"x-secret-hop", b"1"),
                        (b"set-cookie", b"a=1"),
                        (b"set-cookie", b"b=2"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
        elif path == "/connect-drop":
            frame = json.dumps({"event": {"start": {"pid": 1}}}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/connect+json")],
                }
            )
            await send(
                {
                    "type": "http.response.body",
                    "body": b"\x00" + len(frame).to_bytes(4, "big") + frame,
                    "more_body": True,
                }
            )
            raise RuntimeError("pod gone")  # uvicorn drops the connection mid-stream
        elif path == "/connect-stream":
            # A Connect server stream (as process.Process/Start): a frame, a pause, a frame,
            # then the end-of-stream frame.
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/connect+json")],
                }
            )
            for message in ({"event": {"start": {"pid": 1}}}, {"event": {"end": {}}}):
                frame = json.dumps(message).encode()
                envelope = b"\x00" + len(frame).to_bytes(4, "big") + frame
                await send({"type": "http.response.body", "body": envelope, "more_body": True})
                await self.release.wait()
            await send(
                {
                    "type": "http.response.body",
                    "body": b"\x02\x00\x00\x00\x02{}",
                    "more_body": False,
                }
            )
        elif path == "/plain-drop":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", b"100")],
                }
            )
            await send({"type": "http.response.body", "body": b"x" * 10, "more_body": True})
            raise RuntimeError("pod gone")
        elif path == "/forever":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    self.disconnected.set()
                    return
        else:
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
