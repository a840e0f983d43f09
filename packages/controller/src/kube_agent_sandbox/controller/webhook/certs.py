"""Self-managed serving certificates of the conversion webhook (``--manage-webhook-certs``).

Upstream's startup sequence (v0.5.6 cmd/agent-sandbox-controller/main.go), reproduced exactly: reuse
the CA, certificate and key from the Secret ``agent-sandbox-webhook-certs`` when it exists;
otherwise generate an ECDSA P-256 CA and a server certificate for the webhook Service, write them,
and publish them in that Secret. When another replica published first (AlreadyExists) its
certificates win, so all replicas serve the same certificate and the CRDs carry one caBundle. No
rotation: the certificates live one year.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
import logging
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kube_agent_sandbox.api.constants import WEBHOOK_SECRET_NAME
from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.config import (
    DEFAULT_WEBHOOK_CERT_NAME,
    DEFAULT_WEBHOOK_KEY_NAME,
)
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj
from kube_agent_sandbox.controller.webhook.x509build import Issuer, build_certificate, key_usage

logger = logging.getLogger(__name__)

CA_COMMON_NAME: Final = "agent-sandbox-conversion-webhook-ca"
CA_KEY: Final = "ca.crt"
CERT_KEY: Final = "tls.crt"
KEY_KEY: Final = "tls.key"
# The serving file names default to the --webhook-cert-name/--webhook-key-name defaults
# (one source: config.py, which also owns the --webhook-cert-dir default).
DEFAULT_CERT_NAME: Final = DEFAULT_WEBHOOK_CERT_NAME
DEFAULT_KEY_NAME: Final = DEFAULT_WEBHOOK_KEY_NAME
COMBINED_PEM_NAME: Final = "cert.pem"
VALIDITY: Final = dt.timedelta(days=365)
BACKDATE: Final = dt.timedelta(hours=1)


class CertificateError(Exception):
    """Certificates could not be loaded, generated, written or published."""


@dataclass(frozen=True, slots=True)
class WebhookCertificates:
    """PEM bytes of the CA (the CRDs' caBundle) and the server certificate and key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def service_dns_names(service_name: str, namespace: str, cluster_domain: str) -> list[str]:
    """The four names the API server may use for the webhook Service (the certificate SANs)."""
    return [
        service_name,
        f"{service_name}.{namespace}",
        f"{service_name}.{namespace}.svc",
        f"{service_name}.{namespace}.svc.{cluster_domain}",
    ]


def _pem_certificate(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _common_name(value: str) -> x509.NameAttribute[str]:
    # X.509 caps a CN at 64 characters; Go does not enforce it and upstream's CN
    # "<svc>.<ns>.svc" can be longer (long namespace names). Clients verify the SANs, not the
    # CN, so keep upstream's value rather than fail or truncate.
    if len(value) <= 64:
        return x509.NameAttribute(NameOID.COMMON_NAME, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Attribute's length must be ... <= 64"
        return x509.NameAttribute(NameOID.COMMON_NAME, value, _validate=False)


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def generate_certificates(
    *,
    service_name: str,
    namespace: str,
    cluster_domain: str,
    extra_sans: Sequence[str] = (),
    now: dt.datetime | None = None,
) -> WebhookCertificates:
    """Generate a CA and a server certificate signed by it, as upstream does.

    CA: ECDSA P-256, CN ``agent-sandbox-conversion-webhook-ca``, serial 1, CA basic constraint,
    key usage CertSign + DigitalSignature. Server: ECDSA P-256, serial 2, CN
    ``<svc>.<ns>.svc``, SANs :func:`service_dns_names`, ExtKeyUsage ServerAuth, key usage
    DigitalSignature + KeyEncipherment, key PEM ``EC PRIVATE KEY``. Both valid from one hour ago
    for 365 days.

    Args:
        service_name: ``--webhook-service-name``.
        namespace: ``--webhook-namespace``.
        cluster_domain: ``--cluster-domain``.
        extra_sans: Additional SANs (IP addresses or DNS names), e.g. ``127.0.0.1`` when the
            API server reaches the webhook by URL in a local test cluster. Not in upstream.
        now: Clock override for tests.
    """
    now = now or dt.datetime.now(dt.UTC)
    not_before, not_after = now - BACKDATE, now + VALIDITY

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = Issuer(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME)]), ca_key)
    ca_cert = build_certificate(
        ca.name,
        ca_key.public_key(),
        issuer=ca,
        serial=1,
        not_before=not_before,
        not_after=not_after,
        usage=key_usage(digital_signature=True, key_cert_sign=True),
        ca=True,
    )

    server_key = ec.generate_private_key(ec.SECP256R1())
    names = service_dns_names(service_name, namespace, cluster_domain)
    server_cert = build_certificate(
        x509.Name([_common_name(f"{service_name}.{namespace}.svc")]),
        server_key.public_key(),
        issuer=ca,
        serial=2,
        not_before=not_before,
        not_after=not_after,
        usage=key_usage(digital_signature=True, key_encipherment=True),
        extended_usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        sans=[_san(n) for n in [*names, *extra_sans]],
    )
    key_pem = server_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,  # "EC PRIVATE KEY", like Go's SEC 1
        serialization.NoEncryption(),
    )
    return WebhookCertificates(
        ca_pem=_pem_certificate(ca_cert),
        cert_pem=_pem_certificate(server_cert),
        key_pem=key_pem,
    )


