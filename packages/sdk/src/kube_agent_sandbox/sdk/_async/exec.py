"""AsyncExecCalls: run commands in a Sandbox's Pod through the Kubernetes exec API (one-shot,
streaming or interactive) and read the Pod's log; :class:`AsyncExecSession` is an open stream.

Hand-written source: ``_sync/exec.py`` is generated from it by ``scripts/unasync_sdk.py``.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from kube_agent_sandbox.sdk import execproto, readiness
from kube_agent_sandbox.sdk._async.objects import AsyncObjectCalls
from kube_agent_sandbox.sdk.constants import PODS, SANDBOXES
from kube_agent_sandbox.sdk.errors import ExecFailedError, ExecTimeoutError, SandboxError
from kube_agent_sandbox.sdk.execproto import ExecResult
from kube_agent_sandbox.sdk.paths import exec_params, resource_path
from kube_agent_sandbox.sdk.tracing import command_executable

if TYPE_CHECKING:
    from httpx_ws import AsyncWebSocketSession

logger = logging.getLogger(__name__)

STDIN_CHUNK = 256 * 1024


class AsyncExecSession:
    """An open exec stream: write stdin, read ``(channel, data)`` until the command ends.

    Attributes:
        exit_code: set once the error channel reported the end of the command.
    """

    def __init__(self, ws: AsyncWebSocketSession) -> None:
        self._ws = ws
        self.exit_code: int | None = None
        self.can_close_stdin = ws.subprotocol == execproto.PROTOCOL_V5

    async def write(self, data: bytes) -> None:
        """Send ``data`` to the command's stdin."""
        for start in range(0, len(data), STDIN_CHUNK):
            await self._ws.send_bytes(
                execproto.frame(execproto.STDIN, data[start : start + STDIN_CHUNK])
            )

    async def close_stdin(self) -> None:
        """Signal end of input (v5 protocol; a no-op on v4 servers)."""
        if self.can_close_stdin:
            await self._ws.send_bytes(execproto.close_stdin_frame())

    async def resize(self, width: int, height: int) -> None:
        """Resize the remote terminal (``tty`` sessions)."""
        await self._ws.send_bytes(execproto.resize_frame(width, height))

    async def read(self, timeout: float | None = None) -> tuple[int, bytes] | None:
        """The next stdout/stderr chunk, or ``None`` when the command ended.

        Raises:
            TimeoutError: nothing arrived within ``timeout`` seconds.
            ExecFailedError: the command could not run.
        """
        from wsproto.events import BytesMessage, CloseConnection  # loaded with the websocket

        while True:
            try:
                event = await self._ws.receive(timeout)
            except queue.Empty as err:
                raise TimeoutError("no output") from err
            if isinstance(event, CloseConnection):
                return None
            if not isinstance(event, BytesMessage):
                continue
            channel, payload = execproto.split(bytes(event.data))
            if channel == execproto.ERROR:
                self.exit_code = execproto.exit_code(payload)
                return None
            if channel in (execproto.STDOUT, execproto.STDERR) and payload:
                return channel, payload


