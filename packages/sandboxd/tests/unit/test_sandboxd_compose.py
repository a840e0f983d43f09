"""sandboxd's ``POST /files/compose`` in-process (envd ≥ 0.5.5: concatenate uploaded parts)."""

from __future__ import annotations

import errno
import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest
from sandboxd_helpers import make_client

from kube_agent_sandbox.sandboxd import files_compose
from kube_agent_sandbox.sandboxd.init_state import DaemonState

HOME = os.path.expanduser("~")
ROOT = os.geteuid() == 0


def _parts(folder: Path, *contents: bytes) -> list[str]:
    paths = []
    for index, content in enumerate(contents):
        part = folder / f"part{index}"
        part.write_bytes(content)
        paths.append(str(part))
    return paths


def _exists(path: str) -> bool:
    return Path(path).exists()


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".e2b-compose." in p.name)


async def test_concatenates_in_order_deletes_sources_and_creates_parents(tmp_path: Path) -> None:
    sources = _parts(tmp_path, b"Hello", b", ", b"\x00binary\xff", b"", b"World!")
    target = tmp_path / "new" / "dir" / "whole.bin"
    async with make_client() as client:
        response = await client.post(
            "/files/compose", json={"source_paths": sources, "destination": str(target)}
        )
    assert response.status_code == 200
    assert response.json() == {"path": str(target), "name": "whole.bin", "type": "file"}
    assert target.read_bytes() == b"Hello, \x00binary\xffWorld!"
    assert not any(_exists(source) for source in sources)
    assert _leftovers(target.parent) == []


async def test_many_chunks_and_a_repeated_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_compose, "COPY_CHUNK", 4096)  # several copies per part
    first, second = os.urandom(3 * 4096 + 5), os.urandom(10_000)
    sources = _parts(tmp_path, first, second)
    target = tmp_path / "big.bin"
    async with make_client() as client:
        response = await client.post(
            "/files/compose",
            json={"source_paths": [sources[0], sources[1], sources[0]], "destination": str(target)},
        )
    assert response.status_code == 200
    assert target.read_bytes() == first + second + first
    assert not _exists(sources[0])


async def test_an_existing_destination_is_replaced_in_one_step(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_bytes(b"old content that is longer than the new one")
    old_inode = target.stat().st_ino
    sources = _parts(tmp_path, b"new ", b"content")
    async with make_client() as client:
        response = await client.post(
            "/files/compose", json={"source_paths": sources, "destination": str(target)}
        )
    assert response.status_code == 200
    assert target.read_bytes() == b"new content"
    assert target.stat().st_ino != old_inode  # renamed over, never truncated in place
    assert _leftovers(tmp_path) == []


async def test_relative_and_tilde_paths_resolve_from_home(tmp_path: Path) -> None:
    del tmp_path
    tag = f"sandboxd-compose-{os.getpid()}"
    part = Path(HOME) / f"{tag}.part"
    part.write_bytes(b"from home")
    target = Path(HOME) / f"{tag}.txt"
    try:
        async with make_client() as client:
            response = await client.post(
                "/files/compose",
                json={"source_paths": [f"~/{tag}.part"], "destination": f"sub/../{tag}.txt"},
            )
        assert response.status_code == 200
        assert response.json()["path"] == str(target)
        assert target.read_bytes() == b"from home"
        assert not part.exists()
    finally:
        part.unlink(missing_ok=True)
        target.unlink(missing_ok=True)


def _body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        (b"{not json", 400, "invalid request body"),
        (b"", 400, "invalid request body"),
        (b'["a"]', 400, "expected a JSON object"),
        (_body(destination="/tmp/x"), 400, "source_paths must not be empty"),
        (_body(source_paths=[], destination="/tmp/x"), 400, "source_paths must not be empty"),
        (_body(source_paths="/a", destination="/tmp/x"), 400, "list of strings"),
        (_body(source_paths=["/a", 1], destination="/tmp/x"), 400, "list of strings"),
        (_body(source_paths=["/a"]), 400, "destination is required"),
        (_body(source_paths=["/a"], destination=""), 400, "destination is required"),
        (_body(source_paths=["/a"], destination=["/x"]), 400, "destination must be a string"),
        (_body(source_paths=["/a"], destination="/x", username=0), 400, "username must be"),
        (_body(source_paths=["/a"], destination="/x", username="no-such-user-xyz"), 401, "exist"),
        (_body(source_paths=["/a"], destination="/tmp/a\x00b"), 400, "invalid destination"),
        (_body(source_paths=[""], destination="/tmp/x"), 400, "invalid source path ''"),
        (_body(source_paths=["/a\x00"], destination="/tmp/x"), 400, "NUL"),
        (_body(source_paths=["/tmp/x"], destination="/tmp/../tmp/x"), 400, "same as the dest"),
        (_body(source_paths=["/no/such/part"], destination="/tmp/x"), 404, "not found"),
        (_body(source_paths=["/tmp"], destination="/tmp/x"), 400, "is a directory"),
        (_body(source_paths=["/dev/null"], destination="/tmp/x"), 400, "not a regular file"),
        (_body(source_paths=["/etc/hostname"], destination="/tmp"), 400, "is a directory"),
        (b" " * (files_compose.MAX_BODY_BYTES + 1), 413, "too large"),
    ],
)
async def test_bad_requests_are_refused_with_envd_errors(
    body: bytes, status: int, text: str
) -> None:
    async with make_client() as client:
        response = await client.post(
            "/files/compose", content=body, headers={"Content-Type": "application/json"}
        )
    assert response.status_code == status, response.text
    assert response.json()["code"] == status
    assert text in response.json()["message"]


