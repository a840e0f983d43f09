"""sandboxd's process.Process Connect service in-process: start, stream, input, signals, PTYs."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from sandboxd_helpers import (
    events,
    frame,
    make_client,
    output,
    start_request,
    stream,
    unary,
    unframe,
)

from kube_agent_sandbox.sandboxd.init_state import DaemonState

# --- process.Process ---------------------------------------------------------------------------


async def test_start_streams_start_data_end_and_the_end_frame() -> None:
    async with make_client() as client:
        response, frames = await stream(
            client, "process.Process/Start", start_request("echo hi; echo err >&2; exit 3")
        )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/connect+json"
    received = events(frames)
    assert set(received[0]) == {"start"}
    assert received[0]["start"]["pid"] > 0
    assert output(frames, "stdout") == b"hi\n"
    assert output(frames, "stderr") == b"err\n"
    assert received[-1] == {
        "end": {"exitCode": 3, "exited": True, "status": "exit status 3", "error": "exit status 3"}
    }
    assert frames[-1] == (0x02, {})


async def test_zero_exit_code_is_omitted_like_proto3_json() -> None:
    async with make_client() as client:
        _response, frames = await stream(client, "process.Process/Start", start_request("true"))
    assert events(frames)[-1] == {"end": {"exited": True, "status": "exit status 0"}}


async def test_env_cwd_and_init_env_reach_the_process(tmp_path: Path) -> None:
    state = DaemonState(env_vars={"FROM_INIT": "i", "BOTH": "init"})
    async with make_client(state) as client:
        _response, frames = await stream(
            client,
            "process.Process/Start",
            {
                "process": {
                    "cmd": "/bin/sh",
                    "args": ["-c", 'echo "$FROM_INIT $BOTH $FROM_REQ $(pwd)"'],
                    "envs": {"FROM_REQ": "r", "BOTH": "request"},
                    "cwd": str(tmp_path),
                }
            },
        )
    assert output(frames, "stdout") == f"i request r {tmp_path}\n".encode()


async def test_missing_cwd_and_missing_command_are_errors(tmp_path: Path) -> None:
    async with make_client() as client:
        _r, bad_cwd = await stream(
            client,
            "process.Process/Start",
            {"process": {"cmd": "/bin/true", "cwd": str(tmp_path / "nope")}},
        )
        _r, bad_cmd = await stream(
            client, "process.Process/Start", {"process": {"cmd": "/no/such/binary"}}
        )
    assert bad_cwd[-1][1]["error"]["code"] == "invalid_argument"
    assert "does not exist" in bad_cwd[-1][1]["error"]["message"]
    assert bad_cmd[-1][1]["error"]["code"] == "internal"


async def test_keepalive_events_at_the_requested_interval() -> None:
    async with make_client() as client:
        _r, frames = await stream(
            client,
            "process.Process/Start",
            start_request("sleep 2.3"),
            headers={"Keepalive-Ping-Interval": "1"},
        )
    keepalives = [event for event in events(frames) if "keepalive" in event]
    assert len(keepalives) >= 2
    assert "end" in events(frames)[-1]


async def test_stream_deadline_from_connect_timeout_ms() -> None:
    async with make_client() as client:
        _r, frames = await stream(
            client,
            "process.Process/Start",
            start_request("sleep 5"),
            headers={"Connect-Timeout-Ms": "300"},
        )
        listed = await unary(client, "process.Process/List", {})
        for info in listed.json().get("processes", []):
            await unary(
                client,
                "process.Process/SendSignal",
                {"process": {"pid": info["pid"]}, "signal": "SIGNAL_SIGKILL"},
            )
    assert frames[-1][0] == 0x02
    assert frames[-1][1]["error"]["code"] == "deadline_exceeded"


async def test_list_signal_input_connect_and_close_stdin() -> None:
    async with make_client() as client:
        # A long-running process started in the background of this test.
        start = asyncio.create_task(
            stream(
                client,
                "process.Process/Start",
                {**start_request("cat; echo done"), "stdin": True, "tag": "my-cat"},
            )
        )
        pid = 0
        for _ in range(100):
            listed = (await unary(client, "process.Process/List", {})).json()
            if listed.get("processes"):
                pid = listed["processes"][0]["pid"]
                break
            await asyncio.sleep(0.05)
        assert pid
        info = listed["processes"][0]
        assert info["tag"] == "my-cat"
        assert info["config"]["cmd"] == "/bin/sh"
        assert info["config"]["args"] == ["-c", "cat; echo done"]

        attach = asyncio.create_task(
            stream(client, "process.Process/Connect", {"process": {"tag": "my-cat"}})
        )
        await asyncio.sleep(0.3)
        sent = await unary(
            client,
            "process.Process/SendInput",
            {"process": {"pid": pid}, "input": {"stdin": base64.b64encode(b"abc\n").decode()}},
        )
        assert sent.status_code == 200
        assert sent.json() == {}
        closed = await unary(client, "process.Process/CloseStdin", {"process": {"pid": pid}})
        assert closed.status_code == 200
        (_r, start_frames), (_r2, connect_frames) = await asyncio.gather(start, attach)
    assert output(start_frames, "stdout") == b"abc\ndone\n"
    assert events(connect_frames)[0] == {"start": {"pid": pid}}
    assert output(connect_frames, "stdout") == b"abc\ndone\n"  # fan-out to the attached stream
    assert "end" in events(connect_frames)[-1]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_stream_input_client_stream_and_its_errors() -> None:
    async with make_client() as client:
        start = asyncio.create_task(
            stream(client, "process.Process/Start", {**start_request("cat"), "stdin": True})
        )
        pid = 0
        for _ in range(100):
            listed = (await unary(client, "process.Process/List", {})).json()
            if listed.get("processes"):
                pid = listed["processes"][0]["pid"]
                break
            await asyncio.sleep(0.05)
        body = (
            frame({"start": {"process": {"pid": pid}}})
            + frame({"data": {"input": {"stdin": base64.b64encode(b"xy").decode()}}})
            + frame({"keepalive": {}})
            + frame({"data": {"input": {"stdin": base64.b64encode(b"z\n").decode()}}})
            + frame({}, flags=0x02)
        )
        headers = {"Content-Type": "application/connect+json"}
        sent = await client.post("/process.Process/StreamInput", content=body, headers=headers)
        no_start = await client.post(
            "/process.Process/StreamInput",
            content=frame({"data": {"input": {"stdin": "eA=="}}}),
            headers=headers,
        )
        unknown_pid = await client.post(
            "/process.Process/StreamInput",
            content=frame({"start": {"process": {"pid": 999999}}}),
            headers=headers,
        )
        truncated = await client.post(
            "/process.Process/StreamInput",
            content=frame({"start": {"process": {"pid": pid}}})[:-2],
            headers=headers,
        )
        await unary(client, "process.Process/CloseStdin", {"process": {"pid": pid}})
        _r, frames = await asyncio.wait_for(start, 10)
    assert sent.status_code == 200
    assert [message for _flags, message in unframe(sent.content)] == [{}, {}]
    assert unframe(no_start.content)[-1][1]["error"]["code"] == "invalid_argument"
    assert unframe(unknown_pid.content)[-1][1]["error"]["code"] == "not_found"
    assert unframe(truncated.content)[-1][1]["error"]["code"] == "invalid_argument"
    assert output(frames, "stdout") == b"xyz\n"


async def test_kill_reports_signal_and_children_die(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    async with make_client() as client:
        start = asyncio.create_task(
            stream(
                client,
                "process.Process/Start",
                start_request(f"sleep 60 & echo $! > {marker}; wait"),
            )
        )
        pid = 0
        for _ in range(200):
            listed = (await unary(client, "process.Process/List", {})).json()
            if listed.get("processes") and marker.exists() and marker.read_text().strip():
                pid = listed["processes"][0]["pid"]
                break
            await asyncio.sleep(0.05)
        child = int(marker.read_text())
        assert _alive(child)
        killed = await unary(
            client,
            "process.Process/SendSignal",
            {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"},
        )
        assert killed.status_code == 200
        _r, frames = await asyncio.wait_for(start, 10)
        after = (await unary(client, "process.Process/List", {})).json()
    assert events(frames)[-1] == {
        "end": {"exitCode": -1, "status": "signal: killed", "error": "signal: killed"}
    }
    assert after == {}
    for _ in range(50):
        if not _alive(child):
            break
        await asyncio.sleep(0.05)
    assert not _alive(child)


async def test_sigterm_by_tag() -> None:
    async with make_client() as client:
        start = asyncio.create_task(
            stream(client, "process.Process/Start", {**start_request("sleep 30"), "tag": "t1"})
        )
        for _ in range(100):
            if (await unary(client, "process.Process/List", {})).json():
                break
            await asyncio.sleep(0.05)
        response = await unary(
            client,
            "process.Process/SendSignal",
            {"process": {"tag": "t1"}, "signal": "SIGNAL_SIGTERM"},
        )
        _r, frames = await asyncio.wait_for(start, 10)
    assert response.status_code == 200
    assert events(frames)[-1]["end"]["status"] == "signal: terminated"


@pytest.mark.parametrize(
    ("method", "body", "code"),
    [
        ("SendSignal", {"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"}, "not_found"),
        ("SendSignal", {"process": {"pid": 1}, "signal": "SIGNAL_UNSPECIFIED"}, "invalid_argument"),
        ("SendSignal", {"process": {}, "signal": 9}, "invalid_argument"),
        ("SendInput", {"process": {"tag": "nope"}, "input": {"stdin": ""}}, "not_found"),
        ("CloseStdin", {"process": {"pid": 999999}}, "not_found"),
        (
            "Update",
            {"process": {"pid": 999999}, "pty": {"size": {"cols": 1, "rows": 1}}},
            "not_found",
        ),
    ],
)
async def test_process_rpc_errors(method: str, body: dict[str, object], code: str) -> None:
    async with make_client() as client:
        response = await unary(client, f"process.Process/{method}", body)
        _r, connect = await stream(client, "process.Process/Connect", {"process": {"pid": 999999}})
    assert response.json()["code"] == code
    assert connect[-1][1]["error"]["code"] == "not_found"


async def test_send_input_without_stdin_and_bad_base64() -> None:
    async with make_client() as client:
        start = asyncio.create_task(
            stream(client, "process.Process/Start", start_request("sleep 1"))
        )
        pid = 0
        for _ in range(100):
            listed = (await unary(client, "process.Process/List", {})).json()
            if listed.get("processes"):
                pid = listed["processes"][0]["pid"]
                break
            await asyncio.sleep(0.05)
        no_stdin = await unary(
            client,
            "process.Process/SendInput",
            {"process": {"pid": pid}, "input": {"stdin": "YQ=="}},
        )
        bad_b64 = await unary(
            client, "process.Process/SendInput", {"process": {"pid": pid}, "input": {"stdin": "!!"}}
        )
        await start
    assert no_stdin.json()["code"] == "invalid_argument"
    assert bad_b64.json()["code"] == "invalid_argument"


async def test_pty_process_gets_a_terminal_and_input() -> None:
    async with make_client() as client:
        start = asyncio.create_task(
            stream(
                client,
                "process.Process/Start",
                {
                    **start_request("stty size; test -t 0 && echo tty; read x; echo got:$x"),
                    "pty": {"size": {"cols": 100, "rows": 30}},
                },
            )
        )
        pid = 0
        for _ in range(100):
            listed = (await unary(client, "process.Process/List", {})).json()
            if listed.get("processes"):
                pid = listed["processes"][0]["pid"]
                break
            await asyncio.sleep(0.05)
        resized = await unary(
            client,
            "process.Process/Update",
            {"process": {"pid": pid}, "pty": {"size": {"cols": 120, "rows": 40}}},
        )
        await asyncio.sleep(0.3)
        await unary(
            client,
            "process.Process/SendInput",
            {"process": {"pid": pid}, "input": {"pty": base64.b64encode(b"zz\n").decode()}},
        )
        _r, frames = await asyncio.wait_for(start, 10)
    assert resized.status_code == 200
    text = output(frames, "pty")
    assert b"tty" in text
    assert b"got:zz" in text
    assert events(frames)[-1]["end"]["exited"] is True


async def test_update_rejects_a_process_without_a_terminal_and_bad_sizes() -> None:
    async with make_client() as client:
        start = asyncio.create_task(
            stream(client, "process.Process/Start", start_request("sleep 1"))
        )
        pid = 0
        for _ in range(100):
            listed = (await unary(client, "process.Process/List", {})).json()
            if listed.get("processes"):
                pid = listed["processes"][0]["pid"]
                break
            await asyncio.sleep(0.05)
        no_tty = await unary(
            client,
            "process.Process/Update",
            {"process": {"pid": pid}, "pty": {"size": {"cols": 10, "rows": 10}}},
        )
        zero = await unary(
            client,
            "process.Process/Update",
            {"process": {"pid": pid}, "pty": {"size": {"cols": 0, "rows": 10}}},
        )
        await start
    assert no_tty.json()["code"] == "invalid_argument"
    assert zero.json()["code"] == "invalid_argument"
