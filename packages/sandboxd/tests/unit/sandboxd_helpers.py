"""Helpers shared by sandboxd's unit tests: an in-process client and Connect framing."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import httpx

from kube_agent_sandbox.sandboxd.app import build_app
from kube_agent_sandbox.sandboxd.init_state import DaemonState


def make_client(state: DaemonState | None = None) -> httpx.AsyncClient:
    """An httpx client talking to a fresh daemon app in-process."""
    app = build_app(state)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sandboxd")


def frame(message: dict[str, Any], flags: int = 0) -> bytes:
    """One Connect envelope, written independently of the daemon's codec."""
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def unframe(body: bytes) -> list[tuple[int, dict[str, Any]]]:
    """Split a Connect stream body into ``(flags, message)`` pairs."""
    out: list[tuple[int, dict[str, Any]]] = []
    offset = 0
    while offset < len(body):
        flags, length = struct.unpack_from(">BI", body, offset)
        offset += 5
        out.append((flags, json.loads(body[offset : offset + length])))
        offset += length
    return out


async def unary(
    client: httpx.AsyncClient,
    method: str,
    message: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST a unary Connect call with the JSON codec."""
    return await client.post(
        f"/{method}",
        content=json.dumps(message),
        headers={"Content-Type": "application/json", **(headers or {})},
    )


async def stream(
    client: httpx.AsyncClient,
    method: str,
    message: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
) -> tuple[httpx.Response, list[tuple[int, dict[str, Any]]]]:
    """POST a server-stream Connect call; returns the response and its frames."""
    response = await client.post(
        f"/{method}",
        content=frame(message),
        headers={"Content-Type": "application/connect+json", **(headers or {})},
    )
    return response, unframe(response.content)


def events(frames: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The ``event`` payloads of the data frames of a process stream."""
    return [message["event"] for flags, message in frames if not flags & 0x02]


def output(frames: list[tuple[int, dict[str, Any]]], name: str) -> bytes:
    """Concatenated ``data.<name>`` bytes of a process stream."""
    return b"".join(
        base64.b64decode(event["data"][name])
        for event in events(frames)
        if name in event.get("data", {})
    )


def start_request(command: str, **extra: Any) -> dict[str, Any]:
    """A StartRequest running ``command`` in ``/bin/sh -c``.

    (``commands.run`` uses ``bash -l -c``; a login shell may run slow profile hooks, and killing
    one mid-hook can leave their locks behind, so the in-process tests use a plain shell.)
    """
    return {"process": {"cmd": "/bin/sh", "args": ["-c", command]}, **extra}