def validate_certificates(certs: WebhookCertificates) -> None:
    """Check that the three PEM blobs hold a CA certificate, a certificate and a private key.

    Raises:
        CertificateError: with upstream's wording for the first problem found.
    """
    if not certs.ca_pem or not certs.cert_pem or not certs.key_pem:
        raise CertificateError("missing certificate or key data")
    for what, data in (("CA certificate", certs.ca_pem), ("server certificate", certs.cert_pem)):
        try:
            x509.load_pem_x509_certificate(data)
        except ValueError as exc:
            raise CertificateError(f"invalid {what} PEM data") from exc
    try:
        serialization.load_pem_private_key(certs.key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError("invalid server private key PEM data") from exc


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600 (a running server may reload it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_serving_files(
    cert_dir: str | Path,
    certs: WebhookCertificates,
    *,
    cert_name: str = DEFAULT_CERT_NAME,
    key_name: str = DEFAULT_KEY_NAME,
) -> tuple[Path, Path]:
    """Write the server certificate and key (0600) into ``cert_dir``, creating it (0755).

    Returns:
        The certificate and key paths.
    """
    directory = Path(cert_dir)
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    cert_path, key_path = directory / cert_name, directory / key_name
    _write_private(cert_path, certs.cert_pem)
    _write_private(key_path, certs.key_pem)
    return cert_path, key_path


def resolve_cert_files(
    cert_dir: str | Path,
    cert_name: str = DEFAULT_CERT_NAME,
    key_name: str = DEFAULT_KEY_NAME,
) -> tuple[Path, Path]:
    """Find the serving certificate and key when certificates are not self-managed.

    With the default names and neither file present, a combined ``cert.pem`` (certificate and
    key blocks in one file, as some provisioners deliver) is used for both.

    Raises:
        CertificateError: a name is blank, or a file is missing or a directory.
    """
    if not cert_name.strip() or not key_name.strip():
        raise CertificateError("--webhook-cert-name and --webhook-key-name must not be blank")
    directory = Path(cert_dir)
    cert_path, key_path = directory / cert_name, directory / key_name
    if cert_path.is_file() and key_path.is_file():
        return cert_path, key_path
    defaults = (cert_name, key_name) == (DEFAULT_CERT_NAME, DEFAULT_KEY_NAME)
    combined = directory / COMBINED_PEM_NAME
    if defaults and not cert_path.exists() and not key_path.exists() and combined.is_file():
        return combined, combined
    for what, path in (("certificate", cert_path), ("private key", key_path)):
        if not path.exists():
            raise CertificateError(f"webhook {what} {str(path)!r}: no such file")
        if not path.is_file():
            raise CertificateError(f"webhook {what} {str(path)!r}: is not a regular file")
    raise CertificateError(f"webhook certificate files in {str(directory)!r} are unusable")


def _write_local(cert_dir: str | Path, certs: WebhookCertificates) -> None:
    try:
        write_serving_files(cert_dir, certs)
    except OSError as exc:
        raise CertificateError(f"failed to write certificate files locally: {exc}") from exc


def _from_secret(secret: Obj) -> WebhookCertificates:
    data = secret.get("data") or {}
    if not isinstance(data, Mapping):
        raise CertificateError("missing certificate or key data")

    def field(key: str) -> bytes:
        value = data.get(key) or ""
        try:
            return base64.b64decode(value, validate=True) if isinstance(value, str) else b""
        except binascii.Error:
            return b""

    certs = WebhookCertificates(field(CA_KEY), field(CERT_KEY), field(KEY_KEY))
    validate_certificates(certs)
    return certs


def _to_secret(certs: WebhookCertificates, *, name: str, namespace: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {
            CA_KEY: base64.b64encode(certs.ca_pem).decode(),
            CERT_KEY: base64.b64encode(certs.cert_pem).decode(),
            KEY_KEY: base64.b64encode(certs.key_pem).decode(),
        },
    }


async def _load_secret(
    client: Client, *, name: str, namespace: str, context: str
) -> WebhookCertificates:
    secret = await client.get(SECRETS, namespace, name)
    try:
        return _from_secret(secret)
    except CertificateError as exc:
        raise CertificateError(
            f"shared Secret {name} has invalid certificate data{context}: {exc}"
        ) from exc


async def ensure_webhook_certificates(
    client: Client,
    *,
    cert_dir: str | Path,
    namespace: str,
    service_name: str,
    cluster_domain: str,
    secret_name: str = WEBHOOK_SECRET_NAME,
    extra_sans: Sequence[str] = (),
) -> WebhookCertificates:
    """Load or create the shared certificates and write the serving files into ``cert_dir``.

    Args:
        client: API client (needs get/create on the Secret).
        cert_dir: ``--webhook-cert-dir``; ``tls.crt`` and ``tls.key`` are written there.
        namespace: ``--webhook-namespace`` (Secret and Service namespace).
        service_name: ``--webhook-service-name``.
        cluster_domain: ``--cluster-domain``.
        secret_name: Name of the shared Secret.
        extra_sans: Extra SANs for newly generated certificates (see
            :func:`generate_certificates`); ignored when the Secret already exists.

    Returns:
        The certificates in use (``ca_pem`` is the caBundle for the CRDs).

    Raises:
        CertificateError: the Secret holds unusable data, or the files cannot be written.
        ApiError: reading or creating the Secret failed for another reason.
    """
    try:
        certs = await _load_secret(client, name=secret_name, namespace=namespace, context="")
    except ApiError as exc:
        if not exc.not_found:
            raise
    else:
        logger.info("using webhook certificates from Secret", extra={"secret": secret_name})
        _write_local(cert_dir, certs)
        return certs

    logger.info("no shared webhook certificates found; generating new ones")
    certs = generate_certificates(
        service_name=service_name,
        namespace=namespace,
        cluster_domain=cluster_domain,
        extra_sans=extra_sans,
    )
    _write_local(cert_dir, certs)
    try:
        await client.create(
            SECRETS, namespace, _to_secret(certs, name=secret_name, namespace=namespace)
        )
    except ApiError as exc:
        if not exc.already_exists:
            raise
        logger.info("webhook Secret was created concurrently by another replica; loading it")
        certs = await _load_secret(
            client, name=secret_name, namespace=namespace, context=" during concurrent load"
        )
        _write_local(cert_dir, certs)
    else:
        logger.info("created shared webhook certificates Secret", extra={"secret": secret_name})
    return certs
