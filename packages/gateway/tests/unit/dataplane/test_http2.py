"""``serve --http2``: the data plane under hypercorn over h2 (TLS, ALPN), h2c and HTTP/1.1.

The server is started as ``serve --http2`` starts it (:func:`cli.hypercorn_config`,
:func:`cli.serve_hypercorn`) in front of the data plane and a stand-in daemon; clients are
httpx with the ``h2`` package. A Connect server stream must reach the client frame by frame.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from dataplane_fakes import ENVD_TOKEN, SANDBOX_ID, State, make_record, serve_hypercorn
from upstream_app import Upstream

from kube_agent_sandbox.gateway.dataplane.router import DataPlane
from kube_agent_sandbox.gateway.tls import CertificateReloader
from kube_agent_sandbox.testing.pki import CertificateAuthority, KeyPair

HEADERS = {
    "E2b-Sandbox-Id": SANDBOX_ID,
    "E2b-Sandbox-Port": "49983",
    "X-Access-Token": ENVD_TOKEN,
    "Content-Type": "application/connect+json",
    "Connect-Protocol-Version": "1",
}


@dataclass
class Gateway:
    url: str
    upstream: Upstream
    reloader: CertificateReloader | None


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("gateway-h2-test-ca")


def issue(ca: CertificateAuthority) -> KeyPair:
    return ca.issue_serving("gw", dns_names=["localhost"], ip_addresses=["127.0.0.1"])


def client_tls(ca: CertificateAuthority) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca.key_pair.cert_pem.decode())


@pytest.fixture(params=["tls", "plain"])
async def gateway(
    request: pytest.FixtureRequest,
    upstream: tuple[Upstream, int],
    tmp_path: Path,
    ca: CertificateAuthority,
) -> AsyncIterator[Gateway]:
    state = State()
    state.index.records[SANDBOX_ID] = make_record()
    state.index.ports = {49983: upstream[1]}
    plane = DataPlane(state)
    tls = request.param == "tls"
    files = None
    reloader = None
    if tls:
        cert, key = (str(p) for p in issue(ca).write(tmp_path, "gw"))
        files = (cert, key)
        reloader = CertificateReloader(cert, key, interval=0.05)
    async with serve_hypercorn(plane, tls_files=files, reloader=reloader) as port:
        yield Gateway(f"{'https' if tls else 'http'}://localhost:{port}", upstream[0], reloader)
    await plane.aclose()


def h2_client(gateway: Gateway, ca: CertificateAuthority) -> httpx.AsyncClient:
    """HTTP/2 by ALPN over TLS; over plain HTTP, h2c with prior knowledge (no HTTP/1.1)."""
    if gateway.url.startswith("https"):
        return httpx.AsyncClient(base_url=gateway.url, http2=True, verify=client_tls(ca))
    return httpx.AsyncClient(base_url=gateway.url, http1=False, http2=True)


def frames(body: bytes) -> list[tuple[int, bytes]]:
    out = []
    while body:
        length = int.from_bytes(body[1:5], "big")
        out.append((body[0], body[5 : 5 + length]))
        body = body[5 + length :]
    return out


async def test_connect_server_stream_arrives_frame_by_frame_over_http2(
    gateway: Gateway, ca: CertificateAuthority
) -> None:
    async with (
        h2_client(gateway, ca) as client,
        client.stream("POST", "/connect-stream", headers=HEADERS, content=b"") as response,
    ):
        assert response.http_version == "HTTP/2"
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/connect+json"
        chunks = response.aiter_raw()
        first = await asyncio.wait_for(anext(chunks), 5)
        # The first frame is through while the daemon still holds the rest of the stream.
        assert not gateway.upstream.release.is_set()
        gateway.upstream.release.set()
        body = first + b"".join([c async for c in chunks])
    (flag1, start), (flag2, end), (flag3, trailer) = frames(body)
    assert (flag1, json.loads(start)) == (0, {"event": {"start": {"pid": 1}}})
    assert (flag2, json.loads(end)) == (0, {"event": {"end": {}}})
    assert (flag3, json.loads(trailer)) == (2, {})


async def test_request_body_streams_over_http2(gateway: Gateway, ca: CertificateAuthority) -> None:
    upstream = gateway.upstream

    async def body() -> AsyncIterator[bytes]:
        yield b"part-one;"
        await asyncio.wait_for(upstream.first_chunk_in.wait(), 5)
        yield b"part-two"

    async with h2_client(gateway, ca) as client:
        response = await client.post("/echo-slow", headers=HEADERS, content=body())
    assert response.http_version == "HTTP/2"
    assert response.status_code == 201
    assert response.content == b"part-one;part-two"


async def test_http1_clients_are_still_served(gateway: Gateway, ca: CertificateAuthority) -> None:
    """The E2B SDKs speak HTTP/1.1 (over TLS they offer no h2, or fall back to HTTP/1.1)."""
    gateway.upstream.release.set()
    async with httpx.AsyncClient(base_url=gateway.url, verify=client_tls(ca)) as client:
        response = await client.post("/connect-stream", headers=HEADERS, content=b"")
        headers = await client.get("/headers", headers=HEADERS)
    assert response.http_version == "HTTP/1.1"
    assert [flag for flag, _ in frames(response.content)] == [0, 0, 2]
    assert headers.status_code == 200
    # Host reaches the daemon as on uvicorn (rewritten to the pod address by the proxy).
    assert "host" in headers.json()


def renew(reloader: CertificateReloader, pair: KeyPair) -> None:
    """Overwrite the files in place (a pair that does not match in between is refused)."""
    Path(reloader.key_file).write_bytes(pair.key_pem)
    Path(reloader.cert_file).write_bytes(pair.cert_pem)


@pytest.mark.parametrize("gateway", ["tls"], indirect=True)
async def test_renewed_certificate_is_served_under_hypercorn(
    gateway: Gateway, ca: CertificateAuthority
) -> None:
    reloader = gateway.reloader
    assert reloader is not None
    renewed = issue(ca)
    renew(reloader, renewed)
    deadline = asyncio.get_running_loop().time() + 5
    serial = x509.load_pem_x509_certificate(renewed.cert_pem).serial_number
    while True:
        async with h2_client(gateway, ca) as client:
            response = await client.get("/", headers=HEADERS)
            stream = response.extensions["network_stream"]
            der = stream.get_extra_info("ssl_object").getpeercert(binary_form=True)
        if x509.load_der_x509_certificate(der).serial_number == serial:
            break
        assert asyncio.get_running_loop().time() < deadline, "renewed certificate never served"
        await asyncio.sleep(0.05)
    assert response.http_version == "HTTP/2"
