"""What ``POST /init`` configures: the access token, env vars, default user and workdir.

The gateway (or E2B's orchestrator) calls ``/init`` once a sandbox is ready, and again after a
resume. Until a token is set the daemon answers everyone (like envd; the pod's network policy
is the guard); afterwards every request except ``/health`` must carry it in ``X-Access-Token``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from dataclasses import dataclass, field

DEFAULT_USER = "user"
ENVD_VERSION = "0.6.3"  # the envd release whose SDK-gated features this daemon has


@dataclass
class DaemonState:
    """Mutable daemon configuration, shared by all handlers.

    Attributes:
        access_token: The token requests must carry, or None before ``/init`` sets one.
        env_vars: Environment added to every process (after the daemon's own environment).
        default_user: The user requests act as when they name none.
        default_workdir: The working directory of processes that name none (None = home).
        heartbeat_url: Where to report running processes (None = no heartbeat).
        sandbox_id: Sent as ``E2b-Sandbox-Id`` with each heartbeat.
    """

    access_token: str | None = None
    env_vars: dict[str, str] = field(default_factory=dict)
    default_user: str = DEFAULT_USER
    default_workdir: str | None = None
    heartbeat_url: str | None = None
    sandbox_id: str | None = field(default_factory=lambda: os.environ.get("SANDBOXD_SANDBOX_ID"))

    def token_ok(self, presented: str | None) -> bool:
        """Whether a request's ``X-Access-Token`` satisfies the configured token (constant time)."""
        if self.access_token is None:
            return True
        if presented is None:
            return False
        return hmac.compare_digest(presented.encode(), self.access_token.encode())

    def signature_ok(
        self,
        *,
        path: str,
        operation: str,
        username: str,
        signature: str,
        expiration: str | None,
        now: float | None = None,
    ) -> bool:
        """Whether a signed ``/files`` URL (the SDK's ``download_url``/``upload_url``) is valid.

        The v1 signature is ``"v1_" + unpadded base64(sha256("<path>:<operation>:<user>:<token>"
        [+ ":<expiration>"]))``; an expiration (Unix seconds) must not have passed.
        """
        if self.access_token is None:
            return True
        raw = f"{path}:{operation}:{username}:{self.access_token}"
        if expiration is not None:
            if not expiration.isdigit() or int(expiration) < (now or time.time()):
                return False
            raw += f":{expiration}"
        digest = base64.b64encode(hashlib.sha256(raw.encode()).digest()).rstrip(b"=")
        return hmac.compare_digest(signature.encode(), b"v1_" + digest)
