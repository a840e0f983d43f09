"""sandboxd's REST surface in-process: /health, /init + the access token, /envs, /files."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from sandboxd_helpers import make_client, unary

from kube_agent_sandbox.sandboxd.init_state import DaemonState

HOME = os.path.expanduser("~")
HOSTNAME = Path("/etc/hostname").read_bytes()


def _unlink(path: str) -> None:
    Path(path).unlink(missing_ok=True)


async def test_health_is_204_and_needs_no_token() -> None:
    async with make_client(DaemonState(access_token="secret")) as client:
        response = await client.get("/health")
    assert response.status_code == 204
    assert response.content == b""


async def test_init_sets_token_env_and_user_then_requests_need_the_token() -> None:
    state = DaemonState()
    async with make_client(state) as client:
        assert (await client.get("/envs")).status_code == 200  # no token yet: open
        response = await client.post(
            "/init",
            json={
                "accessToken": "tok-1",
                "envVars": {"A": "1"},
                "defaultUser": "someone",
                "defaultWorkdir": "/tmp",
                "heartbeatUrl": "http://gw.example/_gateway/heartbeat",
                "sandboxId": "abc123",
                "timestamp": "2026-01-01T00:00:00Z",
            },
        )
        assert response.status_code == 204
        assert state.access_token == "tok-1"
        assert state.default_user == "someone"
        assert state.default_workdir == "/tmp"
        assert state.heartbeat_url == "http://gw.example/_gateway/heartbeat"
        assert state.sandbox_id == "abc123"

        missing = await client.get("/envs")
        assert missing.status_code == 401
        assert missing.json() == {"code": 401, "message": "missing access token"}
        wrong = await client.get("/envs", headers={"X-Access-Token": "tok-2"})
        assert wrong.status_code == 401
        assert wrong.json()["message"] == "invalid access token"
        ok = await client.get("/envs", headers={"X-Access-Token": "tok-1"})
        assert ok.status_code == 200
        assert ok.json() == {"A": "1"}
        # A second /init must carry the current token too.
        assert (await client.post("/init", json={"accessToken": "x"})).status_code == 401
        assert state.access_token == "tok-1"


async def test_wrong_token_on_an_rpc_is_a_connect_unauthenticated_error() -> None:
    async with make_client(DaemonState(access_token="t")) as client:
        response = await unary(
            client, "filesystem.Filesystem/Stat", {"path": "/"}, headers={"X-Access-Token": "u"}
        )
    assert response.status_code == 401
    assert response.json() == {"code": "unauthenticated", "message": "invalid access token"}


async def test_signed_file_urls_work_without_the_token_header(tmp_path: Path) -> None:
    from e2b.sandbox.signature import get_signature

    target = str(tmp_path / "signed.txt")
    write = get_signature(target, "write", None, "tok")
    read = get_signature(target, "read", None, "tok", expiration_in_seconds=60)
    expired = get_signature(target, "read", None, "tok", expiration_in_seconds=-5)
    other_token = get_signature(target, "read", None, "other")
    octet = {"Content-Type": "application/octet-stream"}
    async with make_client(DaemonState(access_token="tok")) as client:
        upload = await client.post(
            "/files",
            params={"path": target, "signature": write["signature"]},
            content=b"signed",
            headers=octet,
        )
        download = await client.get(
            "/files",
            params={
                "path": target,
                "signature": read["signature"],
                "signature_expiration": str(read["expiration"]),
            },
        )
        # A write signature does not allow reading, and vice versa.
        wrong_operation = await client.get(
            "/files", params={"path": target, "signature": write["signature"]}
        )
        late = await client.get(
            "/files",
            params={
                "path": target,
                "signature": expired["signature"],
                "signature_expiration": str(expired["expiration"]),
            },
        )
        forged = await client.get(
            "/files", params={"path": target, "signature": other_token["signature"]}
        )
        other_path = await client.get(
            "/files", params={"path": "/etc/hostname", "signature": read["signature"]}
        )
    assert upload.status_code == 200
    assert download.status_code == 200
    assert download.content == b"signed"
    for refused in (wrong_operation, late, forged, other_path):
        assert refused.status_code == 401


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "invalid init request"),
        (b"[1, 2]", "JSON object"),
        (json.dumps({"accessToken": 5}).encode(), "accessToken must be a string"),
        (json.dumps({"envVars": {"A": 1}}).encode(), "envVars"),
        (json.dumps({"defaultUser": "a\x00b"}).encode(), "defaultUser"),
        (json.dumps({"heartbeatUrl": "file:///etc/passwd"}).encode(), "heartbeatUrl"),
    ],
)
async def test_bad_init_bodies_are_400_and_change_nothing_harmful(
    body: bytes, message: str
) -> None:
    state = DaemonState()
    async with make_client(state) as client:
        response = await client.post(
            "/init", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400
        assert message in response.json()["message"]
        assert response.json()["code"] == 400
        assert state.access_token is None
        assert state.heartbeat_url is None
        assert (await client.get("/health")).status_code == 204


async def test_upload_multipart_then_download(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "a.txt"
    async with make_client() as client:
        response = await client.post(
            "/files",
            params={"path": str(target)},
            files=[("file", (str(target), b"hello\x00world"))],
        )
        assert response.status_code == 200
        assert response.json() == [{"path": str(target), "name": "a.txt", "type": "file"}]
        assert target.read_bytes() == b"hello\x00world"
        download = await client.get("/files", params={"path": str(target)})
    assert download.status_code == 200
    assert download.headers["content-type"] == "application/octet-stream"
    assert download.content == b"hello\x00world"


async def test_upload_several_files_uses_each_part_file_name(tmp_path: Path) -> None:
    first, second = tmp_path / "x" / "1.bin", tmp_path / "y" / "2.bin"
    async with make_client() as client:
        response = await client.post(
            "/files",
            files=[
                ("file", (str(first), b"one")),
                ("other", ("ignored", b"not a file field")),
                ("file", (str(second), os.urandom(70_000))),
            ],
        )
    assert response.status_code == 200
    assert [item["path"] for item in response.json()] == [str(first), str(second)]
    assert first.read_bytes() == b"one"
    assert second.stat().st_size == 70_000


async def test_upload_octet_stream_and_gzip(tmp_path: Path) -> None:
    plain, packed = tmp_path / "plain.bin", tmp_path / "packed.bin"
    payload = os.urandom(300_000)
    async with make_client() as client:
        first = await client.post(
            "/files",
            params={"path": str(plain)},
            content=payload,
            headers={"Content-Type": "application/octet-stream"},
        )
        second = await client.post(
            "/files",
            params={"path": str(packed)},
            content=gzip.compress(payload),
            headers={"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"},
        )
        download = await client.get(
            "/files", params={"path": str(packed)}, headers={"Accept-Encoding": "gzip"}
        )
    assert first.status_code == 200
    assert first.json() == [{"path": str(plain), "name": "plain.bin", "type": "file"}]
    assert second.status_code == 200
    assert plain.read_bytes() == payload
    assert packed.read_bytes() == payload
    assert download.headers["content-encoding"] == "gzip"
    assert download.content == payload  # httpx undoes the gzip


async def test_download_compresses_only_when_gzip_is_asked_for_specifically() -> None:
    async with make_client() as client:
        generic = await client.get(
            "/files", params={"path": "/etc/hostname"}, headers={"Accept-Encoding": "gzip, deflate"}
        )
        specific = await client.get(
            "/files", params={"path": "/etc/hostname"}, headers={"Accept-Encoding": "gzip"}
        )
        refused = await client.get(
            "/files", params={"path": "/etc/hostname"}, headers={"Accept-Encoding": "gzip;q=0"}
        )
    assert "content-encoding" not in generic.headers
    assert specific.headers["content-encoding"] == "gzip"
    assert "content-encoding" not in refused.headers
    assert generic.content == specific.content == refused.content == HOSTNAME


async def test_upload_overwrites_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("a much longer original content")
    async with make_client() as client:
        response = await client.post(
            "/files",
            params={"path": str(target)},
            content=b"new",
            headers={"Content-Type": "application/octet-stream"},
        )
    assert response.status_code == 200
    assert target.read_bytes() == b"new"


async def test_relative_and_traversal_paths_resolve_from_home(tmp_path: Path) -> None:
    home = HOME
    name = f"sandboxd-test-{os.getpid()}.txt"
    async with make_client() as client:
        response = await client.post(
            "/files",
            params={"path": f"sub/../{name}"},
            content=b"rel",
            headers={"Content-Type": "application/octet-stream"},
        )
        try:
            assert response.status_code == 200
            assert response.json()[0]["path"] == os.path.join(home, name)
            # ".." cannot climb above "/": /../../etc/hostname is /etc/hostname.
            climbing = await client.get("/files", params={"path": "/../../../etc/hostname"})
            assert climbing.status_code == 200
            assert climbing.content == HOSTNAME
        finally:
            _unlink(os.path.join(home, name))


@pytest.mark.parametrize(
    ("params", "status", "text"),
    [
        ({}, 400, "path is required"),
        ({"path": ""}, 400, "path is required"),
        ({"path": "/tmp/a\x00b"}, 400, "NUL"),
        ({"path": "/definitely/not/here"}, 404, "does not exist"),
        ({"path": "/tmp"}, 400, "is a directory"),
        ({"path": "/etc/hostname", "username": "no-such-user-xyz"}, 401, "does not exist"),
    ],
)
async def test_download_errors(params: dict[str, str], status: int, text: str) -> None:
    async with make_client() as client:
        response = await client.get("/files", params=params)
    assert response.status_code == status
    body = response.json()
    assert body["code"] == status
    assert text in body["message"]


async def test_upload_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    octet = {"Content-Type": "application/octet-stream"}
    async with make_client() as client:
        no_path = await client.post("/files", content=b"x", headers=octet)
        nul = await client.post("/files", params={"path": "/tmp/\x00"}, content=b"x", headers=octet)
        directory = await client.post(
            "/files", params={"path": str(tmp_path)}, content=b"x", headers=octet
        )
        under_file = await client.post(
            "/files", params={"path": str(blocker / "child")}, content=b"x", headers=octet
        )
        bad_gzip = await client.post(
            "/files",
            params={"path": str(tmp_path / "g")},
            content=b"not gzip",
            headers={**octet, "Content-Encoding": "gzip"},
        )
        bad_encoding = await client.post(
            "/files",
            params={"path": str(tmp_path / "b")},
            content=b"x",
            headers={**octet, "Content-Encoding": "br"},
        )
        unknown_user = await client.post(
            "/files",
            params={"path": str(tmp_path / "u"), "username": "no-such-user-xyz"},
            content=b"x",
            headers=octet,
        )
        truncated = await client.post(
            "/files",
            content=(
                b'--b\r\nContent-Disposition: form-data; name="file"; filename="'
                + str(tmp_path / "t").encode()
                + b'"\r\n\r\nab'
            ),
            headers={"Content-Type": "multipart/form-data; boundary=b"},
        )
        no_file_part = await client.post(
            "/files", files=[("other", ("x", b"y"))], params={"path": str(tmp_path / "n")}
        )
        no_boundary = await client.post(
            "/files", content=b"x", headers={"Content-Type": "multipart/form-data"}
        )
    assert (no_path.status_code, nul.status_code) == (400, 400)
    assert "is a directory" in directory.json()["message"]
    assert directory.status_code == 400
    assert under_file.status_code == 400
    assert bad_gzip.status_code == 400
    assert not (tmp_path / "g").exists()  # a failed upload leaves no new file behind
    assert bad_encoding.status_code == 400
    assert unknown_user.status_code == 401
    assert truncated.status_code == 400
    assert "truncated" in truncated.json()["message"]
    assert not (tmp_path / "t").exists()  # the half-written file is removed
    assert no_file_part.status_code == 400
    assert no_boundary.status_code == 400
    assert blocker.read_text() == "x"


async def test_metadata_headers_are_validated(tmp_path: Path) -> None:
    octet = {"Content-Type": "application/octet-stream"}
    async with make_client() as client:
        bad_value = await client.post(
            "/files",
            params={"path": str(tmp_path / "a")},
            content=b"x",
            headers=[*octet.items(), ("X-Metadata-Key", "café".encode())],
        )
        good = await client.post(
            "/files",
            params={"path": str(tmp_path / "b")},
            content=b"x",
            headers={**octet, "X-Metadata-Team": "blue"},
        )
    assert bad_value.status_code == 400
    assert "invalid metadata value" in bad_value.json()["message"]
    assert not (tmp_path / "a").exists()
    assert good.json() == [
        {"path": str(tmp_path / "b"), "name": "b", "type": "file", "metadata": {"team": "blue"}}
    ]
    assert os.getxattr(tmp_path / "b", "user.e2b.team") == b"blue"


async def test_no_space_is_507(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from kube_agent_sandbox.sandboxd import files_rest

    def full(self: object, data: bytes) -> None:
        raise files_rest.os_error(OSError(errno.ENOSPC, "No space left on device"), "/x")

    monkeypatch.setattr(files_rest._Target, "write", full)
    async with make_client() as client:
        response = await client.post(
            "/files",
            params={"path": str(tmp_path / "big")},
            content=b"data",
            headers={"Content-Type": "application/octet-stream"},
        )
    assert response.status_code == 507
    assert response.json()["code"] == 507
    assert not (tmp_path / "big").exists()


async def test_metrics_and_unknown_rest_path() -> None:
    async with make_client() as client:
        metrics = await client.get("/metrics")
        unknown = await client.get("/nothing-here")
    assert metrics.status_code == 200
    assert metrics.json()["cpu_count"] >= 1
    assert unknown.status_code == 404
