"""Settings of the code-interpreter server (parsed from flags and environment in ``cli.py``)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PORT = 49999
DEFAULT_HOME = "/home/user"
TOKEN_ENV = "SANDBOXD_INTERPRETER_ACCESS_TOKEN"
MAX_BODY_BYTES = 16 * 1024 * 1024
KEEPALIVE_SECONDS = 5.0
DEFAULT_ENVD_URL = "http://127.0.0.1:49983"


def default_cwd() -> str:
    """Returns the default working directory of contexts: /home/user (E2B's) or the user's home.

    Returns:
        The directory.
    """
    if Path(DEFAULT_HOME).is_dir():
        return DEFAULT_HOME
    return str(Path.home()) if Path.home().is_dir() else os.getcwd()


@dataclass(frozen=True)
class InterpreterOptions:
    """Settings of the server.

    Attributes:
        host: The address to listen on.
        port: The port to listen on (the SDK's is 49999).
        access_token: When set, every call except ``GET /health`` must carry it in
            ``X-Access-Token`` or ``E2B-Traffic-Access-Token``; when None the server is open
            (the gateway checks tokens before it proxies).
        default_cwd: The working directory of contexts created without one.
        python: The interpreter that runs Python contexts.
        node: The Node.js executable that runs JavaScript and TypeScript contexts (looked up
            only when such a context is created).
        rscript: The ``Rscript`` executable that runs R contexts (looked up only when an R
            context is created).
        keepalive_seconds: Interval of ``keepalive`` lines while a cell is silent (a write is
            how a vanished client is noticed).
        max_body_bytes: The largest accepted request body.
        user: The account code runs as (the server must be root); None keeps the server's.
        max_contexts: How many contexts may exist at once.
        envd_url: envd's base URL; a context reads the sandbox's global env vars from its
            ``/envs`` on its first execution (empty: never).
    """

    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    access_token: str | None = None
    default_cwd: str = ""
    python: str = sys.executable
    node: str = "node"
    rscript: str = "Rscript"
    keepalive_seconds: float = KEEPALIVE_SECONDS
    max_body_bytes: int = MAX_BODY_BYTES
    user: str | None = None
    max_contexts: int = 64
    envd_url: str = DEFAULT_ENVD_URL

    def resolved_cwd(self) -> str:
        """Returns ``default_cwd``, or the built-in default when it is empty.

        Returns:
            The directory.
        """
        return self.default_cwd or default_cwd()
