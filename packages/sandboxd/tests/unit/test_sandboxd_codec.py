"""Unit tests of sandboxd's small building blocks: Connect codec, multipart parser, paths, users."""

from __future__ import annotations

import base64
import json
import os
import struct
from pathlib import Path

import pytest

from kube_agent_sandbox.sandboxd import connect_codec, multipart_parser, users
from kube_agent_sandbox.sandboxd.process_manager import build_env, exit_description

# --- Connect codec -----------------------------------------------------------------------------


def test_envelope_layout_is_flag_length_json() -> None:
    data = connect_codec.encode_envelope({"event": {"start": {"pid": 7}}})
    flags, length = struct.unpack(">BI", data[:5])
    assert flags == 0
    assert length == len(data) - 5
    assert json.loads(data[5:]) == {"event": {"start": {"pid": 7}}}
    end = connect_codec.encode_envelope({}, end=True)
    assert end == b"\x02\x00\x00\x00\x02{}"


def test_decode_envelopes_round_trip_and_truncation() -> None:
    body = connect_codec.encode_envelope({"a": 1}) + connect_codec.encode_envelope({}, end=True)
    assert connect_codec.decode_envelopes(body) == [(0, b'{"a":1}'), (2, b"{}")]
    assert connect_codec.decode_envelopes(b"") == []
    for cut in (1, 4, 6, len(body) - 1):
        if cut == len(connect_codec.encode_envelope({"a": 1})):
            continue
        with pytest.raises(connect_codec.ConnectError) as caught:
            connect_codec.decode_envelopes(body[:cut])
        assert caught.value.code is connect_codec.Code.INVALID_ARGUMENT


@pytest.mark.parametrize("raw", [b"{", b"[]", b"1", b'"s"', b"\xff"])
def test_parse_json_message_rejects_non_objects(raw: bytes) -> None:
    with pytest.raises(connect_codec.ConnectError) as caught:
        connect_codec.parse_json_message(raw)
    assert caught.value.code is connect_codec.Code.INVALID_ARGUMENT


def test_empty_body_is_an_empty_message() -> None:
    assert connect_codec.parse_json_message(b"") == {}
    assert connect_codec.parse_json_message(b"  ") == {}


def test_codes_map_to_the_connect_http_statuses() -> None:
    expected = {
        "not_found": 404,
        "already_exists": 409,
        "invalid_argument": 400,
        "unauthenticated": 401,
        "permission_denied": 403,
        "resource_exhausted": 429,
        "unimplemented": 501,
        "deadline_exceeded": 504,
        "unavailable": 503,
        "internal": 500,
    }
    actual = {code.wire_name: code.http_status for code in connect_codec.Code}
    for name, status in expected.items():
        assert actual[name] == status
    error = connect_codec.ConnectError(connect_codec.Code.NOT_FOUND, "gone")
    assert error.to_json() == {"code": "not_found", "message": "gone"}


def test_bytes_fields_accept_standard_and_url_safe_base64() -> None:
    raw = bytes(range(256))
    assert connect_codec.b64decode(connect_codec.b64encode(raw), field="f") == raw
    assert (
        connect_codec.b64decode(base64.urlsafe_b64encode(raw).decode().rstrip("="), field="f")
        == raw
    )
    assert connect_codec.b64decode(None, field="f") == b""
    for bad in ("***", 5, "a"):
        with pytest.raises(connect_codec.ConnectError):
            connect_codec.b64decode(bad, field="f")


def test_field_readers_follow_proto3_json() -> None:
    message = {"n": "42", "f": 3.0, "b": True, "s": "x", "l": ["a"], "m": {"k": "v"}}
    assert connect_codec.get_int(message, "n") == 42  # int64 arrives as a string
    assert connect_codec.get_int(message, "f") == 3
    assert connect_codec.get_int(message, "absent", default=5) == 5
    assert connect_codec.get_bool(message, "b") is True
    assert connect_codec.get_str(message, "s") == "x"
    assert connect_codec.get_str_list(message, "l") == ["a"]
    assert connect_codec.get_str_map(message, "m") == {"k": "v"}
    for reader, value in (
        (connect_codec.get_int, {"x": "nope"}),
        (connect_codec.get_int, {"x": True}),
        (connect_codec.get_int, {"x": 1.5}),
        (connect_codec.get_bool, {"x": "true"}),
        (connect_codec.get_str, {"x": 1}),
        (connect_codec.get_str_list, {"x": [1]}),
        (connect_codec.get_str_map, {"x": {"k": 1}}),
        (connect_codec.get_object, {"x": []}),
    ):
        with pytest.raises(connect_codec.ConnectError) as caught:
            reader(value, "x")
        assert caught.value.code is connect_codec.Code.INVALID_ARGUMENT


# --- multipart -------------------------------------------------------------------------------

BODY = (
    b"preamble\r\n--XyZ\r\n"
    b'Content-Disposition: form-data; name="file"; filename="/home/user/a \\"q\\".txt"\r\n'
    b"Content-Type: application/octet-stream\r\n\r\n"
    b"first\r\n--XyQ-almost-a-boundary\r\n--Xy"
    b"\r\n--XyZ\r\n"
    b'Content-Disposition: form-data; name="file"; filename="b.bin"\r\n\r\n'
    b"\r\n"
    b"\r\n--XyZ--\r\nepilogue"
)


