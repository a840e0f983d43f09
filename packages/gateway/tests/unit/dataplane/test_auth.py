"""Access-token checks of the data plane (envd rules, traffic tokens, signed file URLs)."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest

from kube_agent_sandbox.gateway.dataplane.auth import (
    authorized,
    file_signature,
    signed_file_url_ok,
)

ENVD = "e" * 64
TRAFFIC = "t" * 64


def check(
    *,
    port: int = 49983,
    method: str = "POST",
    path: str = "/process.Process/Start",
    query: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> bool:
    return authorized(
        port=port,
        method=method,
        path=path,
        query_string=query,
        headers=headers or [],
        envd_token=ENVD,
        traffic_token=TRAFFIC,
    )


def test_envd_port_needs_the_envd_token() -> None:
    assert check(headers=[(b"x-access-token", ENVD.encode())])
    assert check(headers=[(b"X-Access-Token", ENVD.encode())])
    assert not check()
    assert not check(headers=[(b"x-access-token", b"")])
    assert not check(headers=[(b"x-access-token", ENVD[:-1].encode())])
    assert not check(headers=[(b"x-access-token", (ENVD + "x").encode())])
    assert not check(headers=[(b"e2b-traffic-access-token", TRAFFIC.encode())])


def test_the_api_key_is_no_data_plane_credential() -> None:
    assert not check(headers=[(b"x-api-key", b"e2b_" + b"0" * 40)])
    assert not check(headers=[(b"authorization", b"Bearer " + ENVD.encode())])


def test_health_is_open_like_envds() -> None:
    assert check(method="GET", path="/health")
    assert not check(method="POST", path="/health")
    assert not check(method="GET", path="/health/../files")


def test_other_ports_take_the_traffic_or_the_envd_token() -> None:
    assert check(port=49999, headers=[(b"e2b-traffic-access-token", TRAFFIC.encode())])
    assert check(port=49999, headers=[(b"x-access-token", ENVD.encode())])
    assert not check(port=49999)
    assert not check(port=49999, headers=[(b"x-access-token", TRAFFIC.encode())])
    assert not check(port=3000, method="GET", path="/health")


def test_non_ascii_tokens_are_refused_not_crashing() -> None:
    assert not check(headers=[(b"x-access-token", "é".encode("latin-1"))])


def signed(
    path: str, op: str, *, user: str = "", exp: int | None = None, token: str = ENVD
) -> bytes:
    params = {"path": path}
    if user:
        params["username"] = user
    params["signature"] = file_signature(path, op, user, token, exp)
    if exp is not None:
        params["signature_expiration"] = str(exp)
    return urlencode(params).encode()


def test_signature_matches_the_sdk() -> None:
    from e2b.sandbox.signature import get_signature

    sdk = get_signature("/home/user/a.txt", "read", "user", ENVD, None)
    assert sdk["signature"] == file_signature("/home/user/a.txt", "read", "user", ENVD, None)


def test_signed_file_urls_work_without_the_header() -> None:
    later = int(time.time()) + 60
    assert check(method="GET", path="/files", query=signed("/a", "read"))
    assert check(method="POST", path="/files", query=signed("/a", "write", user="user", exp=later))
    assert not check(method="POST", path="/files", query=signed("/a", "read"))  # wrong operation
    assert not check(method="GET", path="/files", query=signed("/a", "read", token="x" * 64))
    assert not check(method="GET", path="/envs", query=signed("/a", "read"))


def test_expired_or_tampered_signatures_are_refused() -> None:
    past = int(time.time()) - 1
    assert not signed_file_url_ok("GET", signed("/a", "read", exp=past), ENVD)
    query = signed("/a", "read").replace(b"path=%2Fa", b"path=%2Fb")
    assert not signed_file_url_ok("GET", query, ENVD)
    assert not signed_file_url_ok("GET", signed("/a", "read") + b"&signature=v1_x", ENVD)
    assert not signed_file_url_ok("GET", b"path=/a&signature_expiration=abc&signature=v1_x", ENVD)
    assert not signed_file_url_ok("GET", b"\xff\xfe", ENVD)


@pytest.mark.parametrize("value", [b"v1_", b"", b"v1_" + b"A" * 2000])
def test_garbage_signatures_are_refused(value: bytes) -> None:
    assert not signed_file_url_ok("GET", b"path=/a&signature=" + value, ENVD)
