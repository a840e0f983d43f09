"""System CA certificates looked up one at a time instead of parsed as a whole bundle.

aiohttp builds two default SSL contexts when it is imported, and each parses the system CA
bundle (about 140 certificates, 1 MiB of memory apiece), although the controller verifies the
API server against the cluster's own CA. OpenSSL can find system CAs on demand in the hashed
certificate directory instead (``SSL_CERT_DIR``), which trusts the same certificates without
holding them: the controller's idle memory drops by about 2 MiB. Where either variable names
something other than OpenSSL's own default (an operator's bundle or directory), or there is no
hashed directory, nothing changes.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import MutableMapping
from pathlib import Path

__all__ = ["defer_system_trust_store"]

_FILE_ENV = "SSL_CERT_FILE"
_DIR_ENV = "SSL_CERT_DIR"


def defer_system_trust_store(environ: MutableMapping[str, str] | None = None) -> bool:
    """Point OpenSSL at the hashed system CA directory instead of the bundle file.

    Call it before anything builds an SSL context (aiohttp does so when first imported).

    Args:
        environ: The environment to change (the process's by default).

    Returns:
        Whether the environment was changed.
    """
    env = os.environ if environ is None else environ
    defaults = ssl.get_default_verify_paths()
    capath = defaults.openssl_capath
    if not _is_default(env.get(_FILE_ENV), defaults.openssl_cafile):
        return False
    if not _is_default(env.get(_DIR_ENV), capath):
        return False
    if not _has_hash_links(Path(capath)):
        return False
    env[_DIR_ENV] = capath
    env[_FILE_ENV] = os.devnull
    return True


def _is_default(value: str | None, default: str) -> bool:
    """Whether an ``SSL_CERT_*`` value is unset or names OpenSSL's default (often via a link)."""
    return value is None or Path(value).resolve() == Path(default).resolve()


def _has_hash_links(directory: Path) -> bool:
    """Whether ``directory`` holds OpenSSL's ``<subject hash>.0`` names (c_rehash's output)."""
    try:
        return any(entry.suffix == ".0" and len(entry.stem) == 8 for entry in directory.iterdir())
    except OSError:
        return False
