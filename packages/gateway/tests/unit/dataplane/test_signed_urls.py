"""Signed file URLs that name no sandbox: the signature finds the sandbox (single gateway URL)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from kube_agent_sandbox.gateway.dataplane.auth import file_signature
from kube_agent_sandbox.gateway.dataplane.signed_urls import (
    addressed_to,
    is_signed_file_request,
    signing_sandbox,
)

TOKENS = [("sandboxaaaaaaaaaaaaa", "a" * 64), ("sandboxbbbbbbbbbbbbb", "b" * 64)]


def _scope(method: str, query: dict[str, str], path: str = "/files") -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": urlencode(query).encode(),
        "headers": [(b"host", b"gw"), (b"e2b-sandbox-port", b"3000")],
    }


def _signed(method: str, token: str, **extra: Any) -> dict[str, str]:
    operation = "read" if method == "GET" else "write"
    expiration = extra.get("expiration")
    query = {"path": "/home/user/a.txt", "username": "user"}
    query["signature"] = file_signature(query["path"], operation, "user", token, expiration)
    if expiration is not None:
        query["signature_expiration"] = str(expiration)
    return query


def test_only_signed_file_requests_are_candidates() -> None:
    assert is_signed_file_request(_scope("GET", _signed("GET", "a" * 64)))
    assert is_signed_file_request(_scope("POST", _signed("POST", "a" * 64)))
    assert not is_signed_file_request(_scope("GET", {"path": "/x"}))
    assert not is_signed_file_request(_scope("PUT", _signed("GET", "a" * 64)))
    assert not is_signed_file_request(_scope("GET", _signed("GET", "a" * 64), path="/health"))


def test_the_sandbox_whose_token_signed_the_url_is_found() -> None:
    for sandbox_id, token in TOKENS:
        for method in ("GET", "POST"):
            assert signing_sandbox(_scope(method, _signed(method, token)), TOKENS) == sandbox_id
    later = int(time.time()) + 60
    scope = _scope("GET", _signed("GET", "b" * 64, expiration=later))
    assert signing_sandbox(scope, TOKENS) == "sandboxbbbbbbbbbbbbb"


def test_no_sandbox_for_a_wrong_expired_or_malformed_signature() -> None:
    assert signing_sandbox(_scope("GET", _signed("GET", "c" * 64)), TOKENS) is None
    # a download signature does not open an upload
    assert signing_sandbox(_scope("POST", _signed("GET", "a" * 64)), TOKENS) is None
    expired = _signed("GET", "a" * 64, expiration=int(time.time()) - 1)
    assert signing_sandbox(_scope("GET", expired), TOKENS) is None
    tampered = {**_signed("GET", "a" * 64), "path": "/etc/shadow"}
    assert signing_sandbox(_scope("GET", tampered), TOKENS) is None
    garbled = {**_signed("GET", "a" * 64), "signature_expiration": "soon"}
    assert signing_sandbox(_scope("GET", garbled), TOKENS) is None
    assert signing_sandbox(_scope("GET", _signed("GET", "a" * 64)), []) is None


def test_the_found_sandbox_is_named_in_the_routing_headers() -> None:
    scope = _scope("GET", _signed("GET", "a" * 64))
    routed = addressed_to(scope, "sandboxaaaaaaaaaaaaa")
    assert routed["headers"] == [
        (b"host", b"gw"),
        (b"e2b-sandbox-id", b"sandboxaaaaaaaaaaaaa"),
        (b"e2b-sandbox-port", b"49983"),
    ]
    assert scope["headers"][1] == (b"e2b-sandbox-port", b"3000")  # the original is untouched
