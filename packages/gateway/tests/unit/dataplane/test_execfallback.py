"""The exec fallback speaks envd to the real E2B SDK; a local shell stands in for the pod.

The scripts run for real (``sh``, ``stat``, ``find``, ``cat``) with ``HOME`` in a temp
directory; only the transport (``pods/exec``) is replaced by local processes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dataplane_fakes import (
    ENVD_TOKEN,
    SANDBOX_ID,
    LocalExec,
    State,
    eventually,
    make_record,
    serve,
)
from e2b import (
    AsyncSandbox,
    CommandExitException,
    ConnectionConfig,
    FileType,
    InvalidArgumentException,
    NotFoundException,
    PtySize,
)
from packaging.version import Version

from kube_agent_sandbox.gateway.daemon_client import ENVD_VERSION
from kube_agent_sandbox.gateway.dataplane.execfallback import ExecFallback
from kube_agent_sandbox.gateway.dataplane.execscripts import SIGNAL_TREE, parse_listing, start_argv
from kube_agent_sandbox.gateway.dataplane.execwire import envelope, read_envelopes
from kube_agent_sandbox.gateway.dataplane.router import DataPlane

EXEC = {"kube-agent-sandbox.io/envd": "exec"}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def local_exec(home: Path) -> LocalExec:
    return LocalExec(str(home))


@pytest.fixture
async def gateway_url(local_exec: LocalExec) -> AsyncIterator[str]:
    state = State()
    state.index.records[SANDBOX_ID] = make_record(annotations=EXEC)
    plane = DataPlane(state, exec_fallback=ExecFallback(None, pod_exec=local_exec))
    async with serve(plane) as port:
        yield f"http://127.0.0.1:{port}"
    await plane.aclose()


@pytest.fixture
def sandbox(gateway_url: str) -> AsyncSandbox:
    headers = {
        "E2b-Sandbox-Id": SANDBOX_ID,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": ENVD_TOKEN,
    }
    config = ConnectionConfig(
        api_key="e2b_" + "0" * 40,
        sandbox_url=gateway_url,
        extra_sandbox_headers=headers,
        request_timeout=30,
    )
    return AsyncSandbox(
        sandbox_id=SANDBOX_ID,
        sandbox_domain=None,
        envd_version=Version(ENVD_VERSION),  # what the gateway advertises
        envd_access_token=ENVD_TOKEN,
        traffic_access_token=None,
        connection_config=config,
    )


async def test_commands_run_streams_and_reports_exit_codes(
    sandbox: AsyncSandbox, home: Path
) -> None:
    seen: list[str] = []
    result = await sandbox.commands.run("echo hi; echo err >&2; pwd", on_stdout=seen.append)
    assert result.exit_code == 0
    assert result.stdout == f"hi\n{home}\n"
    assert result.stderr == "err\n"
    assert "".join(seen) == result.stdout
    with pytest.raises(CommandExitException) as failed:
        await sandbox.commands.run("echo out; exit 3")
    assert failed.value.exit_code == 3
    assert failed.value.stdout == "out\n"


async def test_file_metadata_is_refused_not_dropped(sandbox: AsyncSandbox, home: Path) -> None:
    """The SDK sends metadata (the advertised envd has it); without sandboxd it cannot be kept."""
    with pytest.raises(InvalidArgumentException, match="metadata needs sandboxd"):
        await sandbox.files.write("m.txt", "data", metadata={"owner": "me"})
    assert not (home / "m.txt").exists()
    assert (await sandbox.files.write("m.txt", "data")).path == f"{home}/m.txt"


async def test_commands_take_env_and_cwd(sandbox: AsyncSandbox, home: Path) -> None:
    (home / "sub").mkdir()
    result = await sandbox.commands.run(
        'echo "$A $B"; pwd', envs={"A": "1", "B": "two words"}, cwd=str(home / "sub")
    )
    assert result.stdout == f"1 two words\n{home}/sub\n"


async def test_files_round_trip(sandbox: AsyncSandbox, home: Path) -> None:
    info = await sandbox.files.write("dir/a.txt", "hello\n")
    assert info.path == f"{home}/dir/a.txt"
    assert (home / "dir" / "a.txt").read_text() == "hello\n"
    assert await sandbox.files.read("dir/a.txt") == "hello\n"
    payload = bytes(range(256)) * 4096
    await sandbox.files.write(f"{home}/bin.dat", payload)
    assert await sandbox.files.read(f"{home}/bin.dat", format="bytes") == payload
    entries = await sandbox.files.list(str(home))
    names = {e.name: e for e in entries}
    assert names["dir"].type == FileType.DIR
    assert names["bin.dat"].type == FileType.FILE
    assert names["bin.dat"].size == len(payload)
    assert await sandbox.files.exists("dir/a.txt")
    assert not await sandbox.files.exists("dir/nope.txt")
    assert await sandbox.files.make_dir("new/deep")
    assert not await sandbox.files.make_dir("new/deep")
    info2 = await sandbox.files.get_info("new/deep")
    assert info2.type == FileType.DIR
    await sandbox.files.rename("dir/a.txt", "moved/b.txt")
    assert (home / "moved" / "b.txt").read_text() == "hello\n"
    await sandbox.files.remove("moved")
    assert not (home / "moved").exists()
    with pytest.raises(NotFoundException):
        await sandbox.files.read("nope.txt")


async def test_write_files_sends_several_parts(sandbox: AsyncSandbox, home: Path) -> None:
    from e2b.sandbox.filesystem.filesystem import WriteEntry

    await sandbox.files.write_files(
        [WriteEntry(path="m/1.txt", data="one"), WriteEntry(path="m/2.txt", data="two")]
    )
    assert (home / "m" / "1.txt").read_text() == "one"
    assert (home / "m" / "2.txt").read_text() == "two"


async def test_is_running(sandbox: AsyncSandbox) -> None:
    assert await sandbox.is_running()


async def test_hostile_paths_stay_arguments(
    sandbox: AsyncSandbox, home: Path, local_exec: LocalExec
) -> None:
    name = "$(touch pwned); `touch pwned2`; a'b\"c.txt"
    await sandbox.files.write(name, "x")
    assert (home / name).read_text() == "x"
    assert not (home / "pwned").exists()
    assert not (home / "pwned2").exists()
    assert await sandbox.files.read(name) == "x"
    assert not await sandbox.files.exists("-rf")


async def test_client_disconnect_kills_the_command(
    gateway_url: str, home: Path, local_exec: LocalExec
) -> None:
    request = {"process": {"cmd": "/bin/sh", "args": ["-c", "echo started; sleep 30; touch done"]}}
    headers = {
        "E2b-Sandbox-Id": SANDBOX_ID,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": ENVD_TOKEN,
        "Content-Type": "application/connect+json",
    }
    async with (
        httpx.AsyncClient(base_url=gateway_url, timeout=10) as client,
        client.stream(
            "POST", "/process.Process/Start", headers=headers, content=envelope(request)
        ) as response,
    ):
        assert response.status_code == 200
        async for chunk in response.aiter_raw():
            if b"data" in chunk:
                break
    for _ in range(200):
        if (home / "done").exists() or any(c[-2:-1] == ["KILL"] for c in local_exec.commands):
            break
        await asyncio.sleep(0.05)
    assert any(c[2] == SIGNAL_TREE and c[-2] == "KILL" for c in local_exec.commands)


async def test_bad_rpc_requests_are_clear_errors(gateway_url: str) -> None:
    headers = {
        "E2b-Sandbox-Id": SANDBOX_ID,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": ENVD_TOKEN,
    }
    async with httpx.AsyncClient(base_url=gateway_url, timeout=10) as client:
        response = await client.post("/filesystem.Filesystem/Stat", headers=headers, content=b"[1]")
        assert response.status_code == 400
        assert response.json()["code"] == "invalid_argument"
        response = await client.post(
            "/filesystem.Filesystem/ListDir", headers=headers, json={"path": "/", "depth": 1000}
        )
        assert response.status_code == 400
        response = await client.post(
            "/filesystem.Filesystem/WatchDir", headers=headers, json={"path": "/"}
        )
        assert response.status_code == 501
        response = await client.post(
            "/process.Process/Start",
            headers={**headers, "Content-Type": "application/connect+json"},
            content=b"\x00\x00\x00\x00\x09{",
        )
        assert response.status_code == 400
        response = await client.post(
            "/files?path=x",
            headers={**headers, "Content-Type": "multipart/form-data; boundary=zz"},
            content=b"--zz\r\nbroken",
        )
        assert response.status_code == 400
        response = await client.get("/files", headers=headers)
        assert response.status_code == 400
        response = await client.get("/nope", headers=headers)
        assert response.status_code == 404


async def test_a_short_write_is_an_error_not_a_short_file(home: Path) -> None:
    class Lossy(LocalExec):
        """Loses the last stdin chunk, as a broken exec path would."""

        @contextlib.asynccontextmanager
        async def open(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            async with super().open(*args, **kwargs) as stream:
                original = stream.write
                sent: list[bytes] = []

                async def write(data: bytes) -> None:
                    sent.append(data)
                    if len(sent) == 1:
                        await original(data)

                stream.write = write  # type: ignore[method-assign]
                yield stream

    state = State()
    state.index.records[SANDBOX_ID] = make_record(annotations=EXEC)
    plane = DataPlane(state, exec_fallback=ExecFallback(None, pod_exec=Lossy(str(home))))
    headers = {
        "E2b-Sandbox-Id": SANDBOX_ID,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": ENVD_TOKEN,
    }

    async def body() -> AsyncIterator[bytes]:
        yield b"a" * 10
        yield b"b" * 10

    transport = httpx.ASGITransport(app=plane)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        response = await client.post(
            "/files?path=short.txt",
            headers={**headers, "Content-Type": "application/octet-stream"},
            content=body(),
        )
    assert response.status_code == 500
    assert "10 of 20 bytes" in response.json()["message"]


def test_envelopes_round_trip() -> None:
    body = envelope({"a": 1}) + envelope({}, end=True)
    assert read_envelopes(body) == [{"a": 1}]
    with pytest.raises(ValueError, match="truncated"):
        read_envelopes(body[:-1])
    with pytest.raises(ValueError, match="compressed"):
        read_envelopes(b"\x01\x00\x00\x00\x00")
    assert json.loads(body[5 : 5 + int.from_bytes(body[1:5], "big")]) == {"a": 1}


def test_start_argv_keeps_values_as_arguments() -> None:
    argv = start_argv("/bin/bash", ["-l", "-c", "echo $X"], envs={"X": "1"}, cwd=None)
    assert argv[:2] == ["sh", "-c"]
    assert argv[3:] == ["sh", "", "--", "X=1", "/bin/bash", "-l", "-c", "echo $X"]
    with pytest.raises(ValueError, match="invalid environment"):
        start_argv("x", [], envs={"A=B": "1"}, cwd=None)
    with pytest.raises(ValueError, match="needs a command"):
        start_argv("", [], envs={}, cwd=None)


def test_parse_listing_reads_symlinks_and_skips_garbage() -> None:
    out = (
        b"P|/home/user\n"
        b"T|/etc/hosts\nK|regular file\nS|10|a1ff|lrwxrwxrwx|user|user|0|symbolic link|link\n"
        b"S|4096|41ed|drwxr-xr-x|root|root|0|directory|/tmp\n"
        b"S|bad line\n"
    )
    listing = parse_listing(out)
    link, tmp = listing.entries
    assert link["path"] == "/home/user/link"
    assert link["isSymlink"] is True
    assert link["symlinkTarget"] == "/etc/hosts"
    assert link["type"] == "FILE_TYPE_FILE"
    assert tmp["type"] == "FILE_TYPE_DIRECTORY"
    assert tmp["modifiedTime"] == "1970-01-01T00:00:00Z"


async def test_stdin_reaches_a_command_started_with_it(sandbox: AsyncSandbox) -> None:
    handle = await sandbox.commands.run("cat; echo done", background=True, stdin=True)
    await sandbox.commands.send_stdin(handle.pid, "hello ")
    await sandbox.commands.send_stdin(handle.pid, b"world\n")
    await sandbox.commands.close_stdin(handle.pid)
    result = await handle.wait()
    assert result.stdout == "hello world\ndone\n"
    # Once it ended, or for a command started without stdin, there is no stdin to reach.
    with pytest.raises(NotFoundException, match="not found"):
        await sandbox.commands.send_stdin(handle.pid, "late")
    other = await sandbox.commands.run("sleep 0.2", background=True)
    with pytest.raises(NotFoundException):
        await sandbox.commands.send_stdin(other.pid, "x")
    await other.wait()


async def test_a_pty_types_resizes_and_ends_through_the_exec_fallback(
    sandbox: AsyncSandbox, local_exec: LocalExec
) -> None:
    """The SDK's pty.create/send_stdin/resize over pods/exec with tty=true (a local terminal
    here): the size reaches the terminal, typed input reaches the shell, the exit code returns."""
    seen = bytearray()
    terminal = await sandbox.pty.create(PtySize(rows=24, cols=80), on_data=seen.extend)
    assert terminal.pid > 0
    await sandbox.pty.send_stdin(terminal.pid, b"stty size; echo term=$TERM\n")
    await eventually(lambda: b"24 80" in seen and b"term=xterm" in seen, within=15)
    await sandbox.pty.resize(terminal.pid, PtySize(rows=40, cols=100))
    await sandbox.pty.send_stdin(terminal.pid, b"stty size\n")
    await eventually(lambda: b"40 100" in seen, within=15)
    # stdin of a terminal is typed, not sent as a command's stdin (and the other way round).
    with pytest.raises(InvalidArgumentException, match="is a PTY"):
        await sandbox.commands.send_stdin(terminal.pid, "x")
    await sandbox.pty.send_stdin(terminal.pid, b"exit 3\n")
    with pytest.raises(CommandExitException) as ended:
        await terminal.wait()
    assert ended.value.exit_code == 3
    with pytest.raises(NotFoundException):
        await sandbox.pty.resize(terminal.pid, PtySize(rows=10, cols=10))


async def test_a_pty_is_killed_through_the_exec_fallback(sandbox: AsyncSandbox) -> None:
    terminal = await sandbox.pty.create(PtySize(rows=24, cols=80), on_data=lambda _: None)
    assert await sandbox.pty.kill(terminal.pid) is True
    with pytest.raises(CommandExitException):
        await terminal.wait()


async def test_kill_signals_the_command_and_its_children(sandbox: AsyncSandbox, home: Path) -> None:
    seen: list[str] = []
    handle = await sandbox.commands.run(
        "sleep 30 & echo $!; wait; touch never",
        background=True,
        cwd=str(home),
        on_stdout=seen.append,
    )
    for _ in range(500):  # the child runs: a kill must reach it too, or the stream stays open
        if seen:
            break
        await asyncio.sleep(0.02)
    child = int("".join(seen).split()[0])
    assert await sandbox.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException):
        await asyncio.wait_for(handle.wait(), 10)
    assert not (home / "never").exists()
    # gone, or a zombie waiting for its new parent; a loaded machine may take a moment to reap
    for _ in range(250):
        if _state(child) == "Z":
            break
        await asyncio.sleep(0.02)
    assert _state(child) == "Z"
    assert await sandbox.commands.kill(999_999_999) is False  # no such process


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"  # gone


async def test_sigterm_and_bad_process_requests(gateway_url: str, home: Path) -> None:
    headers = {
        "E2b-Sandbox-Id": SANDBOX_ID,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": ENVD_TOKEN,
    }
    start = {
        "process": {
            "cmd": "/bin/sh",
            "args": ["-c", "trap 'echo term; exit 7' TERM; while :; do sleep 0.1; done"],
        },
    }
    async with httpx.AsyncClient(base_url=gateway_url, timeout=20) as client:

        async def call(method: str, body: object) -> httpx.Response:
            return await client.post(f"/process.Process/{method}", headers=headers, json=body)

        async with client.stream(
            "POST",
            "/process.Process/Start",
            headers={**headers, "Content-Type": "application/connect+json"},
            content=envelope(start),
        ) as stream:
            raw = b""
            pid = 0
            async for chunk in stream.aiter_raw():
                raw += chunk
                first = _first_message(raw)
                if not pid and first is not None:
                    pid = first["event"]["start"]["pid"]
                    await asyncio.sleep(0.3)  # let the trap be set
                    response = await call(
                        "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGTERM"}
                    )
                    assert response.status_code == 200, response.text
        assert base64.b64encode(b"term\n") in raw  # the trap ran: TERM, not KILL
        assert b"exit status 7" in raw

        expectations = [
            (
                "SendSignal",
                {"process": {"pid": 1}, "signal": "SIGNAL_SIGHUP"},
                400,
                "unsupported signal",
            ),
            ("SendSignal", {"process": {}, "signal": "SIGNAL_SIGKILL"}, 400, "process.pid"),
            ("SendSignal", {"process": {"pid": -3}, "signal": "SIGNAL_SIGKILL"}, 400, "invalid"),
            ("SendSignal", {"process": {"tag": "t"}, "signal": "SIGNAL_SIGKILL"}, 501, "tag"),
            ("SendSignal", [1], 400, "invalid JSON"),
            ("SendInput", {"process": {"pid": 5}, "input": {"stdin": "%%%"}}, 400, "base64"),
            ("SendInput", {"process": {"pid": 5}}, 400, "input.stdin"),
            ("SendInput", {"process": {"pid": 5}, "input": {"pty": "eA=="}}, 404, "not found"),
            ("SendInput", {"process": {"pid": 5}, "input": {"pty": "%"}}, 400, "pty is not base64"),
            ("Update", {"process": {"pid": 5}}, 400, "pty.size is required"),
            (
                "Update",
                {"process": {"pid": 5}, "pty": {"size": {"cols": 0, "rows": 3}}},
                400,
                "invalid pty.size",
            ),
            (
                "Update",
                {"process": {"pid": 5}, "pty": {"size": {"cols": 80, "rows": 24}}},
                404,
                "not a PTY",
            ),
            ("CloseStdin", {"process": {"pid": 5}}, 404, "not found"),
        ]
        for method, body, status, text in expectations:
            response = await call(method, body)
            assert response.status_code == status, (method, body, response.text)
            assert text in response.json()["message"], (method, body, response.text)


def _first_message(raw: bytes) -> dict[str, Any] | None:
    """The first Connect frame's message once it has fully arrived."""
    size = int.from_bytes(raw[1:5], "big") if len(raw) >= 5 else -1
    if size < 0 or len(raw) < 5 + size:
        return None
    message: dict[str, Any] = json.loads(raw[5 : 5 + size])
    return message


