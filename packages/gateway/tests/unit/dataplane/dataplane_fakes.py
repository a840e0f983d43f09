"""Stand-ins for the gateway state the data plane reads, and a tiny real HTTP server.

Plain objects with the same interface as the gateway's index, tokens, activity tracker and
resumer (no Kubernetes API involved): the data plane only reads records and calls hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty as pty_module
import socket
import struct
import termios
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import uvicorn

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.gateway.annotations import ANNOTATION_PUBLIC_TRAFFIC

ENVD_TOKEN = "envd-token-of-uid-1"
TRAFFIC_TOKEN = "traffic-token-of-uid-1"
SANDBOX_ID = "abcdefghij0123456789"


@dataclass(frozen=True)
class Record:
    """A sandbox record (same fields as ``gateway.index.SandboxRecord``)."""

    namespace: str
    claim: dict[str, Any]
    sandbox: dict[str, Any] | None
    pod: dict[str, Any] | None
    ready: bool
    suspended: bool


def make_record(
    *,
    sandbox_id: str = SANDBOX_ID,
    ready: bool = True,
    suspended: bool = False,
    annotations: dict[str, str] | None = None,
    mode: str = "Running",
    pod_annotations: dict[str, str] | None = None,
    public_traffic: bool = True,
) -> Record:
    """A record of one sandbox in namespace ``tenant-a`` (user ports public: E2B's default)."""
    claim_meta: dict[str, Any] = {"name": sandbox_id, "namespace": "tenant-a", "uid": "uid-1"}
    if not public_traffic:
        claim_meta["annotations"] = {ANNOTATION_PUBLIC_TRAFFIC: "false"}
    return Record(
        namespace="tenant-a",
        claim={"metadata": claim_meta},
        sandbox={
            "metadata": {"name": sandbox_id, "annotations": dict(annotations or {})},
            "spec": {"operatingMode": mode},
        },
        pod={
            "metadata": {
                "name": sandbox_id,
                "uid": "pod-uid-1",
                "annotations": pod_annotations or {},
            },
            "status": {"podIP": "10.0.0.7"},
        },
        ready=ready,
        suspended=suspended,
    )


@dataclass
class Index:
    """Records by id; every pod lives at ``host`` with ``ports`` mapped."""

    records: dict[str, Record] = field(default_factory=dict)
    host: str = "127.0.0.1"
    ports: dict[int, int] = field(default_factory=dict)
    lookups: int = 0

    def lookup(self, sandbox_id: str) -> Record | None:
        self.lookups += 1
        return self.records.get(sandbox_id)

    def address(self, record: Record, port: int) -> tuple[str, int] | None:
        if record.pod is None:
            return None
        return self.host, self.ports.get(port, port)


class Tokens:
    """Fixed tokens for claim ``uid-1``."""

    def envd_access_token(self, claim_uid: str) -> str:
        assert claim_uid == "uid-1"
        return ENVD_TOKEN

    def traffic_access_token(self, claim_uid: str) -> str:
        assert claim_uid == "uid-1"
        return TRAFFIC_TOKEN


@dataclass
class Activity:
    """Counts the hooks."""

    requests: int = 0
    opened: int = 0
    closed: int = 0

    def request_started(self, record: Any) -> None:
        self.requests += 1

    def stream_opened(self, record: Any) -> None:
        self.opened += 1

    def stream_closed(self, record: Any) -> None:
        self.closed += 1


@dataclass
class Resumer:
    """Marks the record ready in the index after ``delay`` seconds."""

    index: Index
    delay: float = 0.0
    calls: int = 0

    async def resume(self, record: Record, *, on_traffic: bool = False) -> Record:
        self.calls += 1
        await asyncio.sleep(self.delay)
        fresh = replace(record, ready=True, suspended=False)
        self.index.records[record.claim["metadata"]["name"]] = fresh
        return fresh


@dataclass
class Options:
    """The gateway options the data plane reads."""

    domain: str | None = "sbx.example.test"


@dataclass
class State:
    """The gateway state the data plane reads (no Kubernetes client: no exec fallback)."""

    index: Index = field(default_factory=Index)
    tokens: Tokens = field(default_factory=Tokens)
    activity: Activity | None = field(default_factory=Activity)
    resumer: Resumer | None = None
    options: Options = field(default_factory=Options)


def free_port() -> int:
    """A TCP port nothing listens on (right now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serve(app: Any) -> AsyncIterator[int]:
    """Run ``app`` with uvicorn on a free local port for the duration; yields the port."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        http="h11",
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = int(server.servers[0].sockets[0].getsockname()[1])
    try:
        yield port
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def serve_hypercorn(
    app: Any, *, tls_files: tuple[str, str] | None = None, reloader: Any = None
) -> AsyncIterator[int]:
    """Run ``app`` as ``serve --http2`` does (hypercorn: HTTP/1.1 and HTTP/2); yields the port."""
    from kube_agent_sandbox.gateway import cli
    from kube_agent_sandbox.gateway.config import GatewayOptions

    port = free_port()
    cert, key = tls_files if tls_files is not None else (None, None)
    options = GatewayOptions(
        listen=f"127.0.0.1:{port}", tls_cert_file=cert, tls_key_file=key, http2=True
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        cli.serve_hypercorn(
            app, cli.hypercorn_config(options, reloader), reloader, shutdown_trigger=stop.wait
        )
    )
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        if task.done():
            task.result()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            assert asyncio.get_running_loop().time() < deadline, "hypercorn never listened"
            await asyncio.sleep(0.02)
            continue
        writer.close()
        await writer.wait_closed()
        break
    try:
        yield port
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def eventually(check: Callable[[], bool], *, within: float = 5.0) -> None:
    """Wait until ``check()`` holds (hooks run just after the client saw the response end)."""
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


def auto_resume_annotations(by: str = constants.SUSPENDED_BY_IDLE) -> dict[str, str]:
    """Sandbox annotations allowing resume on traffic after a policy suspend."""
    return {constants.ANNOTATION_AUTO_RESUME: "true", constants.ANNOTATION_SUSPENDED_BY: by}


class LocalStream:
    """An exec stream over a local subprocess (same interface as ``podexec.ExecStream``)."""

    can_close_stdin = True

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.exit_code: int | None = None
        self.failure: str | None = None
        self._queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._readers = [
            asyncio.ensure_future(self._drain(1, proc.stdout)),
            asyncio.ensure_future(self._drain(2, proc.stderr)),
        ]
        self._open = 2

    async def _drain(self, channel: int, pipe: asyncio.StreamReader | None) -> None:
        assert pipe is not None
        while chunk := await pipe.read(65536):
            await self._queue.put((channel, chunk))
        await self._queue.put(None)

    async def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    async def resize(self, cols: int, rows: int) -> None:
        raise AssertionError("resize of a command opened without a TTY")

    async def read(self) -> tuple[int, bytes] | None:
        while self._open:
            item = await self._queue.get()
            if item is None:
                self._open -= 1
                continue
            return item
        self.exit_code = await self.proc.wait()
        return None

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        for reader in self._readers:
            reader.cancel()


class LocalTty:
    """A command on a local pseudo-terminal, as ``pods/exec`` with ``tty=true`` runs it: one
    output channel (stdout), stdin typed into the terminal, ``resize`` sets its size.

    Attributes:
        sizes: every ``(cols, rows)`` set, in order.
    """

    can_close_stdin = False

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc = proc
        self.master = master
        self.exit_code: int | None = None
        self.failure: str | None = None
        self.sizes: list[tuple[int, int]] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def spawn(cls, argv: list[str], *, env: dict[str, str]) -> AsyncIterator[LocalTty]:
        master, slave = pty_module.openpty()
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        terminal = cls(proc, master)
        try:
            yield terminal
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            os.close(master)

    async def write(self, data: bytes) -> None:
        await asyncio.to_thread(os.write, self.master, data)

    async def close_stdin(self) -> None:
        raise AssertionError("a terminal's stdin is not closed")

    async def resize(self, cols: int, rows: int) -> None:
        self.sizes.append((cols, rows))
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    async def read(self) -> tuple[int, bytes] | None:
        try:
            chunk = await asyncio.to_thread(os.read, self.master, 65536)
        except OSError:  # EIO: every process on the terminal closed it
            chunk = b""
        if chunk:
            return 1, chunk
        self.exit_code = await self.proc.wait()
        return None


@dataclass
class LocalOutput:
    """What ``podexec.Output`` holds."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    failure: str | None = None


class LocalExec:
    """Runs the exec fallback's commands as local processes with ``HOME=home``.

    Attributes:
        commands: every argv opened, in order.
    """

    def __init__(self, home: str) -> None:
        self.home = home
        self.commands: list[list[str]] = []

    @contextlib.asynccontextmanager
    async def open(
        self,
        namespace: str,
        pod: str,
        argv: list[str],
        *,
        container: str | None,
        stdin: bool = False,
        tty: bool = False,
    ) -> AsyncIterator[LocalStream | LocalTty]:
        import os

        assert namespace == "tenant-a"
        assert pod == SANDBOX_ID
        self.commands.append(list(argv))
        if tty:
            async with LocalTty.spawn(argv, env={**os.environ, "HOME": self.home}) as terminal:
                yield terminal
            return
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "HOME": self.home},
        )
        stream = LocalStream(proc)
        try:
            yield stream
        finally:
            await stream.close()

    async def run(
        self,
        namespace: str,
        pod: str,
        argv: list[str],
        *,
        container: str | None = None,
        stdin: bytes | None = None,
    ) -> LocalOutput:
        out: list[bytes] = []
        err: list[bytes] = []
        async with self.open(
            namespace, pod, argv, container=container, stdin=stdin is not None
        ) as stream:
            # A command may end without reading its stdin (the kubelet drops it then too).
            with contextlib.suppress(ConnectionError):
                if stdin is not None:
                    await stream.write(stdin)
                    await stream.close_stdin()
            while (chunk := await stream.read()) is not None:
                (out if chunk[0] == 1 else err).append(chunk[1])
        return LocalOutput(
            stream.exit_code if stream.exit_code is not None else -1, b"".join(out), b"".join(err)
        )

    async def aclose(self) -> None:
        return None
