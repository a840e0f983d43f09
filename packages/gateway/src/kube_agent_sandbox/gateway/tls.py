"""Checks the gateway's TLS certificate and key before serving, so mistakes fail fast.

uvicorn loads ``--tls-cert-file``/``--tls-key-file`` itself when it starts listening and
reports a problem as a bare ``ssl.SSLError`` traceback after the watch caches already
started. :func:`check_tls_files` loads the pair into a throwaway context first and turns
every failure (missing or unreadable file, not PEM, key not matching the certificate) into
one :class:`ValueError` that names the file, which the command line prints as a usage error.
"""

from __future__ import annotations

import os
import ssl

from kube_agent_sandbox.gateway.config import GatewayOptions


def _readable(path: str, flag: str) -> None:
    if not os.path.exists(path):
        raise ValueError(f"{flag} {path}: no such file")
    if not os.path.isfile(path):
        raise ValueError(f"{flag} {path}: not a regular file")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot be read: {err.strerror or err}") from None


def check_tls_files(options: GatewayOptions) -> None:
    """Verify that ``options`` name a loadable certificate and key (no-op without TLS).

    Args:
        options: The gateway's settings.

    Raises:
        ValueError: if a file is missing or unreadable, or the pair cannot be loaded.
    """
    if options.tls_cert_file is None or options.tls_key_file is None:
        return
    _readable(options.tls_cert_file, "--tls-cert-file")
    _readable(options.tls_key_file, "--tls-key-file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # An encrypted key gets an empty password (and fails) instead of a terminal prompt.
        context.load_cert_chain(options.tls_cert_file, options.tls_key_file, password=b"")
    except ssl.SSLError as err:
        reason = err.reason or err.strerror or str(err)
        raise ValueError(
            f"TLS certificate {options.tls_cert_file} and key {options.tls_key_file} cannot"
            f" be loaded ({reason}): both must be PEM and the key must match the certificate"
        ) from None
    except OSError as err:  # pragma: no cover - a race between the checks above and here
        raise ValueError(f"TLS files cannot be read: {err}") from None
