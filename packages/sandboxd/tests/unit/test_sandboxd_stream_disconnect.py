"""A client leaving a server stream (the E2B SDKs always set a deadline) ends it quietly.

Driven through raw ASGI messages, as uvicorn delivers them: the request, then
``http.disconnect`` once the first frame went out. Starlette then cancels the response
task, and neither the app call nor the daemon's log may show an error.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from sandboxd_helpers import frame, start_request
from starlette.types import Message

from kube_agent_sandbox.sandboxd.app import build_app


async def _leave_after_first_frame(
    path: str, headers: dict[str, str], message: dict[str, Any]
) -> int:
    """Call the stream ``path``, disconnect after the first body chunk; chunks seen."""
    app = build_app()
    sent_body = asyncio.Event()
    chunks: list[bytes] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": frame(message), "more_body": False}
        await sent_body.wait()
        return {"type": "http.disconnect"}

    async def send(event: Message) -> None:
        if event["type"] == "http.response.body" and event.get("body"):
            chunks.append(event["body"])
            sent_body.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},  # as uvicorn serves it
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/connect+json"),
            *((k.lower().encode(), v.encode()) for k, v in headers.items()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 49983),
        "state": {},
    }
    await asyncio.wait_for(app(scope, receive, send), 10)
    return len(chunks)


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


# The SDKs send both headers on every command stream.
SDK_HEADERS = {"Connect-Timeout-Ms": "60000", "Keepalive-Ping-Interval": "50"}


@pytest.mark.parametrize(
    "headers",
    [SDK_HEADERS, {"Connect-Timeout-Ms": "60000"}, {"Keepalive-Ping-Interval": "50"}, {}],
    ids=["sdk", "deadline", "keepalive", "none"],
)
async def test_client_leaving_a_command_stream_logs_no_error(
    headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    seen = await _leave_after_first_frame(
        "/process.Process/Start", headers, start_request("sleep 30")
    )
    assert seen >= 1  # the start event went out before the client left
    assert _errors(caplog) == []


async def test_client_leaving_a_directory_watch_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    seen = await _leave_after_first_frame(
        "/filesystem.Filesystem/WatchDir", SDK_HEADERS, {"path": str(tmp_path)}
    )
    assert seen >= 1
    assert _errors(caplog) == []
