"""Sandboxes through the gateway's E2B protocol: the REST control plane and the data plane.

The gateway's ``/mcp`` endpoint uses it in-process (an ASGI transport over the gateway's own
app, carrying the caller's API key, so tenant scoping is exactly the E2B clients'), and
``agent-sandbox mcp --gateway URL`` over the network. Data-plane calls name the sandbox in the
``E2b-Sandbox-Id``/``E2b-Sandbox-Port`` headers, as the E2B SDK does with ``E2B_SANDBOX_URL``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from collections.abc import AsyncIterator
from typing import Any, Final

import httpx

from kube_agent_sandbox.sdk.mcp import interpreter
from kube_agent_sandbox.sdk.mcp.backend import (
    CodeOutput,
    CommandOutput,
    FileEntry,
    SandboxGone,
    SandboxInfo,
    Source,
    ToolFailure,
)

ENVD_PORT: Final = 49983
_ENVELOPE: Final = struct.Struct(">BI")
_END_STREAM: Final = 0x02
_BACKSTOP_SECONDS: Final = 5.0
"""Grace past a command's time limit for the daemon's own deadline to end the stream."""
_ENTRY_TYPES: Final = {"FILE_TYPE_FILE": "file", "FILE_TYPE_DIRECTORY": "dir"}


def envelope(message: dict[str, Any]) -> bytes:
    """One Connect streaming frame (flags 0, big-endian length, JSON)."""
    payload = json.dumps(message).encode()
    return _ENVELOPE.pack(0, len(payload)) + payload


async def read_envelopes(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[int, bytes]]:
    """The ``(flags, payload)`` frames of a Connect stream, as they arrive."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while len(buffer) >= _ENVELOPE.size:
            flags, length = _ENVELOPE.unpack_from(buffer)
            if len(buffer) < _ENVELOPE.size + length:
                break
            yield flags, buffer[_ENVELOPE.size : _ENVELOPE.size + length]
            buffer = buffer[_ENVELOPE.size + length :]


def _info(body: dict[str, Any]) -> SandboxInfo:
    return SandboxInfo(
        sandbox_id=str(body.get("sandboxID", "")),
        state=str(body.get("state", "running")),
        template=body.get("templateID"),
        expires_at=body.get("endAt"),
        details={k: str(v) for k, v in (body.get("metadata") or {}).items()},
    )