async def test_nothing_changes_when_a_later_source_is_missing(tmp_path: Path) -> None:
    sources = _parts(tmp_path, b"a")
    target = tmp_path / "d" / "out"
    async with make_client() as client:
        response = await client.post(
            "/files/compose",
            json={"source_paths": [*sources, str(tmp_path / "gone")], "destination": str(target)},
        )
    assert response.status_code == 404
    assert response.json()["message"] == f"source file not found: '{tmp_path / 'gone'}'"
    assert _read(sources[0]) == b"a"
    assert not (tmp_path / "d").exists()  # checked before any directory is made


async def test_destination_under_a_file_is_400(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    sources = _parts(tmp_path, b"a")
    async with make_client() as client:
        response = await client.post(
            "/files/compose",
            json={"source_paths": sources, "destination": str(blocker / "child")},
        )
    assert response.status_code == 400
    assert "not a directory" in response.json()["message"]
    assert _exists(sources[0])


@pytest.mark.parametrize(
    ("error", "status", "text"),
    [
        (errno.ENOSPC, 507, "not enough disk space"),
        (errno.EIO, 500, "cannot copy"),
    ],
)
async def test_a_failed_copy_keeps_the_destination_and_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int, text: str, status: int
) -> None:
    real_append = files_compose.append_file
    calls: list[int] = []

    def failing(source: int, target: int) -> int:
        calls.append(source)
        if len(calls) == 2:  # the first part is already in the temporary file
            raise OSError(error, os.strerror(error))
        return real_append(source, target)

    monkeypatch.setattr(files_compose, "append_file", failing)
    target = tmp_path / "out"
    target.write_bytes(b"original")
    sources = _parts(tmp_path, b"one", b"two")
    async with make_client() as client:
        response = await client.post(
            "/files/compose", json={"source_paths": sources, "destination": str(target)}
        )
    assert response.status_code == status
    assert text in response.json()["message"]
    assert target.read_bytes() == b"original"
    assert all(_exists(source) for source in sources)
    assert _leftovers(tmp_path) == []


