"""Exec stream handling over a scripted websocket: channels, exit status, stdin, timeouts.

The websocket is a stand-in with httpx-ws's surface (``subprotocol``, ``send_bytes``,
``receive(timeout)``); the real exec API is exercised in the e2e suite on a real node.
"""

from __future__ import annotations

import contextlib
import json
import queue
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from wsproto.events import BytesMessage, CloseConnection, TextMessage

from kube_agent_sandbox.sdk import (
    AsyncExecSession,
    AsyncSandboxClient,
    ClusterConfig,
    ExecFailedError,
    ExecSession,
    ExecTimeoutError,
    NotFoundError,
    SandboxClient,
)

SUCCESS = b"\x03" + json.dumps({"status": "Success"}).encode()


def exit_with(code: int) -> bytes:
    status = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }
    return b"\x03" + json.dumps(status).encode()


class ScriptedSocket:
    """Plays ``script`` (bytes messages, or ``None`` for a receive timeout)."""

    def __init__(
        self,
        script: list[bytes | object | None],
        subprotocol: str = "v5.channel.k8s.io",
        *,
        hang: bool = False,
    ) -> None:
        self.hang = hang  # after the script: no message ever again (a command still running)
        self.script = list(script)
        self.subprotocol = subprotocol
        self.sent: list[bytes] = []

    def _next(self) -> Any:
        if not self.script:
            if self.hang:
                time.sleep(0.005)
                raise queue.Empty
            return CloseConnection(code=1000)
        item = self.script.pop(0)
        if item is None:
            raise queue.Empty
        if isinstance(item, bytes):
            return BytesMessage(data=item)
        return item


class SyncSocket(ScriptedSocket):
    def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    def receive(self, timeout: float | None = None) -> Any:
        return self._next()


class AsyncSocket(ScriptedSocket):
    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    async def receive(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 (httpx-ws API)
        try:
            return self._next()
        except queue.Empty:
            raise TimeoutError from None


CONFIG = ClusterConfig.explicit("https://127.0.0.1:1", insecure_skip_tls_verify=True)


def sync_client(sock: SyncSocket, monkeypatch: pytest.MonkeyPatch) -> SandboxClient:
    client = SandboxClient(CONFIG, namespace="ns")

    @contextlib.contextmanager
    def session(*_args: Any, **_kwargs: Any) -> Iterator[ExecSession]:
        yield ExecSession(sock)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "exec_session", session)
    return client


def async_client(sock: AsyncSocket, monkeypatch: pytest.MonkeyPatch) -> AsyncSandboxClient:
    client = AsyncSandboxClient(CONFIG, namespace="ns")

    @contextlib.asynccontextmanager
    async def session(*_args: Any, **_kwargs: Any) -> AsyncIterator[AsyncExecSession]:
        yield AsyncExecSession(sock)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "exec_session", session)
    return client


def test_sync_exec_collects_channels_and_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = SyncSocket(
        [
            b"\x01",
            b"\x02",
            b"\x01hello ",
            None,
            TextMessage(data="x"),
            b"\x02warn",
            b"\x01world",
            exit_with(3),
        ]
    )
    seen: list[tuple[int, bytes]] = []
    result = sync_client(sock, monkeypatch).exec(
        "box", ["sh"], stdin=b"in", on_output=lambda c, d: seen.append((c, d))
    )
    assert (result.exit_code, result.stdout, result.stderr) == (3, "hello world", "warn")
    assert seen == [(1, b"hello "), (2, b"warn"), (1, b"world")]
    assert sock.sent == [b"\x00in", b"\xff\x00"]


