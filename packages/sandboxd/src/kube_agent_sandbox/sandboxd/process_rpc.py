"""The ``process.Process`` Connect service: Start, Connect, List, SendInput, SendSignal, ...

Message shapes follow envd's ``process.proto`` in proto3 JSON (what ``e2b``'s generated client
sends and expects): ``StartRequest{process{cmd, args, envs, cwd}, pty{size{cols, rows}}, tag,
stdin}`` → a stream of ``{"event": ProcessEvent}``, where the event is ``start{pid}``,
``data{stdout|stderr|pty}``, ``end{exitCode, exited, status, error}`` or ``keepalive{}``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from starlette.requests import Request

from kube_agent_sandbox.sandboxd.connect_codec import (
    Code,
    ConnectError,
    Message,
    Method,
    b64decode,
    get_bool,
    get_int,
    get_object,
    get_str,
    get_str_list,
    get_str_map,
)
from kube_agent_sandbox.sandboxd.init_state import DaemonState
from kube_agent_sandbox.sandboxd.process_manager import (
    Event,
    ManagedProcess,
    ProcessError,
    ProcessManager,
    ProcessSpec,
    build_env,
)
from kube_agent_sandbox.sandboxd.users import (
    BadPathError,
    UnknownUserError,
    User,
    resolve_path,
    resolve_user,
    user_from_basic_auth,
)

KEEPALIVE_HEADER = "keepalive-ping-interval"
MAX_KEEPALIVE_SECONDS = 3600

_SIGNALS = {
    "SIGNAL_SIGTERM": signal.SIGTERM,
    "SIGNAL_SIGKILL": signal.SIGKILL,
    15: signal.SIGTERM,
    9: signal.SIGKILL,
}

_ERROR_CODES = {
    "not_found": Code.NOT_FOUND,
    "invalid": Code.INVALID_ARGUMENT,
    "failed": Code.INTERNAL,
}


def to_connect_error(exc: ProcessError) -> ConnectError:
    """The Connect error for a process-layer failure."""
    return ConnectError(_ERROR_CODES.get(exc.kind, Code.INTERNAL), str(exc))


def request_user(request: Request, state: DaemonState) -> User:
    """The user an RPC acts as (``Authorization: Basic``, else the default user).

    Raises:
        ConnectError: ``unauthenticated`` for an unknown or malformed user.
    """
    try:
        name = user_from_basic_auth(request.headers.get("authorization"))
        return resolve_user(name, default_user=state.default_user)
    except UnknownUserError as exc:
        raise ConnectError(Code.UNAUTHENTICATED, str(exc)) from exc


def keepalive_seconds(request: Request) -> float | None:
    """The keepalive period the client asked for, or None."""
    value = request.headers.get(KEEPALIVE_HEADER, "").strip()
    if not value.isdigit() or int(value) <= 0:
        return None
    return float(min(int(value), MAX_KEEPALIVE_SECONDS))


def parse_selector(message: Message) -> tuple[int | None, str | None]:
    """``(pid, tag)`` of a ``ProcessSelector`` field named ``process``.

    Raises:
        ConnectError: ``invalid_argument`` when neither is given.
    """
    selector = get_object(message, "process")
    if "pid" in selector:
        return get_int(selector, "pid"), None
    if "tag" in selector:
        return None, get_str(selector, "tag")
    raise ConnectError(Code.INVALID_ARGUMENT, "process: a pid or a tag is required")


def parse_signal(message: Message) -> int:
    """The signal number of a ``SendSignalRequest``.

    Raises:
        ConnectError: ``invalid_argument`` for a missing or unknown signal.
    """
    value = message.get("signal")
    signum = _SIGNALS.get(value) if isinstance(value, str | int) else None
    if signum is None:
        raise ConnectError(Code.INVALID_ARGUMENT, f"signal: unsupported value {value!r}")
    return int(signum)


async def event_stream(
    process: ManagedProcess,
    queue: asyncio.Queue[Event],
    *,
    keepalive: float | None,
    first: Event | None = None,
) -> AsyncGenerator[Message, None]:
    """Yield ``{"event": ...}`` messages from a subscription until the ``end`` event."""
    try:
        if first is not None:
            yield {"event": first}
        while True:
            try:
                if keepalive is None:
                    event = await queue.get()
                else:
                    event = await asyncio.wait_for(queue.get(), keepalive)
            except TimeoutError:
                yield {"event": {"keepalive": {}}}
                continue
            yield {"event": event}
            if "end" in event:
                return
    finally:
        process.unsubscribe(queue)


async def _write_input(process: ManagedProcess, data_input: Message) -> None:
    """Write a ``ProcessInput`` (``stdin`` or ``pty`` bytes, base64) to the process."""
    field = "pty" if "pty" in data_input else "stdin"
    data = b64decode(data_input.get(field), field=f"input.{field}")
    try:
        await process.write_input(data)
    except ProcessError as exc:
        raise to_connect_error(exc) from exc


class ProcessService:
    """Handlers of ``process.Process``."""

    def __init__(self, state: DaemonState, manager: ProcessManager) -> None:
        """Create the service.

        Args:
            state: The daemon's configuration.
            manager: The process table.
        """
        self.state = state
        self.manager = manager

    def methods(self) -> dict[str, Method]:
        """The served RPCs by path."""
        prefix = "/process.Process/"
        return {
            prefix + "Start": Method(stream=self.start),
            prefix + "Connect": Method(stream=self.connect),
            prefix + "List": Method(unary=self.list),
            prefix + "SendInput": Method(unary=self.send_input),
            prefix + "SendSignal": Method(unary=self.send_signal),
            prefix + "CloseStdin": Method(unary=self.close_stdin),
            prefix + "Update": Method(unary=self.update),
            prefix + "StreamInput": Method(client_stream=self.stream_input),
        }

    def _spec(self, request: Request, message: Message) -> ProcessSpec:
        user = request_user(request, self.state)
        config = get_object(message, "process")
        cmd = get_str(config, "cmd")
        if not cmd:
            raise ConnectError(Code.INVALID_ARGUMENT, "process.cmd is required")
        envs = get_str_map(config, "envs")
        cwd_value = config.get("cwd")
        try:
            if cwd_value is not None and get_str(config, "cwd"):
                cwd = resolve_path(get_str(config, "cwd"), user)
            elif self.state.default_workdir:
                cwd = resolve_path(self.state.default_workdir, user)
            else:
                cwd = user.home if os.path.isdir(user.home) else "/"
        except BadPathError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"cwd: {exc}") from exc
        pty: tuple[int, int] | None = None
        if message.get("pty") is not None:
            size = get_object(get_object(message, "pty"), "size")
            cols, rows = get_int(size, "cols", default=80), get_int(size, "rows", default=24)
            if not (0 < cols < 65536 and 0 < rows < 65536):
                raise ConnectError(Code.INVALID_ARGUMENT, "pty.size: cols and rows must be > 0")
            pty = (cols, rows)
        tag = get_str(message, "tag") if message.get("tag") is not None else None
        return ProcessSpec(
            cmd=cmd,
            args=get_str_list(config, "args"),
            envs=envs,
            cwd=cwd,
            env=build_env(user=user, init_env=self.state.env_vars, request_env=envs),
            user=user,
            tag=tag,
            stdin=get_bool(message, "stdin"),
            pty=pty,
        )

    async def start(self, request: Request, message: Message) -> AsyncGenerator[Message, None]:
        """``Start``: spawn a process and stream its events."""
        spec = self._spec(request, message)
        try:
            process, queue = await self.manager.start(spec)
        except ProcessError as exc:
            raise to_connect_error(exc) from exc
        async for item in event_stream(process, queue, keepalive=keepalive_seconds(request)):
            yield item

    async def connect(self, request: Request, message: Message) -> AsyncGenerator[Message, None]:
        """``Connect``: attach to a running process; its events from now on."""
        pid, tag = parse_selector(message)
        try:
            process = self.manager.find(pid=pid, tag=tag)
        except ProcessError as exc:
            raise to_connect_error(exc) from exc
        queue = process.subscribe()
        async for item in event_stream(
            process,
            queue,
            keepalive=keepalive_seconds(request),
            first={"start": {"pid": process.pid}},
        ):
            yield item

    async def list(self, request: Request, message: Message) -> Message:
        """``List``: the running processes."""
        del request, message
        processes = [process.info() for process in self.manager.running_processes()]
        return {"processes": processes} if processes else {}

    def _find(self, message: Message) -> ManagedProcess:
        pid, tag = parse_selector(message)
        try:
            return self.manager.find(pid=pid, tag=tag)
        except ProcessError as exc:
            raise to_connect_error(exc) from exc

    async def send_input(self, request: Request, message: Message) -> Message:
        """``SendInput``: write bytes to stdin (or the terminal)."""
        del request
        await _write_input(self._find(message), get_object(message, "input"))
        return {}

    async def stream_input(self, request: Request, messages: AsyncIterator[Message]) -> Message:
        """``StreamInput``: ``start{process}``, then ``data{input}`` / ``keepalive`` messages."""
        del request
        process: ManagedProcess | None = None
        async for message in messages:
            if "start" in message:
                if process is not None:
                    raise ConnectError(Code.INVALID_ARGUMENT, "the stream was already started")
                process = self._find(get_object(message, "start"))
            elif "data" in message:
                if process is None:
                    raise ConnectError(Code.INVALID_ARGUMENT, "the first message must be start")
                await _write_input(process, get_object(get_object(message, "data"), "input"))
            elif "keepalive" not in message:
                raise ConnectError(Code.INVALID_ARGUMENT, "unknown stream input message")
        if process is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "the stream had no start message")
        return {}

    async def close_stdin(self, request: Request, message: Message) -> Message:
        """``CloseStdin``: EOF on stdin."""
        del request
        process = self._find(message)
        try:
            await process.close_stdin()
        except ProcessError as exc:
            raise to_connect_error(exc) from exc
        return {}

    async def send_signal(self, request: Request, message: Message) -> Message:
        """``SendSignal``: SIGTERM or SIGKILL to the process and its children."""
        del request
        signum = parse_signal(message)
        process = self._find(message)
        try:
            process.send_signal(signum)
        except ProcessError as exc:
            raise to_connect_error(exc) from exc
        return {}

    async def update(self, request: Request, message: Message) -> Message:
        """``Update``: resize the process's terminal."""
        del request
        process = self._find(message)
        size: dict[str, Any] = get_object(get_object(message, "pty"), "size")
        cols, rows = get_int(size, "cols"), get_int(size, "rows")
        if not (0 < cols < 65536 and 0 < rows < 65536):
            raise ConnectError(Code.INVALID_ARGUMENT, "pty.size: cols and rows must be > 0")
        try:
            process.resize(cols, rows)
        except ProcessError as exc:
            raise to_connect_error(exc) from exc
        return {}
