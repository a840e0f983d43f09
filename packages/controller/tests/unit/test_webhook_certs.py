"""Webhook certificate generation, validation, files on disk and cert file resolution."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kube_agent_sandbox.controller.webhook.certs import (
    CertificateError,
    WebhookCertificates,
    generate_certificates,
    resolve_cert_files,
    service_dns_names,
    validate_certificates,
    write_serving_files,
)

NOW = dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def certs() -> WebhookCertificates:
    return generate_certificates(
        service_name="agent-sandbox-webhook-service",
        namespace="agent-sandbox-system",
        cluster_domain="cluster.local",
        now=NOW,
    )


def common_name(name: x509.Name) -> str:
    value = name.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert isinstance(value, str)
    return value


def test_ca_certificate(certs: WebhookCertificates) -> None:
    ca = x509.load_pem_x509_certificate(certs.ca_pem)
    assert common_name(ca.subject) == "agent-sandbox-conversion-webhook-ca"
    assert ca.issuer == ca.subject
    assert ca.serial_number == 1
    assert ca.not_valid_before_utc == NOW - dt.timedelta(hours=1)
    assert ca.not_valid_after_utc == NOW + dt.timedelta(days=365)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign
    assert usage.digital_signature
    assert not usage.key_encipherment
    public_key = ca.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    assert isinstance(public_key.curve, ec.SECP256R1)
    ca.verify_directly_issued_by(ca)


def test_server_certificate(certs: WebhookCertificates) -> None:
    ca = x509.load_pem_x509_certificate(certs.ca_pem)
    cert = x509.load_pem_x509_certificate(certs.cert_pem)
    assert common_name(cert.subject) == "agent-sandbox-webhook-service.agent-sandbox-system.svc"
    assert cert.serial_number == 2
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    assert cert.not_valid_before_utc == NOW - dt.timedelta(hours=1)
    assert cert.not_valid_after_utc == NOW + dt.timedelta(days=365)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "agent-sandbox-webhook-service",
        "agent-sandbox-webhook-service.agent-sandbox-system",
        "agent-sandbox-webhook-service.agent-sandbox-system.svc",
        "agent-sandbox-webhook-service.agent-sandbox-system.svc.cluster.local",
    ]
    assert sans.get_values_for_type(x509.IPAddress) == []
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature
    assert usage.key_encipherment
    assert not usage.key_cert_sign
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


def test_server_key(certs: WebhookCertificates) -> None:
    assert certs.key_pem.startswith(b"-----BEGIN EC PRIVATE KEY-----\n")
    key = load_pem_private_key(certs.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert isinstance(key.curve, ec.SECP256R1)
    cert = x509.load_pem_x509_certificate(certs.cert_pem)
    assert cert.public_key() == key.public_key()


def test_every_generation_uses_fresh_keys(certs: WebhookCertificates) -> None:
    other = generate_certificates(
        service_name="agent-sandbox-webhook-service",
        namespace="agent-sandbox-system",
        cluster_domain="cluster.local",
        now=NOW,
    )
    assert other.key_pem != certs.key_pem
    assert other.ca_pem != certs.ca_pem


def test_service_names_follow_the_flags() -> None:
    generated = generate_certificates(
        service_name="svc", namespace="ns", cluster_domain="corp.example"
    )
    cert = x509.load_pem_x509_certificate(generated.cert_pem)
    assert common_name(cert.subject) == "svc.ns.svc"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == service_dns_names("svc", "ns", "corp.example")
    assert service_dns_names("svc", "ns", "corp.example")[-1] == "svc.ns.svc.corp.example"
    now = dt.datetime.now(dt.UTC)
    assert cert.not_valid_before_utc <= now - dt.timedelta(minutes=59)
    assert cert.not_valid_after_utc >= now + dt.timedelta(days=364)


@pytest.mark.filterwarnings("ignore:Attribute's length must be:UserWarning")
def test_long_names_keep_upstreams_common_name() -> None:
    namespace = "n" * 63
    generated = generate_certificates(
        service_name="agent-sandbox-webhook-service", namespace=namespace, cluster_domain="c.l"
    )
    cert = x509.load_pem_x509_certificate(generated.cert_pem)
    assert common_name(cert.subject) == f"agent-sandbox-webhook-service.{namespace}.svc"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName)[-1] == (
        f"agent-sandbox-webhook-service.{namespace}.svc.c.l"
    )


def test_extra_sans_add_ip_addresses_and_names() -> None:
    generated = generate_certificates(
        service_name="svc",
        namespace="ns",
        cluster_domain="cluster.local",
        extra_sans=["127.0.0.1", "::1", "localhost"],
    )
    cert = x509.load_pem_x509_certificate(generated.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert "localhost" in sans.get_values_for_type(x509.DNSName)


def test_validate_accepts_generated_certificates(certs: WebhookCertificates) -> None:
    validate_certificates(certs)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("ca_pem", b"", "missing certificate or key data"),
        ("cert_pem", b"", "missing certificate or key data"),
        ("key_pem", b"", "missing certificate or key data"),
        ("ca_pem", b"not pem", "invalid CA certificate PEM data"),
        ("cert_pem", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "invalid"),
        ("key_pem", b"garbage", "invalid server private key PEM data"),
    ],
)
def test_validate_rejects_bad_data(
    certs: WebhookCertificates, field: str, value: bytes, message: str
) -> None:
    fields = {"ca_pem": certs.ca_pem, "cert_pem": certs.cert_pem, "key_pem": certs.key_pem}
    fields[field] = value
    broken = WebhookCertificates(**fields)
    with pytest.raises(CertificateError) as info:
        validate_certificates(broken)
    assert str(info.value).startswith(message)


def test_key_in_the_certificate_slot_is_rejected(certs: WebhookCertificates) -> None:
    with pytest.raises(CertificateError, match="invalid server certificate PEM data"):
        validate_certificates(WebhookCertificates(certs.ca_pem, certs.key_pem, certs.key_pem))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_serving_files_creates_dir_and_private_files(
    tmp_path: Path, certs: WebhookCertificates
) -> None:
    cert_dir = tmp_path / "k8s-webhook-server" / "serving-certs"

    cert_path, key_path = write_serving_files(cert_dir, certs)

    assert (cert_path, key_path) == (cert_dir / "tls.crt", cert_dir / "tls.key")
    assert cert_path.read_bytes() == certs.cert_pem
    assert key_path.read_bytes() == certs.key_pem
    assert mode(cert_path) == 0o600
    assert mode(key_path) == 0o600
    assert sorted(p.name for p in cert_dir.iterdir()) == ["tls.crt", "tls.key"]


def test_write_serving_files_overwrites_and_tightens(
    tmp_path: Path, certs: WebhookCertificates
) -> None:
    (tmp_path / "tls.crt").write_bytes(b"old")
    (tmp_path / "tls.crt").chmod(0o644)

    write_serving_files(tmp_path, certs, key_name="server.key")

    assert (tmp_path / "tls.crt").read_bytes() == certs.cert_pem
    assert mode(tmp_path / "tls.crt") == 0o600
    assert (tmp_path / "server.key").read_bytes() == certs.key_pem


def test_resolve_prefers_the_named_files(tmp_path: Path) -> None:
    for name in ("tls.crt", "tls.key", "cert.pem"):
        (tmp_path / name).write_text(name)
    assert resolve_cert_files(tmp_path) == (tmp_path / "tls.crt", tmp_path / "tls.key")


def test_resolve_falls_back_to_combined_pem(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("both")
    assert resolve_cert_files(tmp_path) == (tmp_path / "cert.pem", tmp_path / "cert.pem")


def test_resolve_custom_names(tmp_path: Path) -> None:
    (tmp_path / "a.crt").write_text("a")
    (tmp_path / "a.key").write_text("a")
    assert resolve_cert_files(tmp_path, "a.crt", "a.key") == (
        tmp_path / "a.crt",
        tmp_path / "a.key",
    )


@pytest.mark.parametrize(
    ("files", "names", "message"),
    [
        ([], ("tls.crt", "tls.key"), "webhook certificate"),
        (["tls.crt"], ("tls.crt", "tls.key"), "webhook private key"),
        (["tls.key", "cert.pem"], ("tls.crt", "tls.key"), "webhook certificate"),
        (["cert.pem"], ("x.crt", "tls.key"), "webhook certificate"),  # no fallback: custom name
        (["tls.crt"], ("tls.crt", " "), "--webhook-cert-name and --webhook-key-name"),
        ([], ("", "tls.key"), "--webhook-cert-name and --webhook-key-name"),
    ],
)
def test_resolve_errors(
    tmp_path: Path, files: list[str], names: tuple[str, str], message: str
) -> None:
    for name in files:
        (tmp_path / name).write_text(name)
    with pytest.raises(CertificateError) as info:
        resolve_cert_files(tmp_path, *names)
    assert str(info.value).startswith(message)


def test_resolve_rejects_a_directory(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").mkdir()
    (tmp_path / "tls.key").write_text("k")
    with pytest.raises(CertificateError, match="is not a regular file"):
        resolve_cert_files(tmp_path)