async def test_files_compose_concatenates_parts(gateway_url: str, home: Path) -> None:
    headers = {
        "E2b-Sandbox-Id": SANDBOX_ID,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": ENVD_TOKEN,
    }
    (home / "p0").write_bytes(b"Hello, ")
    (home / "-p1").write_bytes(b"\x00World")
    (home / "out").write_bytes(b"old")
    (home / "dir").mkdir()
    async with httpx.AsyncClient(base_url=gateway_url, timeout=20) as client:

        async def compose(body: object) -> httpx.Response:
            return await client.post("/files/compose", headers=headers, json=body)

        made = await compose({"source_paths": ["p0", "-p1", "p0"], "destination": "new/whole"})
        assert made.status_code == 200, made.text
        assert made.json() == {"path": f"{home}/new/whole", "name": "whole", "type": "file"}
        assert (home / "new" / "whole").read_bytes() == b"Hello, \x00WorldHello, "
        assert not (home / "p0").exists()
        assert not (home / "-p1").exists()

        (home / "p2").write_bytes(b"new")
        replaced = await compose({"source_paths": [str(home / "p2")], "destination": "out"})
        assert replaced.status_code == 200
        assert (home / "out").read_bytes() == b"new"
        assert not any("e2b-compose" in name for name in os.listdir(home))

        (home / "keep").write_bytes(b"k")
        expectations = [
            (b"{nope", 400, "invalid request body"),
            ({"destination": "x"}, 400, "source_paths must not be empty"),
            ({"source_paths": "keep", "destination": "x"}, 400, "list of strings"),
            ({"source_paths": ["keep"]}, 400, "destination is required"),
            ({"source_paths": ["keep"], "destination": 3}, 400, "must be a string"),
            ({"source_paths": ["ke\x00ep"], "destination": "x"}, 400, "NUL"),
            ({"source_paths": ["keep", "gone"], "destination": "x"}, 404, "not found: gone"),
            ({"source_paths": ["dir"], "destination": "x"}, 400, "source path is a directory"),
            ({"source_paths": ["/dev/null"], "destination": "x"}, 400, "not a regular file"),
            ({"source_paths": ["keep"], "destination": "dir"}, 400, "destination is a directory"),
            ({"source_paths": ["keep"], "destination": "./keep"}, 400, "cannot be the same"),
            ({"source_paths": ["keep"], "destination": "keep/x"}, 400, "not a directory"),
        ]
        for body, status, text in expectations:
            if isinstance(body, bytes):
                response = await client.post("/files/compose", headers=headers, content=body)
            else:
                response = await compose(body)
            assert response.status_code == status, (body, response.text)
            assert response.json()["code"] == status
            assert text in response.json()["message"], (body, response.text)
        assert (home / "keep").read_bytes() == b"k"  # nothing was consumed by a refused call
        assert not (home / "x").exists()