async def test_permission_denied_is_403(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(destination: str) -> tuple[str, int]:
        raise PermissionError(errno.EACCES, "Permission denied", destination)

    monkeypatch.setattr(files_compose, "open_temporary", denied)
    sources = _parts(tmp_path, b"a")
    async with make_client() as client:
        response = await client.post(
            "/files/compose", json={"source_paths": sources, "destination": str(tmp_path / "o")}
        )
    assert response.status_code == 403
    assert response.json() == {"code": 403, "message": f"permission denied: '{tmp_path / 'o'}'"}
    assert _exists(sources[0])


@pytest.mark.skipif(ROOT, reason="root may write into a read-only directory")
async def test_unwritable_destination_folder_is_403(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "out").write_bytes(b"original")
    sources = _parts(tmp_path, b"a")
    locked.chmod(0o500)
    try:
        async with make_client() as client:
            response = await client.post(
                "/files/compose",
                json={"source_paths": sources, "destination": str(locked / "out")},
            )
    finally:
        locked.chmod(0o700)
    assert response.status_code == 403
    assert (locked / "out").read_bytes() == b"original"
    assert _exists(sources[0])


@pytest.mark.skipif(not ROOT, reason="acting as another user needs a root daemon")
async def test_the_file_and_new_folders_belong_to_the_requested_user(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    os.chmod(tmp_path, 0o755)
    existing = tmp_path / "owned-by-root"
    existing.write_bytes(b"root's")
    sources = _parts(tmp_path, b"a", b"b")
    async with make_client() as client:
        fresh = await client.post(
            "/files/compose",
            json={
                "source_paths": sources,
                "destination": str(tmp_path / "n" / "out"),
                "username": "nobody",
            },
        )
        replaced = await client.post(
            "/files/compose",
            json={
                "source_paths": [str(tmp_path / "n" / "out")],
                "destination": str(existing),
                "username": "nobody",
            },
        )
    assert (fresh.status_code, replaced.status_code) == (200, 200)
    for path in (tmp_path / "n", existing):
        assert (path.stat().st_uid, path.stat().st_gid) == (nobody.pw_uid, nobody.pw_gid)
    assert existing.read_bytes() == b"ab"


async def test_default_user_comes_from_init_state(tmp_path: Path) -> None:
    # The default user does not exist here: the daemon acts as itself (as for /files).
    sources = _parts(tmp_path, b"x")
    state = DaemonState(default_user="no-such-user-xyz")
    async with make_client(state) as client:
        response = await client.post(
            "/files/compose", json={"source_paths": sources, "destination": str(tmp_path / "o")}
        )
    assert response.status_code == 200
    assert (tmp_path / "o").stat().st_uid == os.geteuid()


async def test_needs_the_access_token_and_takes_no_signature(tmp_path: Path) -> None:
    from e2b.sandbox.signature import get_signature

    sources = _parts(tmp_path, b"a")
    target = str(tmp_path / "o")
    body = {"source_paths": sources, "destination": target}
    signed = get_signature(target, "write", None, "tok")
    async with make_client(DaemonState(access_token="tok")) as client:
        missing = await client.post("/files/compose", json=body)
        by_signature = await client.post(
            "/files/compose",
            json=body,
            params={"path": target, "signature": signed["signature"]},
        )
        wrong = await client.post("/files/compose", json=body, headers={"X-Access-Token": "x"})
        assert _exists(sources[0])
        ok = await client.post("/files/compose", json=body, headers={"X-Access-Token": "tok"})
    for refused in (missing, by_signature, wrong):
        assert refused.status_code == 401
        assert refused.json()["code"] == 401
    assert ok.status_code == 200
    assert _read(target) == b"a"


async def test_other_methods_get_a_rest_error() -> None:
    async with make_client() as client:
        response = await client.get("/files/compose")
    assert response.status_code == 405
    assert response.json() == {
        "code": 405,
        "message": "GET is not allowed on /files/compose; use POST",
    }


def test_append_falls_back_to_reads_when_the_kernel_copy_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "s"
    source.write_bytes(b"0123456789" * 1000)
    target = tmp_path / "t"

    def cross_device(*args: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(files_compose.os, "copy_file_range", cross_device)
    with source.open("rb") as src, target.open("wb") as dst:
        assert files_compose.append_file(src.fileno(), dst.fileno()) == 10_000
    assert target.read_bytes() == source.read_bytes()


def test_append_reads_pseudo_files_the_kernel_copy_sees_as_empty(tmp_path: Path) -> None:
    target = tmp_path / "t"
    expected = Path("/proc/self/cmdline").read_bytes()  # st_size 0, yet it has content
    with open("/proc/self/cmdline", "rb") as src, target.open("wb") as dst:
        copied = files_compose.append_file(src.fileno(), dst.fileno())
    assert copied == len(expected) > 0
    assert target.read_bytes() == expected