class E2BBackend:
    """The sandboxes of one API key's tenant.

    Args:
        client: httpx client whose base URL is the gateway (its transport may be in-process).
        api_key: The tenant's key (``X-API-KEY``).
    """

    def __init__(self, client: httpx.AsyncClient, api_key: str) -> None:
        self._http = client
        self._key = {"X-API-KEY": api_key}
        self._tokens: dict[str, str] = {}

    async def _call(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, url, headers=self._key, **kwargs)
        except httpx.HTTPError as exc:
            raise ToolFailure(f"the gateway could not be reached: {exc!r}; retry later") from exc
        if response.status_code == 401:
            raise ToolFailure("the gateway refused the API key (revoked or wrong)")
        return response

    def _not_found(self, sandbox_id: str) -> ToolFailure:
        return ToolFailure(
            f"no sandbox {sandbox_id!r} of yours: it never existed, expired or was deleted. "
            "list_sandboxes shows yours; get_sandbox makes a new one"
        )

    def _checked(self, response: httpx.Response, sandbox_id: str | None, what: str) -> Any:
        if response.status_code == 404 and sandbox_id is not None:
            raise self._not_found(sandbox_id)
        if response.status_code >= 400:
            raise ToolFailure(f"{what} failed ({response.status_code}): {_message(response)}")
        return response.json() if response.content else None

    async def get_sandbox(
        self, source: Source, name: str, *, timeout_seconds: int, env: dict[str, str]
    ) -> SandboxInfo:
        """A claim on the warm pool named ``name`` (the gateway serves pools, not creates)."""
        if source != "pool":
            raise ToolFailure(
                "the gateway only hands out sandboxes from warm pools: use source 'pool'"
            )
        body = {"templateID": name, "timeout": timeout_seconds, "envVars": env}
        response = await self._call("POST", "/v2/sandboxes", json=body)
        if response.status_code == 404:
            raise ToolFailure(
                f"no warm pool or template {name!r} for you: ask the operator which exist"
            )
        created = self._checked(response, None, "get_sandbox")
        self._tokens[created["sandboxID"]] = created.get("envdAccessToken") or ""
        return _info({**created, "state": "running"})

    async def list_sandboxes(self) -> list[SandboxInfo]:
        """``GET /v2/sandboxes`` (running and paused)."""
        listed = self._checked(await self._call("GET", "/v2/sandboxes"), None, "list")
        return [_info(item) for item in listed or []]

    async def describe(self, sandbox_id: str) -> SandboxInfo:
        """``GET /sandboxes/{id}``."""
        return _info(await self._detail(sandbox_id))

    async def _detail(self, sandbox_id: str) -> dict[str, Any]:
        response = await self._call("GET", f"/sandboxes/{sandbox_id}")
        detail: dict[str, Any] = self._checked(response, sandbox_id, "describe")
        self._tokens[sandbox_id] = detail.get("envdAccessToken") or ""
        return detail

    async def _data_headers(self, sandbox_id: str, port: int) -> dict[str, str]:
        if sandbox_id not in self._tokens:
            await self._detail(sandbox_id)
        return {
            "E2b-Sandbox-Id": sandbox_id,
            "E2b-Sandbox-Port": str(port),
            "X-Access-Token": self._tokens[sandbox_id],
        }

    async def _failed(self, sandbox_id: str, response: httpx.Response, what: str) -> ToolFailure:
        """Why a data-plane call failed: the sandbox is gone, or what the daemon said."""
        self._tokens.pop(sandbox_id, None)
        probe = await self._call("GET", f"/sandboxes/{sandbox_id}")
        if probe.status_code == 404:
            return SandboxGone(sandbox_id)
        if probe.status_code < 400 and probe.json().get("state") == "paused":
            return ToolFailure(f"sandbox {sandbox_id!r} is suspended: call resume_sandbox first")
        return ToolFailure(f"{what} failed ({response.status_code}): {_message(response)}")

    async def run_command(
        self,
        sandbox_id: str,
        command: str,
        *,
        time_limit: float,
        cwd: str | None,
        env: dict[str, str],
    ) -> CommandOutput:
        """``process.Process/Start`` of ``sh -c command``, streamed until it ends or times out.

        The daemon ends the stream at the deadline (``Connect-Timeout-Ms``) with the output so
        far and the pid, which is then killed: this works even where the response arrives
        whole (the gateway's in-process transport). The local timeout is the backstop.
        """
        headers = await self._data_headers(sandbox_id, ENVD_PORT)
        headers["Content-Type"] = "application/connect+json"
        headers["Connect-Timeout-Ms"] = str(max(1, int(time_limit * 1000)))
        process: dict[str, Any] = {"cmd": "/bin/sh", "args": ["-c", command], "envs": env}
        if cwd:
            process["cwd"] = cwd
        stdout, stderr = bytearray(), bytearray()
        state: dict[str, Any] = {}
        try:
            async with asyncio.timeout(time_limit + _BACKSTOP_SECONDS):
                await self._stream_process(sandbox_id, headers, process, stdout, stderr, state)
        except TimeoutError:
            state["timed_out"] = True
        if state.get("timed_out"):
            await self._kill(sandbox_id, state.get("pid"))
            out, err = stdout.decode(errors="replace"), stderr.decode(errors="replace")
            return CommandOutput(None, out, err, timed_out=True)
        return CommandOutput(
            state.get("exit_code"),
            stdout.decode(errors="replace"),
            stderr.decode(errors="replace"),
        )

    async def _stream_process(
        self,
        sandbox_id: str,
        headers: dict[str, str],
        process: dict[str, Any],
        stdout: bytearray,
        stderr: bytearray,
        state: dict[str, Any],
    ) -> None:
        body = envelope({"process": process})
        url = "/process.Process/Start"
        async with self._http.stream("POST", url, content=body, headers=headers) as response:
            if response.status_code >= 400:
                await response.aread()
                raise await self._failed(sandbox_id, response, "run_command")
            async for flags, payload in read_envelopes(response.aiter_bytes()):
                message = json.loads(payload or b"{}")
                if flags & _END_STREAM:
                    if (message.get("error") or {}).get("code") == "deadline_exceeded":
                        state["timed_out"] = True
                    elif message.get("error"):
                        raise ToolFailure(f"run_command failed: {message['error']}")
                    return
                _fold_event(message.get("event") or {}, stdout, stderr, state)

    async def _kill(self, sandbox_id: str, pid: Any) -> None:
        if not isinstance(pid, int):
            return
        headers = await self._data_headers(sandbox_id, ENVD_PORT)
        body = {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}
        await self._http.post("/process.Process/SendSignal", json=body, headers=headers)

    async def run_code(
        self, sandbox_id: str, code: str, *, language: str, time_limit: float
    ) -> CodeOutput:
        """``POST /execute`` on the code interpreter's port."""
        headers = await self._data_headers(sandbox_id, interpreter.INTERPRETER_PORT)
        body = interpreter.execute_body(code, language, time_limit)
        try:
            response = await self._http.post(
                "/execute", json=body, headers=headers, timeout=time_limit + 10
            )
        except httpx.TimeoutException as exc:
            raise ToolFailure(f"the code ran longer than {time_limit} s") from exc
        if response.status_code >= 400:
            raise await self._failed(sandbox_id, response, "run_code")
        return interpreter.read_events(response.text.splitlines())

    async def _envd(self, sandbox_id: str, method: str, url: str, what: str, **kw: Any) -> Any:
        headers = await self._data_headers(sandbox_id, ENVD_PORT)
        response = await self._http.request(method, url, headers=headers, **kw)
        if response.status_code == 404 and "sandbox" not in _message(response).lower():
            raise ToolFailure(f"{what}: no such file or directory")
        if response.status_code >= 400:
            raise await self._failed(sandbox_id, response, what)
        return response

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        """``GET /files``."""
        response = await self._envd(sandbox_id, "GET", "/files", path, params={"path": path})
        content: bytes = response.content
        return content

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        """``POST /files`` (multipart, parents created by the daemon)."""
        files = {"file": (path, data, "application/octet-stream")}
        await self._envd(sandbox_id, "POST", "/files", path, params={"path": path}, files=files)

    async def list_files(self, sandbox_id: str, path: str) -> list[FileEntry]:
        """``filesystem.Filesystem/ListDir`` at depth 1."""
        body = {"path": path, "depth": 1}
        url = "/filesystem.Filesystem/ListDir"
        response = await self._envd(sandbox_id, "POST", url, path, json=body)
        return [
            FileEntry(
                name=e.get("name", ""),
                path=e.get("path", ""),
                type=_ENTRY_TYPES.get(e.get("type", ""), "other"),
                size=int(e["size"]) if "size" in e else None,
            )
            for e in response.json().get("entries", [])
        ]

    async def delete_file(self, sandbox_id: str, path: str) -> None:
        """``filesystem.Filesystem/Remove``."""
        url = "/filesystem.Filesystem/Remove"
        await self._envd(sandbox_id, "POST", url, path, json={"path": path})

    async def suspend(self, sandbox_id: str) -> None:
        """``POST /sandboxes/{id}/pause``."""
        response = await self._call("POST", f"/sandboxes/{sandbox_id}/pause")
        if response.status_code != 409:  # already paused
            self._checked(response, sandbox_id, "suspend")

    async def resume(self, sandbox_id: str) -> None:
        """``POST /sandboxes/{id}/connect`` (resumes a paused sandbox and waits)."""
        response = await self._call("POST", f"/sandboxes/{sandbox_id}/connect", json={})
        connected = self._checked(response, sandbox_id, "resume")
        self._tokens[sandbox_id] = connected.get("envdAccessToken") or ""

    async def delete(self, sandbox_id: str) -> None:
        """``DELETE /sandboxes/{id}``."""
        self._checked(await self._call("DELETE", f"/sandboxes/{sandbox_id}"), sandbox_id, "delete")
        self._tokens.pop(sandbox_id, None)


def _fold_event(
    event: dict[str, Any], stdout: bytearray, stderr: bytearray, state: dict[str, Any]
) -> None:
    if "start" in event:
        state["pid"] = event["start"].get("pid")
    elif "data" in event:
        data = event["data"]
        stdout += base64.b64decode(data.get("stdout", ""))
        stderr += base64.b64decode(data.get("stderr", ""))
    elif "end" in event:
        state["exit_code"] = int(event["end"].get("exitCode", 0))


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(body, dict):
        return str(body.get("message") or body.get("error") or body)[:500]
    return str(body)[:500]
