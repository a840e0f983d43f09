"""Access tokens of sandboxes: derived from the claim UID, so nothing secret is stored.

``envdAccessToken`` (checked on the envd port) and ``trafficAccessToken`` (other ports) are
HMAC-SHA256 of the claim UID under the gateway's secret, each with its own label so one
never works as the other. Verification recomputes and compares in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from pathlib import Path

logger = logging.getLogger(__name__)

_ENVD_LABEL = b"envd-access-token\x00"
_TRAFFIC_LABEL = b"traffic-access-token\x00"
MIN_SECRET_BYTES = 16


def verify(token: str | None, expected: str) -> bool:
    """Whether ``token`` equals ``expected``, compared in constant time (None never matches)."""
    if token is None:
        return False
    return hmac.compare_digest(token.encode(), expected.encode())


def load_secret(path: str | None) -> bytes:
    """The token secret: the file's bytes (whitespace-trimmed), or random bytes when None.

    Raises:
        ValueError: if the file holds fewer than 16 bytes.
        OSError: if the file cannot be read.
    """
    if path is None:
        logger.warning(
            "no --hmac-secret-file: sandbox access tokens change when the gateway restarts"
        )
        return secrets.token_bytes(32)
    data = Path(path).read_bytes().strip()
    if len(data) < MIN_SECRET_BYTES:
        raise ValueError(f"the HMAC secret must hold at least {MIN_SECRET_BYTES} bytes")
    return data


class Tokens:
    """Derives and checks the access tokens of sandboxes.

    Args:
        secret: the gateway's HMAC key (at least 16 bytes).

    Raises:
        ValueError: if the secret is too short.
    """

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"the HMAC secret must hold at least {MIN_SECRET_BYTES} bytes")
        self._secret = secret

    def _derive(self, label: bytes, claim_uid: str) -> str:
        if not claim_uid:
            raise ValueError("a token needs the claim's UID")
        return hmac.new(self._secret, label + claim_uid.encode(), hashlib.sha256).hexdigest()

    def digest(self, label: bytes, *parts: str) -> bytes:
        """HMAC-SHA256 of ``parts`` (NUL-separated) under ``label`` and the gateway's secret.

        The same on every replica sharing the secret, unpredictable without it: what derives
        the sandbox id and request fingerprint of an ``Idempotency-Key`` create.
        """
        message = label + b"\x00".join(part.encode() for part in parts)
        return hmac.new(self._secret, message, hashlib.sha256).digest()

    def envd_access_token(self, claim_uid: str) -> str:
        """The ``envdAccessToken`` (``X-Access-Token``) of the sandbox of this claim."""
        return self._derive(_ENVD_LABEL, claim_uid)

    def traffic_access_token(self, claim_uid: str) -> str:
        """The ``trafficAccessToken`` (``E2B-Traffic-Access-Token``) of this claim's sandbox."""
        return self._derive(_TRAFFIC_LABEL, claim_uid)

    @staticmethod
    def verify(token: str | None, expected: str) -> bool:
        """Constant-time comparison (see :func:`verify`)."""
        return verify(token, expected)
