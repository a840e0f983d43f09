"""A renewed TLS certificate is served without a restart; a bad pair keeps the old one.

A real uvicorn server is started as ``serve`` starts it (:func:`cli.uvicorn_config` and
:func:`cli.serve_uvicorn`) over files laid out as the kubelet mounts a Secret that
cert-manager renews: ``tls.crt -> ..data/tls.crt`` with ``..data`` a symlink swapped
atomically to a new folder. Clients are real TLS connections trusting the test CA.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from cryptography import x509
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from kube_agent_sandbox.gateway import cli
from kube_agent_sandbox.gateway.config import GatewayOptions
from kube_agent_sandbox.gateway.metrics import GatewayMetrics
from kube_agent_sandbox.gateway.tls import CertificateReloader
from kube_agent_sandbox.testing.pki import CertificateAuthority, KeyPair

RELOAD_INTERVAL = 0.05


def serial_of(pair: KeyPair) -> int:
    return x509.load_pem_x509_certificate(pair.cert_pem).serial_number


class SecretMount:
    """A folder laid out like a kubelet-mounted Secret (``tls.crt``, ``tls.key``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0

    @property
    def cert(self) -> Path:
        return self.root / "tls.crt"

    @property
    def key(self) -> Path:
        return self.root / "tls.key"

    def publish(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Write a new version and swap ``..data`` to it in one rename, as the kubelet does."""
        self.version += 1
        folder = self.root / f"..v{self.version}"
        folder.mkdir()
        (folder / "tls.crt").write_bytes(cert_pem)
        (folder / "tls.key").write_bytes(key_pem)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(folder.name)
        os.replace(tmp, self.root / "..data")
        for name in ("tls.crt", "tls.key"):
            if not (self.root / name).is_symlink():
                (self.root / name).symlink_to(f"..data/{name}")


@dataclass
class Running:
    port: int
    reloader: CertificateReloader
    metrics: GatewayMetrics


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("gateway-tls-reload-ca")


def issue(ca: CertificateAuthority) -> KeyPair:
    return ca.issue_serving("gw", dns_names=["localhost"], ip_addresses=["127.0.0.1"])


@pytest.fixture
def mount(tmp_path: Path, ca: CertificateAuthority) -> SecretMount:
    mount = SecretMount(tmp_path)
    first = issue(ca)
    mount.publish(first.cert_pem, first.key_pem)
    return mount


async def hello(_request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


@pytest.fixture
async def server(mount: SecretMount) -> AsyncIterator[Running]:
    metrics = GatewayMetrics()
    reloader = CertificateReloader(
        str(mount.cert), str(mount.key), metrics=metrics, interval=RELOAD_INTERVAL
    )
    options = GatewayOptions(
        listen="127.0.0.1:0", tls_cert_file=str(mount.cert), tls_key_file=str(mount.key)
    )
    config = cli.uvicorn_config(Starlette(routes=[Route("/", hello)]), options, reloader)
    config.lifespan = "off"
    server = uvicorn.Server(config)
    task = asyncio.create_task(cli.serve_uvicorn(server, reloader))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = int(server.servers[0].sockets[0].getsockname()[1])
    try:
        yield Running(port, reloader, metrics)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


class Client:
    """One keep-alive HTTPS connection trusting the CA."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int, ca: CertificateAuthority) -> Client:
        context = ssl.create_default_context(cadata=ca.key_pair.cert_pem.decode())
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost"
        )
        return cls(reader, writer)

    @property
    def serial(self) -> int:
        der = self.writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number

    async def get(self) -> bytes:
        self.writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return await self.reader.readexactly(length)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def reloads(metrics: GatewayMetrics, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "agent_sandbox_gateway_tls_certificate_reloads_total", {"result": result}
    )
    return value or 0.0


async def until(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(RELOAD_INTERVAL)


async def test_renewed_certificate_is_served_to_new_connections_only(
    server: Running, mount: SecretMount, ca: CertificateAuthority, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kube_agent_sandbox.gateway.tls")
    first_serial = x509.load_pem_x509_certificate(mount.cert.read_bytes()).serial_number
    established = await Client.connect(server.port, ca)
    assert established.serial == first_serial
    assert await established.get() == b"hello"
    expiry = server.metrics.registry.get_sample_value(
        "agent_sandbox_gateway_tls_certificate_expiry_timestamp_seconds"
    )
    assert expiry is not None
    assert expiry > 0

    renewed = issue(ca)
    mount.publish(renewed.cert_pem, renewed.key_pem)
    await until(lambda: reloads(server.metrics, "ok") == 1)

    fresh = await Client.connect(server.port, ca)
    assert fresh.serial == serial_of(renewed) != first_serial
    assert await fresh.get() == b"hello"
    # The connection made before the renewal still works, on the certificate it got.
    assert await established.get() == b"hello"
    assert established.serial == first_serial
    assert f"serial {serial_of(renewed):x}" in caplog.text
    assert reloads(server.metrics, "failed") == 0
    await fresh.close()
    await established.close()


async def test_key_of_another_certificate_keeps_the_old_one(
    server: Running, mount: SecretMount, ca: CertificateAuthority, caplog: pytest.LogCaptureFixture
) -> None:
    first_serial = x509.load_pem_x509_certificate(mount.cert.read_bytes()).serial_number
    renewed, stranger = issue(ca), issue(ca)
    mount.publish(renewed.cert_pem, stranger.key_pem)
    await until(lambda: reloads(server.metrics, "failed") == 1)
    assert "not reloaded" in caplog.text
    assert "still serving the previous certificate" in caplog.text

    client = await Client.connect(server.port, ca)
    assert client.serial == first_serial
    assert await client.get() == b"hello"
    await client.close()
    # Refused once, not again every check while the files stay as they are.
    await asyncio.sleep(5 * RELOAD_INTERVAL)
    assert reloads(server.metrics, "failed") == 1

    mount.publish(renewed.cert_pem, renewed.key_pem)  # the issuer fixes it
    await until(lambda: reloads(server.metrics, "ok") == 1)
    client = await Client.connect(server.port, ca)
    assert client.serial == serial_of(renewed)
    await client.close()


def test_half_written_certificate_is_refused_then_loaded_when_complete(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    first, renewed = issue(ca), issue(ca)
    cert, key = first.write(tmp_path, "gw")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    metrics = GatewayMetrics()
    reloader = CertificateReloader(str(cert), str(key), metrics=metrics)
    reloader.watch(context)
    assert reloader.check() is None  # nothing changed

    # Written in place, not swapped: the certificate is cut off and the key still the old one.
    cert.write_bytes(renewed.cert_pem[: len(renewed.cert_pem) // 2])
    assert reloader.check() is False
    assert reloader.check() is None  # refused once per change
    cert.write_bytes(renewed.cert_pem)
    assert reloader.check() is False  # the old key does not match the new certificate
    key.write_bytes(renewed.key_pem)
    assert reloader.check() is True
    assert reloads(metrics, "ok") == 1
    assert reloads(metrics, "failed") == 2
    expiry = metrics.registry.get_sample_value(
        "agent_sandbox_gateway_tls_certificate_expiry_timestamp_seconds"
    )
    renewed_cert = x509.load_pem_x509_certificate(renewed.cert_pem)
    assert expiry == renewed_cert.not_valid_after_utc.timestamp()


def test_missing_file_is_refused_and_the_old_pair_kept(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    cert, key = issue(ca).write(tmp_path, "gw")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    reloader = CertificateReloader(str(cert), str(key))
    reloader.watch(context)
    key.unlink()
    assert reloader.check() is False
    assert reloader.check() is None
