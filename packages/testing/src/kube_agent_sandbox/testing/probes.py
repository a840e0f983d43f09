"""Free local ports and HTTP readiness probes for the processes of the local cluster.

Kept apart from :mod:`~kube_agent_sandbox.testing.cluster`: the harness's other processes
(controller, gateway, demo) need free ports too, without the cluster.
"""

from __future__ import annotations

import socket
import ssl
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def https_ok(url: str, context: ssl.SSLContext) -> bool:
    """Whether ``url`` answers 200 ``ok`` over TLS with ``context`` (a /readyz or /healthz)."""
    with urllib.request.urlopen(url, context=context, timeout=5) as response:
        return bool(response.status == 200 and response.read().strip() == b"ok")


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 over plain HTTP."""
    with urllib.request.urlopen(url, timeout=5) as response:
        return bool(response.status == 200)
