"""Run commands in a pod through the Kubernetes exec API (``pods/exec`` over a WebSocket).

The gateway's exec fallback needs a streaming exec, with stdin, over the gateway's own
Kubernetes credentials. This opens ``/api/v1/namespaces/NS/pods/NAME/exec`` on the apiserver
with aiohttp (the controller runtime's HTTP stack), negotiating ``v5.channel.k8s.io`` (stdin can
be closed, so ``cat > file`` ends) or ``v4``; the frame format and the exit status come from the
SDK's pure protocol helpers (:mod:`kube_agent_sandbox.sdk.execproto`).
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from kube_agent_sandbox.controller.runtime import ClusterConfig
from kube_agent_sandbox.sdk import execproto
from kube_agent_sandbox.sdk.errors import ExecFailedError

logger = logging.getLogger(__name__)

USER_AGENT = "agent-sandbox-gateway/0.1.0 (python; aiohttp)"
MAX_MESSAGE = 16 * 1024 * 1024
STDIN_CHUNK = 256 * 1024


class PodExecError(Exception):
    """The exec could not be opened (no permission, pod gone, apiserver unreachable).

    Attributes:
        status: the HTTP status of the refused upgrade, or 0 for a transport failure.
    """

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ExecStream:
    """One running command: write stdin, read ``(channel, bytes)`` until it ends.

    Attributes:
        exit_code: the command's exit code once the status arrived (None before).
        failure: why the command could not run, when the status says so.
    """

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self.exit_code: int | None = None
        self.failure: str | None = None

    @property
    def can_close_stdin(self) -> bool:
        """The negotiated protocol (v5) can signal the end of stdin."""
        return self._ws.protocol == execproto.PROTOCOL_V5

    async def write(self, data: bytes) -> None:
        """Send ``data`` to the command's stdin."""
        view = memoryview(data)
        for start in range(0, len(view), STDIN_CHUNK):
            await self._ws.send_bytes(
                execproto.frame(execproto.STDIN, bytes(view[start : start + STDIN_CHUNK]))
            )

    async def close_stdin(self) -> None:
        """Close the command's stdin (v5 only; a no-op on v4)."""
        if self.can_close_stdin:
            await self._ws.send_bytes(execproto.close_stdin_frame())

    async def resize(self, cols: int, rows: int) -> None:
        """Set the terminal size of a command started with a TTY."""
        await self._ws.send_bytes(execproto.resize_frame(cols, rows))

    async def read(self) -> tuple[int, bytes] | None:
        """The next stdout/stderr chunk, or None once the command ended."""
        while True:
            message = await self._ws.receive()
            if message.type != aiohttp.WSMsgType.BINARY:
                if message.type in (aiohttp.WSMsgType.TEXT,):
                    continue
                return None
            try:
                channel, payload = execproto.split(message.data)
            except ExecFailedError:
                continue
            if channel == execproto.ERROR:
                try:
                    self.exit_code = execproto.exit_code(payload)
                except ExecFailedError as err:
                    self.failure = str(err)
                continue
            if channel in (execproto.STDOUT, execproto.STDERR) and payload:
                return channel, payload

    async def close(self) -> None:
        """Close the stream (the command may keep running in the pod)."""
        await self._ws.close()


@dataclass(frozen=True)
class Output:
    """A finished command's output."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    failure: str | None = None


class PodExec:
    """Opens exec streams with the gateway's cluster credentials.

    Args:
        config: where the apiserver is and how to authenticate.
    """

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ssl_setting: ssl.SSLContext | bool = self.config.ssl_context or True
            # No "Accept: application/json": kubelets answer the upgrade with 406 then.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ssl_setting),
                headers={"User-Agent": USER_AGENT},
            )
        return self._session

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    @contextlib.asynccontextmanager
    async def open(
        self,
        namespace: str,
        pod: str,
        command: Sequence[str],
        *,
        container: str | None = None,
        stdin: bool = False,
        tty: bool = False,
    ) -> AsyncIterator[ExecStream]:
        """An exec stream running ``command`` (argv) in ``pod``; closed on exit.

        With ``tty`` the command runs on a terminal: its stderr comes on stdout, and
        :meth:`ExecStream.resize` sets the terminal's size.

        Raises:
            PodExecError: if the upgrade is refused or the apiserver cannot be reached.
        """
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
        params: list[tuple[str, str]] = [("command", arg) for arg in command]
        # With a TTY the kubelet merges stderr into stdout and refuses a stderr stream.
        params += [("stdout", "true"), ("tty" if tty else "stderr", "true")]
        if stdin:
            params.append(("stdin", "true"))
        if container:
            params.append(("container", container))
        headers = await self.config.request_headers()
        headers.pop("Accept", None)
        try:
            ws = await self._sess().ws_connect(
                self.config.host + path,
                params=params,
                protocols=execproto.SUBPROTOCOLS,
                headers=headers,
                max_msg_size=MAX_MESSAGE,
                server_hostname=self.config.tls_server_name,
                autoping=True,
            )
        except aiohttp.WSServerHandshakeError as err:
            raise PodExecError(
                f"exec refused: {err.status} {err.message}", status=err.status
            ) from err
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise PodExecError(f"exec failed: {err!r}") from err
        stream = ExecStream(ws)
        try:
            yield stream
        finally:
            await stream.close()

    async def run(
        self,
        namespace: str,
        pod: str,
        command: Sequence[str],
        *,
        container: str | None = None,
        stdin: bytes | None = None,
    ) -> Output:
        """Run ``command`` to completion and collect its output.

        Raises:
            PodExecError: if the exec cannot be opened.
        """
        out: list[bytes] = []
        err: list[bytes] = []
        async with self.open(
            namespace, pod, command, container=container, stdin=stdin is not None
        ) as stream:
            if stdin is not None:
                await stream.write(stdin)
                await stream.close_stdin()
            while (chunk := await stream.read()) is not None:
                (out if chunk[0] == execproto.STDOUT else err).append(chunk[1])
        code = stream.exit_code if stream.exit_code is not None else -1
        return Output(code, b"".join(out), b"".join(err), stream.failure)


def container_of(pod: dict[str, Any]) -> str | None:
    """The sandbox container of a pod (its first container)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return str(containers[0]["name"]) if containers else None
