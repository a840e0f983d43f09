"""The throwaway PKI: certificates chain to the CA and carry the identity the apiserver reads."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kube_agent_sandbox.testing.pki import CertificateAuthority, service_account_key


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


def _load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_ca_is_a_self_signed_ca(ca: CertificateAuthority) -> None:
    cert = _load(ca.key_pair.cert_pem)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cert.verify_directly_issued_by(cert)


def test_client_certificate_names_user_and_groups(ca: CertificateAuthority) -> None:
    pair = ca.issue_client("admin", groups=["system:masters", "devs"])
    cert = _load(pair.cert_pem)
    cert.verify_directly_issued_by(ca.certificate)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters", "devs"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()  # type: ignore[union-attr]


def test_serving_certificate_has_the_sans(ca: CertificateAuthority) -> None:
    pair = ca.issue_serving("apiserver", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    cert = _load(pair.cert_pem)
    cert.verify_directly_issued_by(ca.certificate)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_certificates_of_another_ca_do_not_chain(ca: CertificateAuthority) -> None:
    other = CertificateAuthority("other")
    cert = _load(other.issue_client("x").cert_pem)
    with pytest.raises(ValueError, match="Issuer"):
        cert.verify_directly_issued_by(ca.certificate)


def test_client_certificate_needs_a_user(ca: CertificateAuthority) -> None:
    with pytest.raises(ValueError, match="user name"):
        ca.issue_client("")


def test_serving_certificate_needs_a_name(ca: CertificateAuthority) -> None:
    with pytest.raises(ValueError, match="DNS name or IP"):
        ca.issue_serving("x", dns_names=[], ip_addresses=[])


def test_serving_certificate_rejects_a_bad_ip(ca: CertificateAuthority) -> None:
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        ca.issue_serving("x", dns_names=[], ip_addresses=["999.1.1.1"])


def test_key_pair_files_are_private(ca: CertificateAuthority, tmp_path: Path) -> None:
    cert_path, key_path = ca.issue_client("u").write(tmp_path, "u")
    assert cert_path.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    assert key_path.stat().st_mode & 0o077 == 0


def test_service_account_key_is_rsa_2048() -> None:
    key = serialization.load_pem_private_key(service_account_key(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    assert key.key_size == 2048
