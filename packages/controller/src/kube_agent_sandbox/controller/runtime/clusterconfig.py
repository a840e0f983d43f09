"""A cluster's connection settings (URL, TLS, credentials) and the TLS helpers that build them.

Shared by :mod:`~kube_agent_sandbox.controller.runtime.config` (in-cluster and the loaders) and
:mod:`~kube_agent_sandbox.controller.runtime.kubeconfig` (kubeconfig parsing), so that neither
imports the other at module level.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass, field

from kube_agent_sandbox.controller.runtime.credentials import (
    Credential,
    CredentialError,
    CredentialSource,
)


class ConfigError(Exception):
    """No usable cluster configuration was found."""


@dataclass
class ClusterConfig:
    """Connection settings for one API server.

    Attributes:
        host: base URL, e.g. ``https://127.0.0.1:6443``.
        ssl_context: TLS settings (CA, client certificate); None for plain HTTP.
        tls_server_name: overrides the name checked in the server certificate.
        namespace: the default namespace of the context or service account.
        credentials: a source of changing credentials (token file, exec plugin), if any.
        static_headers: headers sent on every request (a static token, basic auth).
    """

    host: str
    ssl_context: ssl.SSLContext | None = None
    tls_server_name: str | None = None
    namespace: str = "default"
    credentials: CredentialSource | None = None
    static_headers: dict[str, str] = field(default_factory=dict)
    _applied_certificate: str | None = field(default=None, repr=False)

    def auth_headers(self) -> dict[str, str]:
        """The headers known now, without refreshing anything (static or last cached)."""
        headers = dict(self.static_headers)
        if self.credentials is not None:
            cred = self.credentials.cached()
            if cred is not None and cred.token:
                headers["Authorization"] = f"Bearer {cred.token}"
        return headers

    async def request_headers(self) -> dict[str, str]:
        """The headers of the next request, refreshing due credentials first.

        Never blocks the event loop: exec plugins run as asyncio subprocesses.

        Raises:
            CredentialError: the credential source failed and nothing is cached.
        """
        headers = dict(self.static_headers)
        if self.credentials is None:
            return headers
        cred = await self.credentials.credential()
        if cred.client_certificate and cred.client_certificate != self._applied_certificate:
            self._apply_client_certificate(cred)
        if cred.token:
            headers["Authorization"] = f"Bearer {cred.token}"
        return headers

    def unauthorized(self) -> bool:
        """The server answered 401: drop refreshable credentials.

        Returns:
            True if the request is worth retrying once with fresh credentials.
        """
        if self.credentials is None:
            return False
        self.credentials.invalidate()
        return True

    def _apply_client_certificate(self, cred: Credential) -> None:
        """Use an exec plugin's client certificate for new connections."""
        if self.ssl_context is None or cred.client_certificate is None:
            raise CredentialError("a client certificate needs an https server")
        load_cert_chain_pem(
            self.ssl_context, cred.client_certificate.encode(), (cred.client_key or "").encode()
        )
        self._applied_certificate = cred.client_certificate


def load_cert_chain_pem(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load an in-memory certificate and key (``ssl`` only reads files: a private temp dir).

    Raises:
        ConfigError: the PEM data is not a matching certificate and key.
    """
    with tempfile.TemporaryDirectory(prefix="kas-cert-") as tmp:
        cert_path = os.path.join(tmp, "tls.crt")
        key_path = os.path.join(tmp, "tls.key")
        for path, data in ((cert_path, cert_pem), (key_path, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"invalid client certificate or key: {exc}") from exc


def decode_base64(value: str, *, what: str) -> bytes:
    """Decode a ``*-data`` field.

    Raises:
        ConfigError: not base64.
    """
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{what} is not valid base64") from exc


def ssl_context_for(
    *,
    ca_data: bytes | None = None,
    ca_file: str | None = None,
    insecure: bool = False,
) -> ssl.SSLContext:
    """An SSL context trusting ``ca_data``/``ca_file`` (system roots when both are None).

    Raises:
        ConfigError: the CA cannot be read or parsed.
    """
    try:
        if ca_data is not None:
            ctx = ssl.create_default_context(cadata=ca_data.decode("ascii", "replace"))
        else:
            ctx = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"invalid certificate authority: {exc}") from exc
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