def _parse(body: bytes, chunk: int) -> list[tuple[str | None, str | None, bytes]]:
    parts: list[tuple[str | None, str | None, bytes]] = []
    data: list[bytes] = []
    current: list[multipart_parser.PartHeaders] = []

    def on_part(headers: multipart_parser.PartHeaders) -> None:
        current.append(headers)
        data.clear()

    def on_end() -> None:
        parts.append((current[-1].name, current[-1].filename, b"".join(data)))

    parser = multipart_parser.MultipartParser(
        b"XyZ", on_part=on_part, on_data=data.append, on_part_end=on_end
    )
    for index in range(0, len(body), chunk):
        parser.feed(body[index : index + chunk])
    parser.close()
    return parts


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 16, 64, 10_000])
def test_multipart_parts_survive_any_chunking(chunk: int) -> None:
    assert _parse(BODY, chunk) == [
        ("file", '/home/user/a "q".txt', b"first\r\n--XyQ-almost-a-boundary\r\n--Xy"),
        ("file", "b.bin", b"\r\n"),
    ]


@pytest.mark.parametrize(
    "body",
    [
        b"--XyZ\r\nContent-Disposition: form-data; name=file\r\n\r\nno end",
        b"no boundary at all",
        b"--XyZ\r\nbroken header line\r\n\r\nx\r\n--XyZ--",
        b"--XyZ junk\r\n\r\nx\r\n--XyZ--",
    ],
)
def test_multipart_malformed_bodies(body: bytes) -> None:
    with pytest.raises(multipart_parser.MultipartError):
        _parse(body, 4)


def test_multipart_header_block_size_is_bounded() -> None:
    body = b"--XyZ\r\nX-Big: " + b"a" * (multipart_parser.MAX_HEADER_BYTES + 10)
    with pytest.raises(multipart_parser.MultipartError, match="too large"):
        _parse(body, 1024)


@pytest.mark.parametrize(
    ("content_type", "boundary"),
    [
        ("multipart/form-data; boundary=abc", b"abc"),
        ('multipart/form-data; charset=utf-8; boundary="a;b c"', b"a;b c"),
        ("Multipart/Form-Data;boundary=Q", b"Q"),
    ],
)
def test_boundary_of(content_type: str, boundary: bytes) -> None:
    assert multipart_parser.boundary_of(content_type) == boundary


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "multipart/form-data", "multipart/form-data; boundary=", "text/plain"],
)
def test_boundary_of_rejects(content_type: str) -> None:
    with pytest.raises(multipart_parser.MultipartError):
        multipart_parser.boundary_of(content_type)


# --- users and paths ---------------------------------------------------------------------------

ALICE = users.User(name="alice", uid=1000, gid=1000, home="/home/alice", shell="/bin/sh")


@pytest.mark.parametrize(
    ("path", "resolved"),
    [
        ("/etc/x", "/etc/x"),
        ("~", "/home/alice"),
        ("~/a/b", "/home/alice/a/b"),
        ("rel/file", "/home/alice/rel/file"),
        ("../bob/x", "/home/bob/x"),
        ("/../../etc/passwd", "/etc/passwd"),
        ("//double//slashes/", "/double/slashes"),
        ("/a/./b/../c", "/a/c"),
    ],
)
def test_resolve_path(path: str, resolved: str) -> None:
    assert users.resolve_path(path, ALICE) == resolved


@pytest.mark.parametrize("path", ["", "/tmp/a\x00b", "\x00"])
def test_resolve_path_rejects(path: str) -> None:
    with pytest.raises(users.BadPathError):
        users.resolve_path(path, ALICE)


def test_basic_auth_user() -> None:
    header = "Basic " + base64.b64encode(b"alice:").decode()
    assert users.user_from_basic_auth(header) == "alice"
    assert users.user_from_basic_auth(None) is None
    assert users.user_from_basic_auth("Bearer token") is None
    assert users.user_from_basic_auth("Basic " + base64.b64encode(b":").decode()) is None
    with pytest.raises(users.UnknownUserError):
        users.user_from_basic_auth("Basic ***")


def test_the_daemons_own_home_is_home_when_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One daemon per sandbox on one machine: each its own home, as its $HOME says."""
    monkeypatch.setenv("HOME", str(tmp_path))
    me = users.current_user()
    assert me.home == str(tmp_path)
    assert users.resolve_path("notes.txt", me) == f"{tmp_path}/notes.txt"
    assert users.resolve_path("~", me) == str(tmp_path)
    monkeypatch.delenv("HOME")
    assert users.current_user().home != str(tmp_path)


def test_resolve_user_rules() -> None:
    me = users.current_user()
    assert users.resolve_user(None, default_user="no-such-user-xyz") == me
    with pytest.raises(users.UnknownUserError):
        users.resolve_user("no-such-user-xyz", default_user=None)
    if os.geteuid() == 0:
        assert users.resolve_user("nobody", default_user=None).name == "nobody"
        assert users.resolve_user(None, default_user="nobody").name == "nobody"
    else:
        assert users.resolve_user("root", default_user=None) == me  # cannot switch: itself


# --- process helpers ---------------------------------------------------------------------------


def test_exit_description_matches_go() -> None:
    assert exit_description(0) == (0, True, "exit status 0")
    assert exit_description(3) == (3, True, "exit status 3")
    assert exit_description(-9) == (-1, False, "signal: killed")
    assert exit_description(-15) == (-1, False, "signal: terminated")
    assert exit_description(-64) == (-1, False, "signal: signal 64")


def test_build_env_layers() -> None:
    env = build_env(
        user=ALICE,
        init_env={"A": "init", "B": "init"},
        request_env={"B": "req"},
        base={"PATH": "/bin", "SANDBOXD_PORT": "1", "KEEP": "k", "HOME": "/root"},
    )
    assert env == {
        "PATH": "/bin",
        "KEEP": "k",
        "HOME": "/home/alice",
        "USER": "alice",
        "LOGNAME": "alice",
        "A": "init",
        "B": "req",
    }
    assert build_env(user=ALICE, init_env={}, request_env={}, base={})["PATH"].startswith("/usr")
