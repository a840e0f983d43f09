"""One parser for every listen-address flag: IPv4, IPv6, hostnames, ``:port``, off, bad input."""

from __future__ import annotations

import socket

import aiohttp
import pytest

from kube_agent_sandbox.controller import config
from kube_agent_sandbox.controller.runtime import BindAddress, parse_bind_address
from kube_agent_sandbox.controller.runtime.servers import HttpRequest, HttpResponse, HttpServer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":8080", BindAddress(None, 8080)),  # every interface, IPv4 and IPv6
        ("0.0.0.0:8080", BindAddress("0.0.0.0", 8080)),
        ("127.0.0.1:0", BindAddress("127.0.0.1", 0)),
        ("127.0.0.1:9", BindAddress("127.0.0.1", 9)),
        ("localhost:9", BindAddress("localhost", 9)),
        ("metrics.example.com:65535", BindAddress("metrics.example.com", 65535)),
        ("[::1]:8081", BindAddress("::1", 8081)),
        ("[::1]:80", BindAddress("::1", 80)),
        ("[::]:8080", BindAddress("::", 8080)),
        ("[fe80::1%eth0]:8080", BindAddress("fe80::1%eth0", 8080)),
        ("0", None),
        ("", None),
    ],
)
def test_parses(text: str, expected: BindAddress | None) -> None:
    assert parse_bind_address(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8080", "expected host:port"),
        ("host", "expected host:port"),
        ("host:", "expected host:port"),
        (":", "expected host:port"),
        (":http", "expected host:port"),
        (":-1", "expected host:port"),
        ("::1:80", "expected host:port"),  # IPv6 without brackets
        ("[::1]", "expected host:port"),
        ("[::1]80", "expected host:port"),
        ("a:b:1", "expected host:port"),
        (" :8080", "expected host:port"),
        ("local host:8080", "expected host:port"),
        ("[:: 1]:8080", "expected host:port"),
        (":70000", "port out of range"),
        (":99999", "port out of range"),
    ],
)
def test_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        parse_bind_address(text)


def test_config_uses_the_same_parser() -> None:
    assert config.parse_bind_address is parse_bind_address
    assert config.BindAddress is BindAddress


async def _pong(_: HttpRequest) -> HttpResponse:
    return HttpResponse("pong")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_port_only_listens_on_every_interface() -> None:
    address = parse_bind_address(f":{_free_port()}")
    assert address is not None
    assert address.host is None
    server = HttpServer(address.host, address.port, {"/ping": _pong})
    await server.start()
    try:
        hosts = ["127.0.0.1"] + (["[::1]"] if socket.has_ipv6 and _has_ipv6_loopback() else [])
        async with aiohttp.ClientSession() as session:
            for host in hosts:
                async with session.get(f"http://{host}:{address.port}/ping") as resp:
                    assert (resp.status, await resp.text()) == (200, "pong")
    finally:
        await server.stop()


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True
