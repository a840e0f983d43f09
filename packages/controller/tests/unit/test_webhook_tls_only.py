"""The conversion webhook port speaks TLS 1.2 or newer only: plain HTTP and old TLS fail.

The apiserver reaches the webhook over the cluster network, so a request that downgrades to
plain HTTP or to TLS 1.0/1.1 must not be served. Real sockets on a loopback port.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kube_agent_sandbox.controller.webhook import (
    ConversionWebhookServer,
    WebhookCertificates,
    generate_certificates,
    write_serving_files,
)

SERVICE_HOST = "agent-sandbox-webhook-service.agent-sandbox-system.svc"


@pytest.fixture
def certs() -> WebhookCertificates:
    return generate_certificates(
        service_name="agent-sandbox-webhook-service",
        namespace="agent-sandbox-system",
        cluster_domain="cluster.local",
    )


@pytest.fixture
async def server(
    tmp_path: Path, certs: WebhookCertificates
) -> AsyncIterator[ConversionWebhookServer]:
    cert_file, key_file = write_serving_files(tmp_path, certs)
    webhook = ConversionWebhookServer(cert_file, key_file, host="127.0.0.1", port=0)
    await webhook.start()
    try:
        yield webhook
    finally:
        await webhook.stop()


def _client_context(certs: WebhookCertificates, version: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=certs.ca_pem.decode())
    context.minimum_version = context.maximum_version = version
    if version < ssl.TLSVersion.TLSv1_2:
        context.set_ciphers("ALL:@SECLEVEL=0")  # let the client offer what old TLS needs
    return context


def _handshake(port: int, context: ssl.SSLContext) -> str:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=SERVICE_HOST) as tls,
    ):
        return str(tls.version())


def _plain_http(port: int) -> bytes:
    request = (
        f"POST /convert HTTP/1.1\r\nHost: {SERVICE_HOST}\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


async def test_plain_http_is_not_served(server: ConversionWebhookServer) -> None:
    try:
        answer = await asyncio.to_thread(_plain_http, server.port)
    except (ConnectionResetError, BrokenPipeError):
        answer = b""  # the TLS server dropped the connection: not served either
    assert not answer.startswith(b"HTTP/"), answer[:200]


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
async def test_tls_12_and_13_are_served(
    server: ConversionWebhookServer, certs: WebhookCertificates, version: ssl.TLSVersion
) -> None:
    expected = {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
    got = await asyncio.to_thread(_handshake, server.port, _client_context(certs, version))
    assert got == expected


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1])
async def test_tls_below_12_is_refused(
    server: ConversionWebhookServer, certs: WebhookCertificates, version: ssl.TLSVersion
) -> None:
    try:
        context = _client_context(certs, version)
    except (ssl.SSLError, ValueError):
        pytest.skip(f"this OpenSSL cannot even offer {version.name}")
    with pytest.raises((ssl.SSLError, ConnectionResetError)) as refused:
        await asyncio.to_thread(_handshake, server.port, context)
    # the server refused the hello; the client did offer the old version
    assert "NO_PROTOCOLS_AVAILABLE" not in str(refused.value)