@pytest.fixture
async def second_replica(local_exec: LocalExec, gateway_url: str) -> AsyncIterator[AsyncSandbox]:
    """A second gateway replica (its own exec fallback) in front of the same container."""
    state = State()
    state.index.records[SANDBOX_ID] = make_record(annotations=EXEC)
    plane = DataPlane(state, exec_fallback=ExecFallback(None, pod_exec=local_exec))
    async with serve(plane) as port:
        headers = {
            "E2b-Sandbox-Id": SANDBOX_ID,
            "E2b-Sandbox-Port": "49983",
            "X-Access-Token": ENVD_TOKEN,
        }
        config = ConnectionConfig(
            api_key="e2b_" + "0" * 40,
            sandbox_url=f"http://127.0.0.1:{port}",
            extra_sandbox_headers=headers,
            request_timeout=30,
        )
        yield AsyncSandbox(
            sandbox_id=SANDBOX_ID,
            sandbox_domain=None,
            envd_version=Version(ENVD_VERSION),
            envd_access_token=ENVD_TOKEN,
            traffic_access_token=None,
            connection_config=config,
        )
    await plane.aclose()


async def test_stdin_reaches_a_command_through_another_replica(
    sandbox: AsyncSandbox, second_replica: AsyncSandbox
) -> None:
    handle = await sandbox.commands.run("cat; echo done", background=True, stdin=True)
    await second_replica.commands.send_stdin(handle.pid, "from two, ")
    await sandbox.commands.send_stdin(handle.pid, "from one\n")
    await second_replica.commands.close_stdin(handle.pid)
    result = await handle.wait()
    assert result.stdout == "from two, from one\ndone\n"
    with pytest.raises(NotFoundException, match="not found"):
        await second_replica.commands.send_stdin(handle.pid, "late")
    fifo_dir = f"/tmp/.agent-sandbox-exec/{handle.pid}"
    assert not await asyncio.to_thread(os.path.exists, fifo_dir)  # the FIFO went with it


