"""sandboxd's Connect services in-process: the wire form and its errors, filesystem.Filesystem."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path

import pytest
from sandboxd_helpers import (
    frame,
    make_client,
    output,
    start_request,
    stream,
    unary,
    unframe,
)

# --- protocol errors ---------------------------------------------------------------------------


async def test_unknown_method_is_a_connect_not_found() -> None:
    async with make_client() as client:
        response = await unary(client, "process.Process/Nope", {})
        other = await unary(client, "nosuch.Service/Call", {})
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["code"] == "not_found"
    assert other.json()["code"] == "not_found"


@pytest.mark.parametrize(
    ("content", "content_type", "status", "code"),
    [
        (b"{bad json", "application/json", 400, "invalid_argument"),
        (b"[]", "application/json", 400, "invalid_argument"),
        (b"\xff\xfe", "application/json", 400, "invalid_argument"),
        (b'{"path": 5}', "application/json", 400, "invalid_argument"),
        (b"\x0a\x01/", "application/proto", 501, "unimplemented"),
    ],
)
async def test_bad_unary_requests(
    content: bytes, content_type: str, status: int, code: str
) -> None:
    async with make_client() as client:
        response = await client.post(
            "/filesystem.Filesystem/Stat", content=content, headers={"Content-Type": content_type}
        )
    assert response.status_code == status
    assert response.json()["code"] == code


async def test_bad_stream_requests_end_the_stream_with_an_error() -> None:
    async with make_client() as client:
        truncated = await client.post(
            "/process.Process/Start",
            content=frame(start_request("true"))[:-3],
            headers={"Content-Type": "application/connect+json"},
        )
        bad_json = await client.post(
            "/process.Process/Start",
            content=b"\x00\x00\x00\x00\x03{x}",
            headers={"Content-Type": "application/connect+json"},
        )
        no_cmd = await client.post(
            "/process.Process/Start",
            content=frame({"process": {}}),
            headers={"Content-Type": "application/connect+json"},
        )
    for response, code in ((truncated, "invalid_argument"), (bad_json, "invalid_argument")):
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/connect+json"
        assert response.content[0] == 0x02
        assert json.loads(response.content[5:])["error"]["code"] == code
    assert json.loads(no_cmd.content[5:])["error"]["message"] == "process.cmd is required"


async def test_get_on_an_rpc_path_is_refused() -> None:
    async with make_client() as client:
        response = await client.get("/filesystem.Filesystem/Stat")
    assert response.status_code == 501
    assert response.json()["code"] == "unimplemented"


# --- filesystem.Filesystem ---------------------------------------------------------------------


async def test_stat_list_make_move_remove(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.txt").write_text("12345")
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "a" / "b" / "deep.txt").write_text("x")
    os.symlink(tmp_path / "a" / "f.txt", tmp_path / "a" / "link")
    async with make_client() as client:
        stat = (
            await unary(
                client, "filesystem.Filesystem/Stat", {"path": str(tmp_path / "a" / "f.txt")}
            )
        ).json()
        link = (
            await unary(
                client, "filesystem.Filesystem/Stat", {"path": str(tmp_path / "a" / "link")}
            )
        ).json()
        shallow = (
            await unary(
                client, "filesystem.Filesystem/ListDir", {"path": str(tmp_path / "a"), "depth": 1}
            )
        ).json()
        deep = (
            await unary(
                client, "filesystem.Filesystem/ListDir", {"path": str(tmp_path / "a"), "depth": 2}
            )
        ).json()
        made = await unary(
            client, "filesystem.Filesystem/MakeDir", {"path": str(tmp_path / "n" / "m")}
        )
        again = await unary(
            client, "filesystem.Filesystem/MakeDir", {"path": str(tmp_path / "n" / "m")}
        )
        over_file = await unary(
            client, "filesystem.Filesystem/MakeDir", {"path": str(tmp_path / "a" / "f.txt")}
        )
        moved = await unary(
            client,
            "filesystem.Filesystem/Move",
            {"source": str(tmp_path / "a" / "f.txt"), "destination": str(tmp_path / "z" / "g.txt")},
        )
        removed = await unary(client, "filesystem.Filesystem/Remove", {"path": str(tmp_path / "a")})
        gone = await unary(client, "filesystem.Filesystem/Stat", {"path": str(tmp_path / "a")})
    entry = stat["entry"]
    assert entry["name"] == "f.txt"
    assert entry["type"] == "FILE_TYPE_FILE"
    assert entry["path"] == str(tmp_path / "a" / "f.txt")
    assert entry["size"] == "5"
    assert entry["permissions"].startswith("-rw")
    assert entry["modifiedTime"].endswith("Z")
    assert link["entry"]["isSymlink"] is True
    assert link["entry"]["symlinkTarget"] == str(tmp_path / "a" / "f.txt")
    assert sorted(e["name"] for e in shallow["entries"]) == ["b", "f.txt", "link"]
    assert sorted(e["name"] for e in deep["entries"]) == ["b", "deep.txt", "f.txt", "link"]
    assert next(e for e in shallow["entries"] if e["name"] == "b")["type"] == "FILE_TYPE_DIRECTORY"
    assert made.status_code == 200
    assert made.json()["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    assert again.status_code == 409
    assert again.json()["code"] == "already_exists"
    assert over_file.json()["code"] == "invalid_argument"
    assert moved.json()["entry"]["path"] == str(tmp_path / "z" / "g.txt")
    assert (tmp_path / "z" / "g.txt").read_text() == "12345"
    assert removed.json() == {}
    assert gone.status_code == 404
    assert gone.json()["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "body", "code"),
    [
        ("Stat", {"path": "/no/such/path"}, "not_found"),
        ("Stat", {"path": ""}, "invalid_argument"),
        ("Stat", {"path": "/tmp/\u0000x"}, "invalid_argument"),
        ("ListDir", {"path": "/no/such/dir"}, "not_found"),
        ("ListDir", {"path": "/etc/hostname"}, "invalid_argument"),
        ("ListDir", {"path": "/tmp", "depth": "many"}, "invalid_argument"),
        ("Remove", {"path": "/no/such/path"}, "not_found"),
        ("Remove", {"path": "/../.."}, "invalid_argument"),
        ("Move", {"source": "/no/such/a", "destination": "/tmp/b"}, "not_found"),
        ("Move", {"source": "/tmp"}, "invalid_argument"),
        ("MakeDir", {"path": "/etc/hostname/sub"}, "invalid_argument"),
    ],
)
async def test_filesystem_errors(method: str, body: dict[str, object], code: str) -> None:
    async with make_client() as client:
        response = await unary(client, f"filesystem.Filesystem/{method}", body)
    assert response.json()["code"] == code, response.json()


async def test_unknown_user_in_basic_auth_is_unauthenticated() -> None:
    header = "Basic " + base64.b64encode(b"no-such-user-xyz:").decode()
    async with make_client() as client:
        response = await unary(
            client, "filesystem.Filesystem/Stat", {"path": "/"}, headers={"Authorization": header}
        )
        malformed = await unary(
            client,
            "filesystem.Filesystem/Stat",
            {"path": "/"},
            headers={"Authorization": "Basic %%%"},
        )
    assert response.status_code == 401
    assert response.json()["code"] == "unauthenticated"
    assert malformed.json()["code"] == "unauthenticated"


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs a root daemon")
async def test_root_daemon_runs_and_writes_as_the_requested_user(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o777)
    header = "Basic " + base64.b64encode(b"nobody:").decode()
    async with make_client() as client:
        _r, frames = await stream(
            client,
            "process.Process/Start",
            {"process": {"cmd": "/usr/bin/id", "args": ["-un"], "cwd": str(tmp_path)}},
            headers={"Authorization": header},
        )
        _r, no_home = await stream(
            client,
            "process.Process/Start",
            {"process": {"cmd": "/bin/pwd"}},
            headers={"Authorization": header},
        )
        upload = await client.post(
            "/files",
            params={"path": str(tmp_path / "new" / "f"), "username": "nobody"},
            content=b"x",
            headers={"Content-Type": "application/octet-stream"},
        )
    assert output(frames, "stdout") == b"nobody\n"
    assert output(no_home, "stdout") == b"/\n"  # nobody's home does not exist: cwd falls back
    assert upload.status_code == 200
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    assert (tmp_path / "new" / "f").stat().st_uid == nobody
    assert (tmp_path / "new").stat().st_uid == nobody


async def test_polled_watcher_lifecycle_and_errors(tmp_path: Path) -> None:
    async with make_client() as client:
        created = await unary(
            client, "filesystem.Filesystem/CreateWatcher", {"path": str(tmp_path)}
        )
        watcher_id = created.json()["watcherId"]
        (tmp_path / "f").write_text("1")
        await asyncio.sleep(0.2)
        got = await unary(
            client, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": watcher_id}
        )
        again = await unary(
            client, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": watcher_id}
        )
        removed = await unary(
            client, "filesystem.Filesystem/RemoveWatcher", {"watcherId": watcher_id}
        )
        after = await unary(
            client, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": watcher_id}
        )
        missing = await unary(
            client, "filesystem.Filesystem/CreateWatcher", {"path": str(tmp_path / "nope")}
        )
        not_dir = await unary(
            client, "filesystem.Filesystem/CreateWatcher", {"path": str(tmp_path / "f")}
        )
        _r, stream_missing = await stream(
            client, "filesystem.Filesystem/WatchDir", {"path": str(tmp_path / "nope")}
        )
    assert {"name": "f", "type": "EVENT_TYPE_CREATE"} in got.json()["events"]
    assert again.json() == {}  # drained
    assert removed.json() == {}
    assert after.json()["code"] == "not_found"
    assert missing.json()["code"] == "not_found"
    assert not_dir.json()["code"] == "invalid_argument"
    assert stream_missing[-1][1]["error"]["code"] == "not_found"


async def test_unexpected_handler_failures_are_internal_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kube_agent_sandbox.sandboxd import filesystem_rpc, process_rpc

    def broken(path: str) -> dict[str, object]:
        raise RuntimeError("disk on fire")

    def broken_env(**kwargs: object) -> dict[str, str]:
        raise RuntimeError("no env")

    monkeypatch.setattr(filesystem_rpc, "entry_info", broken)
    monkeypatch.setattr(process_rpc, "build_env", broken_env)
    async with make_client() as client:
        unary_response = await unary(client, "filesystem.Filesystem/Stat", {"path": "/"})
        _r, frames = await stream(client, "process.Process/Start", start_request("true"))
        health = await client.get("/health")
    assert unary_response.status_code == 500
    assert unary_response.json() == {
        "code": "internal",
        "message": "internal error: RuntimeError: disk on fire",
    }
    assert frames[-1][1]["error"]["code"] == "internal"
    assert health.status_code == 204  # the daemon keeps serving


async def test_hostile_protocol_headers_and_oversized_messages() -> None:
    async with make_client() as client:
        _r, frames = await stream(
            client,
            "process.Process/Start",
            start_request("echo ok"),
            headers={"Keepalive-Ping-Interval": "-5", "Connect-Timeout-Ms": "soon"},
        )
        huge = await client.post(
            "/filesystem.Filesystem/Stat",
            content=b'{"path": "' + b"a" * (5 * 1024 * 1024) + b'"}',
            headers={"Content-Type": "application/json"},
        )
        compressed = await client.post(
            "/filesystem.Filesystem/Stat",
            content=b"{}",
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        huge_frame = await client.post(
            "/process.Process/Start",
            content=b"\x00\xff\xff\xff\xff",
            headers={"Content-Type": "application/connect+json"},
        )
    assert output(frames, "stdout") == b"ok\n"
    assert frames[-1] == (0x02, {})
    assert huge.json()["code"] == "resource_exhausted"
    assert compressed.json()["code"] == "unimplemented"
    assert unframe(huge_frame.content)[-1][1]["error"]["code"] == "invalid_argument"