def test_sync_exec_v4_does_not_send_close(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = SyncSocket([SUCCESS], subprotocol="v4.channel.k8s.io")
    result = sync_client(sock, monkeypatch).exec("box", ["cat"], stdin="x")
    assert result.exit_code == 0
    assert sock.sent == [b"\x00x"]


def test_large_stdin_is_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = SyncSocket([SUCCESS])
    sync_client(sock, monkeypatch).exec("box", ["cat"], stdin=b"a" * (600 * 1024))
    sizes = [len(m) - 1 for m in sock.sent[:-1]]
    assert sizes == [256 * 1024, 256 * 1024, 88 * 1024]


def test_stream_closed_without_status_is_an_exec_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = SyncSocket([b"\x01partial"])
    with pytest.raises(ExecFailedError, match="without an exit status"):
        sync_client(sock, monkeypatch).exec("box", ["sh"])


def test_timeout_returns_control_with_partial_output(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = SyncSocket([b"\x01started\n"], hang=True)
    with pytest.raises(ExecTimeoutError) as info:
        sync_client(sock, monkeypatch).exec("box", ["sleep", "60"], timeout=0.05)
    assert info.value.stdout == b"started\n"


def test_failed_start_is_exec_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    status = {"status": "Failure", "reason": "InternalError", "message": 'exec: "nope": not found'}
    sock = SyncSocket([b"\x03" + json.dumps(status).encode()])
    with pytest.raises(ExecFailedError, match="nope"):
        sync_client(sock, monkeypatch).exec("box", ["nope"])


def test_read_file_not_found_and_list_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = SyncSocket([b"\x02cat: /x: No such file or directory\n", exit_with(1)])
    with pytest.raises(NotFoundError):
        sync_client(missing, monkeypatch).read_file("box", "/x")
    listing = SyncSocket([b"\x015 1700000000 regular file|a.txt\n", SUCCESS])
    entries = sync_client(listing, monkeypatch).list_files("box", "/d")
    assert [(e.name, e.size) for e in entries] == [("a.txt", 5)]
    no_dir = SyncSocket([exit_with(2)])
    with pytest.raises(NotFoundError):
        sync_client(no_dir, monkeypatch).list_files("box", "/nope")


def test_write_file_streams_a_file_object_with_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    sock = SyncSocket([SUCCESS])
    calls: list[tuple[Any, ...]] = []
    client = sync_client(sock, monkeypatch)
    original = client.exec_session

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(client, "exec_session", spy)
    client.write_file("box", "/dst/f.bin", io.BytesIO(b"\x00" * 10 + b"\xff"))
    command = calls[0][1]
    assert command[-2:] == ["11", "/dst/f.bin"]
    assert b"".join(m[1:] for m in sock.sent[:-1]) == b"\x00" * 10 + b"\xff"
    failing = SyncSocket([b"\x02head: /ro/x: Read-only file system", exit_with(1)])
    with pytest.raises(ExecFailedError, match="Read-only"):
        sync_client(failing, monkeypatch).write_file("box", "/ro/x", b"x")


async def test_async_exec_matches_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = AsyncSocket([b"\x01out", None, b"\x02err", exit_with(5)])
    result = await async_client(sock, monkeypatch).exec("box", ["sh"], stdin=b"x")
    assert (result.exit_code, result.stdout, result.stderr) == (5, "out", "err")
    assert sock.sent == [b"\x00x", b"\xff\x00"]
    slow = AsyncSocket([], hang=True)
    with pytest.raises(ExecTimeoutError):
        await async_client(slow, monkeypatch).exec("box", ["sleep", "9"], timeout=0.05)


def test_pid_prefix_is_split_off_stderr() -> None:
    from kube_agent_sandbox.sdk.execproto import PidPrefix

    prefix = PidPrefix()
    assert prefix.feed(b"12") == b""
    assert prefix.feed(b"3\nwarn") == b"warn"
    assert prefix.pid == "123"
    assert prefix.feed(b"more\n") == b"more\n"


def test_timed_out_command_is_killed_by_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = SyncSocket([b"\x024242\n", b"\x01started\n", b"\x02oops"], hang=True)
    client = sync_client(sock, monkeypatch)
    killed: list[str] = []
    monkeypatch.setattr(client, "_kill", lambda name, pid, **kw: killed.append(pid))
    with pytest.raises(ExecTimeoutError, match="killed") as info:
        client.exec("box", ["sleep", "60"], timeout=0.05, kill_on_timeout=True)
    assert killed == ["4242"]
    assert (info.value.stdout, info.value.stderr) == (b"started\n", b"oops")


def test_kill_tree_script_kills_a_command_and_its_children() -> None:
    import subprocess
    from pathlib import Path

    from kube_agent_sandbox.sdk.execproto import KILL_TREE_SCRIPT, killable

    proc = subprocess.Popen(
        killable(["sh", "-c", "sleep 307 & sleep 308; true"]),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    pid = proc.stderr.readline().decode().strip()
    assert pid == str(proc.pid)  # exec kept the PID the wrapper printed

    def sleepers() -> list[str]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if cmdline.read_bytes() in (b"sleep\x00307\x00", b"sleep\x00308\x00"):
                    found.append(cmdline.parent.name)
            except OSError:
                continue
        return found

    for _ in range(100):
        if len(sleepers()) == 2:
            break
        time.sleep(0.02)
    assert len(sleepers()) == 2
    subprocess.run(["sh", "-c", KILL_TREE_SCRIPT, "sh", pid], check=True)
    proc.wait(timeout=10)
    for _ in range(100):
        if not sleepers():
            break
        time.sleep(0.02)
    assert sleepers() == []
