"""Build one X.509 certificate: the extensions a CA or a leaf carries, in one place.

The webhook's self-managed certificates (:mod:`.certs`) and the local test cluster's PKI
(``kube_agent_sandbox.testing.pki``) both make a CA and leaf certificates signed by it; they
differ only in keys, serials, validity, names and usages, which the caller passes. A CA
gets ``BasicConstraints(ca=True)`` and a SubjectKeyIdentifier; a leaf gets
``BasicConstraints(ca=False)``, its extended key usages and SANs (when any) and an
AuthorityKeyIdentifier of its issuer. All are signed with SHA-256.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes


@dataclass(frozen=True, slots=True)
class Issuer:
    """Who signs: the issuer's subject name and private key."""

    name: x509.Name
    key: ec.EllipticCurvePrivateKey


def key_usage(
    *,
    digital_signature: bool = False,
    key_encipherment: bool = False,
    key_cert_sign: bool = False,
    crl_sign: bool = False,
) -> x509.KeyUsage:
    """A KeyUsage with the named bits set (the other five bits are never used here).

    Args:
        digital_signature: digitalSignature bit.
        key_encipherment: keyEncipherment bit.
        key_cert_sign: keyCertSign bit (CAs).
        crl_sign: cRLSign bit (CAs).

    Returns:
        The extension value.
    """
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=key_encipherment,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def build_certificate(
    subject: x509.Name,
    public_key: CertificatePublicKeyTypes,
    *,
    issuer: Issuer,
    serial: int,
    not_before: dt.datetime,
    not_after: dt.datetime,
    usage: x509.KeyUsage,
    ca: bool = False,
    extended_usages: Sequence[x509.ObjectIdentifier] = (),
    sans: Sequence[x509.GeneralName] = (),
) -> x509.Certificate:
    """Build and sign a certificate for ``public_key``.

    Args:
        subject: Subject name (for a self-signed CA, also ``issuer.name``).
        public_key: The key the certificate certifies.
        issuer: The signer (for a self-signed CA, ``subject`` and its own key).
        serial: Serial number.
        not_before: Start of validity.
        not_after: End of validity.
        usage: KeyUsage (critical), see :func:`key_usage`.
        ca: A CA certificate (BasicConstraints ``ca=True`` and a SubjectKeyIdentifier) rather
            than a leaf (``ca=False`` and an AuthorityKeyIdentifier).
        extended_usages: ExtendedKeyUsage OIDs (leaf only; the extension is left out if empty).
        sans: Subject alternative names in this order (leaf only; left out if empty).

    Returns:
        The signed certificate.

    Raises:
        ValueError: If a CA is given extended usages or SANs.
    """
    if ca and (extended_usages or sans):
        raise ValueError("a CA certificate takes no extended key usages or SANs")
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.name)
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(usage, critical=True)
    )
    if ca:
        ski = x509.SubjectKeyIdentifier.from_public_key(public_key)
        builder = builder.add_extension(ski, critical=False)
    else:
        if extended_usages:
            eku = x509.ExtendedKeyUsage(list(extended_usages))
            builder = builder.add_extension(eku, critical=False)
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key())
        builder = builder.add_extension(aki, critical=False)
    return builder.sign(issuer.key, hashes.SHA256())
