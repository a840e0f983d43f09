"""Certificates and keys of the local test cluster.

The local cluster runs the real apiserver with TLS, client-certificate authentication and RBAC, so
every component and every test identity needs a certificate signed by one throwaway CA. This
module makes that CA, the apiserver's serving certificate, client certificates for any user and
groups, and the RSA key that signs and verifies service-account tokens.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kube_agent_sandbox.controller.webhook.x509build import Issuer, build_certificate, key_usage

_VALIDITY = dt.timedelta(days=7)
_CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate with its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write ``<name>.crt`` and ``<name>.key`` (mode 0600) into ``directory``.

        Args:
            directory: Existing directory to write into.
            name: Base name of both files.

        Returns:
            The certificate path and the key path.
        """
        cert_path = directory / f"{name}.crt"
        key_path = directory / f"{name}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)
        return cert_path, key_path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


class CertificateAuthority:
    """A self-signed CA that issues the cluster's serving and client certificates."""

    def __init__(self, common_name: str = "agent-sandbox-testenv-ca") -> None:
        """Create a fresh CA key and self-signed certificate.

        Args:
            common_name: Subject common name of the CA certificate.
        """
        self._key = _new_key()
        now = dt.datetime.now(dt.UTC)
        subject = _name(common_name)
        self._issuer = Issuer(subject, self._key)
        self._cert = build_certificate(
            subject,
            self._key.public_key(),
            issuer=self._issuer,
            serial=x509.random_serial_number(),
            not_before=now - _CLOCK_SKEW,
            not_after=now + _VALIDITY,
            usage=key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True),
            ca=True,
        )

    @property
    def certificate(self) -> x509.Certificate:
        """The CA certificate."""
        return self._cert

    @property
    def key_pair(self) -> KeyPair:
        """The CA certificate and key in PEM."""
        return KeyPair(self._cert.public_bytes(serialization.Encoding.PEM), _key_pem(self._key))

    def _issue(
        self,
        subject: x509.Name,
        *,
        usage: x509.ObjectIdentifier,
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
    ) -> KeyPair:
        key = _new_key()
        now = dt.datetime.now(dt.UTC)
        alt_names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
        cert = build_certificate(
            subject,
            key.public_key(),
            issuer=self._issuer,
            serial=x509.random_serial_number(),
            not_before=now - _CLOCK_SKEW,
            not_after=now + _VALIDITY,
            usage=key_usage(digital_signature=True, key_encipherment=True),
            extended_usages=[usage],
            sans=alt_names,
        )
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def issue_serving(
        self,
        common_name: str,
        *,
        dns_names: Sequence[str],
        ip_addresses: Sequence[str],
    ) -> KeyPair:
        """Issue a TLS server certificate.

        Args:
            common_name: Subject common name.
            dns_names: DNS subject alternative names.
            ip_addresses: IP subject alternative names.

        Returns:
            The certificate and its key.

        Raises:
            ValueError: If neither a DNS name nor an IP address is given, or an IP is malformed.
        """
        if not dns_names and not ip_addresses:
            raise ValueError("a serving certificate needs at least one DNS name or IP address")
        return self._issue(
            _name(common_name),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
        )

    def issue_client(self, user: str, *, groups: Sequence[str] = ()) -> KeyPair:
        """Issue a client certificate: the apiserver reads CN as user name and O as groups.

        Args:
            user: Kubernetes user name (certificate common name).
            groups: Kubernetes groups (certificate organizations).

        Returns:
            The certificate and its key.

        Raises:
            ValueError: If the user name is empty.
        """
        if not user:
            raise ValueError("a client certificate needs a non-empty user name")
        return self._issue(_name(user, groups), usage=ExtendedKeyUsageOID.CLIENT_AUTH)


def service_account_key() -> bytes:
    """A fresh RSA private key (PEM) that both signs and verifies service-account tokens."""
    return _key_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))