class AsyncExecCalls(AsyncObjectCalls):
    """The exec and log calls of :class:`~kube_agent_sandbox.sdk.AsyncSandboxClient`."""

    async def _pod(self, name: str, namespace: str) -> str:
        return readiness.pod_name(await self._get(SANDBOXES, name, namespace=namespace))

    @asynccontextmanager
    async def exec_session(
        self,
        name: str,
        command: Sequence[str],
        *,
        namespace: str | None = None,
        container: str | None = None,
        stdin: bool = False,
        tty: bool = False,
    ) -> AsyncIterator[AsyncExecSession]:
        """An open exec stream to the Sandbox's Pod (for streaming and interactive use)."""
        ns = self._ns(namespace)
        pod = await self._pod(name, ns)
        api = await self.api()
        params = exec_params(list(command), container=container, stdin=stdin, tty=tty)
        async with api.websocket(
            resource_path(PODS, ns, pod, "exec"),
            resource="pods/exec",
            params=params,
            subprotocols=execproto.SUBPROTOCOLS,
        ) as ws:
            yield AsyncExecSession(ws)

    async def exec(
        self,
        name: str,
        command: Sequence[str],
        *,
        namespace: str | None = None,
        container: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = 60.0,
        on_output: Callable[[int, bytes], None] | None = None,
        kill_on_timeout: bool = False,
    ) -> ExecResult:
        """Run ``command`` (argv) in the Sandbox through the Kubernetes exec API.

        Args:
            name: the Sandbox.
            command: argv (use ``["sh", "-c", "..."]`` for a command line).
            namespace: its namespace.
            container: the container (default: the Pod's first).
            stdin: input for the command.
            timeout: seconds; ``None`` waits forever.
            on_output: called with ``(1 or 2, chunk)`` as output arrives (streaming).
            kill_on_timeout: run the command under ``sh`` so its PID is known, and kill it
                and its descendants when it outlives ``timeout`` (the image needs ``sh``).

        Returns:
            stdout, stderr and the exit code.

        Raises:
            ExecTimeoutError: the command outlived ``timeout``: the stream is closed and
                control returns. The exec API cannot signal a process, so without
                ``kill_on_timeout`` the command may keep running in the container.
            ExecFailedError: the command could not run (e.g. not found).
            PermissionDeniedError: no ``create`` on ``pods/exec``.
        """
        data = stdin.encode() if isinstance(stdin, str) else stdin
        deadline = None if timeout is None else time.monotonic() + timeout
        argv = list(command)
        prefix = execproto.PidPrefix() if kill_on_timeout else None
        out: list[bytes] = []
        err: list[bytes] = []
        timed_out = False
        async with self.exec_session(
            name,
            execproto.killable(argv) if kill_on_timeout else argv,
            namespace=namespace,
            container=container,
            stdin=data is not None,
        ) as session:
            if data is not None:
                await session.write(data)
                await session.close_stdin()
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    timed_out = True
                    break
                try:
                    chunk = await session.read(remaining)
                except TimeoutError:
                    continue
                if chunk is None:
                    break
                channel, payload = chunk
                if channel == execproto.STDERR and prefix is not None:
                    payload = prefix.feed(payload)
                    if not payload:
                        continue
                (out if channel == execproto.STDOUT else err).append(payload)
                if on_output is not None:
                    on_output(channel, payload)
        if timed_out:
            if prefix is not None and prefix.pid:
                await self._kill(name, prefix.pid, namespace=namespace, container=container)
            raise ExecTimeoutError(
                f"command {argv!r} still running after {timeout:g}s"
                + (" (killed)" if prefix is not None and prefix.pid else ""),
                stdout=b"".join(out),
                stderr=b"".join(err),
            )
        if session.exit_code is None:
            raise ExecFailedError(f"exec stream of {argv!r} ended without an exit status")
        return ExecResult(session.exit_code, b"".join(out), b"".join(err))

    async def _kill(
        self, name: str, pid: str, *, namespace: str | None, container: str | None
    ) -> None:
        """Kill a timed-out command and its descendants (best effort, errors logged)."""
        if not pid.isdigit():
            return
        try:
            await self.exec(
                name,
                ["sh", "-c", execproto.KILL_TREE_SCRIPT, "sh", pid],
                namespace=namespace,
                container=container,
                timeout=15,
            )
        except SandboxError as err:
            logger.warning("could not kill timed-out command (pid %s) in %s: %s", pid, name, err)

    async def run(
        self,
        name: str,
        command: str,
        *,
        namespace: str | None = None,
        timeout: float = 60.0,
        stdin: bytes | str | None = None,
    ) -> ExecResult:
        """Run a shell command line (``sh -c command``); killed when it outlives ``timeout``.

        Traced as upstream's ``run``: the program's name (not its arguments) and the exit code.
        """
        attributes = {
            "sandbox.name": name,
            "sandbox.command.executable": command_executable(command),
        }
        with self._tracer.span("run", attributes):
            result = await self.exec(
                name,
                ["sh", "-c", command],
                namespace=namespace,
                timeout=timeout,
                stdin=stdin,
                kill_on_timeout=True,
            )
            self._tracer.set_attributes({"sandbox.exit_code": result.exit_code})
        return result

    async def logs(
        self,
        name: str,
        *,
        namespace: str | None = None,
        container: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
    ) -> AsyncIterator[str]:
        """Lines of the Sandbox Pod's log."""
        ns = self._ns(namespace)
        pod = await self._pod(name, ns)
        params = {"follow": "true" if follow else "false"}
        if container:
            params["container"] = container
        if tail_lines is not None:
            params["tailLines"] = str(tail_lines)
        api = await self.api()
        async for line in api.stream_lines(
            resource_path(PODS, ns, pod, "log"), resource="pods/log", params=params
        ):
            yield line
