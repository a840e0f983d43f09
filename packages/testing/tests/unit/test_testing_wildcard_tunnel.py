"""The CONNECT proxy that stands in for wildcard DNS: TLS end to end, only ``*.<domain>:443``."""

from __future__ import annotations

import http.client
import http.server
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_agent_sandbox.testing.pki import CertificateAuthority
from kube_agent_sandbox.testing.wildcard_tunnel import WildcardTunnel


class _Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"host={self.headers.get('Host')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("tunnel-test-ca")


@pytest.fixture(scope="module")
def tls_server(ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    pair = ca.issue_serving("srv", dns_names=["*.sandbox.test"], ip_addresses=[])
    cert, key = pair.write(tmp_path_factory.mktemp("tunnel"), "srv")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _address(tunnel: WildcardTunnel) -> tuple[str, int]:
    host, _, port = tunnel.url.removeprefix("http://").partition(":")
    return host, int(port)


def _get(tunnel: WildcardTunnel, host: str, ca: CertificateAuthority) -> tuple[int, bytes]:
    context = ssl.create_default_context(cadata=ca.key_pair.cert_pem.decode())
    proxy_host, proxy_port = _address(tunnel)
    conn = http.client.HTTPSConnection(proxy_host, proxy_port, context=context, timeout=10)
    conn.set_tunnel(host, 443)
    try:
        conn.request("GET", "/", headers={"Host": host})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_names_under_the_domain_reach_the_target_with_tls_end_to_end(
    tls_server: int, ca: CertificateAuthority
) -> None:
    with WildcardTunnel(domain="Sandbox.Test.", target_port=tls_server) as tunnel:
        status, body = _get(tunnel, "49983-abc.sandbox.test", ca)
        assert (status, body) == (200, b"host=49983-abc.sandbox.test")
        assert tunnel.connects == ["49983-abc.sandbox.test:443"]


@pytest.mark.parametrize(
    "authority",
    [
        "49983-abc.other.test:443",
        "evilsandbox.test:443",
        "49983-abc.sandbox.test:80",
        "49983-abc.sandbox.test",
        "127.0.0.1:443",
    ],
)
def test_other_targets_are_refused(tls_server: int, authority: str) -> None:
    with WildcardTunnel(domain="sandbox.test", target_port=tls_server) as tunnel:
        with socket.create_connection(_address(tunnel)) as sock:
            sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
            answer = sock.recv(1024)
        assert answer.startswith(b"HTTP/1.1 403"), answer
        assert tunnel.connects == []
        assert tunnel.refused == [f"CONNECT {authority} HTTP/1.1"]


def test_plain_proxy_requests_are_refused(tls_server: int) -> None:
    with (
        WildcardTunnel(domain="sandbox.test", target_port=tls_server) as tunnel,
        socket.create_connection(_address(tunnel)) as sock,
    ):
        sock.sendall(b"GET http://api.sandbox.test/ HTTP/1.1\r\nHost: api.sandbox.test\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 403")


def test_a_wrong_certificate_is_not_hidden_by_the_tunnel(
    tls_server: int, tmp_path: Path, ca: CertificateAuthority
) -> None:
    """The tunnel does not terminate TLS: a name outside the certificate fails the check."""
    with WildcardTunnel(domain="test", target_port=tls_server) as tunnel:
        with pytest.raises(ssl.SSLCertVerificationError):
            _get(tunnel, "api.other.test", ca)
        assert tunnel.connects == ["api.other.test:443"]


def test_url_needs_a_started_tunnel() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = WildcardTunnel(domain="sandbox.test", target_port=1).url