async def test_a_pty_types_and_resizes_through_another_replica(
    sandbox: AsyncSandbox, second_replica: AsyncSandbox
) -> None:
    seen = bytearray()
    terminal = await sandbox.pty.create(PtySize(rows=24, cols=80), on_data=seen.extend)
    await second_replica.pty.resize(terminal.pid, PtySize(rows=33, cols=99))
    await second_replica.pty.send_stdin(terminal.pid, b"stty size\n")
    await eventually(lambda: b"33 99" in seen, within=15)
    with pytest.raises(InvalidArgumentException, match="is a PTY"):
        await second_replica.commands.send_stdin(terminal.pid, "x")
    await second_replica.pty.send_stdin(terminal.pid, b"exit 5\n")
    with pytest.raises(CommandExitException) as ended:
        await terminal.wait()
    assert ended.value.exit_code == 5
    # Its exec streams are gone (the local stand-in kills the relay): the holder cleans up.
    fifo_dir = f"/tmp/.agent-sandbox-exec/{terminal.pid}"
    await eventually(lambda: not os.path.exists(fifo_dir), within=10)


async def test_stream_input_writes_each_message_through_any_replica(
    sandbox: AsyncSandbox, second_replica: AsyncSandbox
) -> None:
    url = second_replica.envd_api_url
    handle = await sandbox.commands.run("cat; echo done", background=True, stdin=True)
    headers = {
        "E2b-Sandbox-Id": SANDBOX_ID,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": ENVD_TOKEN,
        "Content-Type": "application/connect+json",
    }

    def data(text: bytes) -> bytes:
        return envelope({"data": {"input": {"stdin": base64.b64encode(text).decode()}}})

    async def body() -> AsyncIterator[bytes]:
        yield envelope({"start": {"process": {"pid": handle.pid}}}) + data(b"one ")
        frame = envelope({"keepalive": {}}) + data(b"two\n")
        yield frame[:7]  # a frame split across chunks
        yield frame[7:]

    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        sent = await client.post("/process.Process/StreamInput", headers=headers, content=body())
        if sent.content != envelope({}) + envelope({}, end=True):
            await handle.kill()  # (the stream of a command left running never ends)
        assert sent.status_code == 200
        assert read_envelopes(sent.content) == [{}]
        await second_replica.commands.close_stdin(handle.pid)
        assert (await handle.wait()).stdout == "one two\ndone\n"

        expectations = [
            (data(b"x"), "invalid_argument", "the first message must be start"),
            (envelope({"keepalive": {}}), "invalid_argument", "no start message"),
            (envelope({"nope": {}}), "invalid_argument", "unknown StreamInput message"),
            (envelope({"start": {"process": {"pid": handle.pid}}}) + data(b"x"), "not_found", ""),
            (envelope({"start": {}})[:-1], "invalid_argument", "truncated"),
        ]
        for content, code, text in expectations:
            answer = await client.post(
                "/process.Process/StreamInput", headers=headers, content=content
            )
            assert answer.status_code == 200, answer.text
            end = json.loads(answer.content[5:])
            assert answer.content[0] == 2
            assert end["error"]["code"] == code, (content, end)
            assert text in end["error"]["message"], (content, end)
