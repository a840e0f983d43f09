"""``serve --tls-cert-file/--tls-key-file``: checked before serving, handed to uvicorn."""

from __future__ import annotations

import contextlib
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from kube_agent_sandbox.gateway import cli, tls
from kube_agent_sandbox.gateway.config import GatewayOptions
from kube_agent_sandbox.testing.pki import CertificateAuthority, KeyPair


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("gateway-tls-test-ca")


@pytest.fixture(scope="module")
def pair(ca: CertificateAuthority) -> KeyPair:
    return ca.issue_serving("gw", dns_names=["*.sbx.example.test"], ip_addresses=["127.0.0.1"])


@pytest.fixture
def files(tmp_path: Path, pair: KeyPair) -> tuple[Path, Path]:
    return pair.write(tmp_path, "gw")


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the command line; it must stop with a usage error; returns stderr."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_both_files_turn_tls_on(files: tuple[Path, Path]) -> None:
    cert, key = files
    args = cli.build_parser().parse_args(
        ["serve", f"--tls-cert-file={cert}", f"--tls-key-file={key}", "--domain=sbx.example.test"]
    )
    options = cli.options_from_args(args)
    assert options.tls
    assert (options.tls_cert_file, options.tls_key_file) == (str(cert), str(key))
    assert not GatewayOptions().tls


@pytest.mark.parametrize("flag", ["--tls-cert-file", "--tls-key-file"])
def test_one_file_alone_is_refused(
    flag: str, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fails(["serve", f"{flag}={files[0]}"], capsys)
    assert "both a certificate file and a key file" in err
    with pytest.raises(ValueError, match="both a certificate file and a key file"):
        GatewayOptions(tls_cert_file=str(files[0]))


def test_empty_file_names_are_refused() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        GatewayOptions(tls_cert_file="", tls_key_file="")


def test_missing_file_is_named(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, _ = files
    missing = tmp_path / "nope.key"
    err = _fails(["serve", f"--tls-cert-file={cert}", f"--tls-key-file={missing}"], capsys)
    assert f"--tls-key-file {missing}: no such file" in err


def test_directory_is_refused(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, key = files
    err = _fails(["serve", f"--tls-cert-file={tmp_path}", f"--tls-key-file={key}"], capsys)
    assert f"--tls-cert-file {tmp_path}: not a regular file" in err


def test_unreadable_file_is_named(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests may run as root, where a mode of 000 still reads: make open() fail instead.
    cert, key = files

    def denied(path: str, mode: str = "r") -> Any:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(tls, "open", denied, raising=False)
    options = GatewayOptions(tls_cert_file=str(cert), tls_key_file=str(key))
    with pytest.raises(ValueError, match=f"--tls-cert-file {cert}: cannot be read: Permission"):
        tls.check_tls_files(options)


def test_not_pem_is_refused(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cert, key = files
    cert.write_text("not a certificate\n")
    err = _fails(["serve", f"--tls-cert-file={cert}", f"--tls-key-file={key}"], capsys)
    assert "cannot be loaded" in err
    assert "must be PEM" in err


def test_key_of_another_certificate_is_refused(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cert, _ = files
    other = CertificateAuthority("other").issue_serving("x", dns_names=["x"], ip_addresses=[])
    _, other_key = other.write(tmp_path, "other")
    err = _fails(["serve", f"--tls-cert-file={cert}", f"--tls-key-file={other_key}"], capsys)
    assert "cannot be loaded" in err


def test_encrypted_key_is_refused_without_prompting(
    files: tuple[Path, Path], pair: KeyPair
) -> None:
    cert, key = files
    private = serialization.load_pem_private_key(pair.key_pem, password=None)
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(ValueError, match="cannot be loaded"):
        tls.check_tls_files(GatewayOptions(tls_cert_file=str(cert), tls_key_file=str(key)))


def test_serve_hands_the_files_to_uvicorn(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    cert, key = files
    seen: list[uvicorn.Config] = []

    async def serve(self: uvicorn.Server, sockets: Any = None) -> None:
        seen.append(self.config)

    monkeypatch.setattr(uvicorn.Server, "serve", serve)
    cli.serve(GatewayOptions(listen="127.0.0.1:0", tls_cert_file=str(cert), tls_key_file=str(key)))
    (config,) = seen
    assert (config.ssl_certfile, config.ssl_keyfile) == (str(cert), str(key))
    assert config.ssl_context_factory is not None  # the certificate reloader's
    seen.clear()
    cli.serve(GatewayOptions(listen="127.0.0.1:0"))
    (config,) = seen
    assert config.ssl_certfile is None
    assert config.ssl_keyfile is None
    assert config.ssl_context_factory is None


def test_http2_flag_serves_under_hypercorn(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = files
    args = cli.build_parser().parse_args(
        [
            "serve",
            "--http2",
            "--listen=127.0.0.1:0",
            f"--tls-cert-file={cert}",
            f"--tls-key-file={key}",
        ]
    )
    options = cli.options_from_args(args)
    assert options.http2
    assert not cli.options_from_args(cli.build_parser().parse_args(["serve"])).http2
    seen: list[Any] = []

    async def serve_hypercorn(app: Any, config: Any, reloader: Any) -> None:
        seen.append((config, reloader))

    monkeypatch.setattr(cli, "serve_hypercorn", serve_hypercorn)
    cli.serve(options)
    ((config, reloader),) = seen
    assert config.bind == ["127.0.0.1:0"]
    assert (config.certfile, config.keyfile) == (str(cert), str(key))
    assert config.alpn_protocols == ["h2", "http/1.1"]
    context = config.create_ssl_context()  # goes through the certificate reloader
    assert reloader._context is context
    assert cli.hypercorn_config(GatewayOptions(listen="[::1]:8443"), None).bind == ["[::1]:8443"]


def test_the_checked_pair_serves_a_handshake(
    files: tuple[Path, Path], ca: CertificateAuthority
) -> None:
    """What passes the check is what a client trusting the CA accepts for the wildcard."""
    cert, key = files
    tls.check_tls_files(GatewayOptions(tls_cert_file=str(cert), tls_key_file=str(key)))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context()
    client.load_verify_locations(cadata=ca.key_pair.cert_pem.decode())
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(incoming, outgoing, server_hostname="49983-abc.sbx.example.test")
    s = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (c, s):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(outgoing.read())
        incoming.write(s_out.read())
    assert c.version() is not None
    assert c.getpeercert() is not None
