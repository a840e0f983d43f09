"""Blocking primitives matching ``_async/_backend.py`` (hand-written pair, not generated)."""

from __future__ import annotations

import contextlib
import socket
import time
from typing import TYPE_CHECKING

from kube_agent_sandbox.sdk.config import ClusterConfig, load_default

if TYPE_CHECKING:
    from httpx_ws import WebSocketSession


def authorization(config: ClusterConfig) -> str | None:
    """A fresh ``Authorization`` value (runs an exec plugin when the token expired)."""
    return config.authorization()


def sleep(seconds: float) -> None:
    """Pause the calling thread."""
    time.sleep(seconds)


def load_config(context: str | None) -> ClusterConfig:
    """In-cluster or kubeconfig configuration."""
    return load_default(context=context)


def release_websocket_reader(session: WebSocketSession) -> None:
    """End the session's pending socket read before httpx-ws closes the socket.

    httpx-ws's sync session reads in a worker thread that its ``close()`` abandons, still
    blocked in the read. Closing the socket frees its descriptor number while that read
    goes on, so the next connection the process opens can get the same number and lose its
    first bytes to the stray read (``SSL: WRONG_VERSION_NUMBER`` on the next request). Shutting
    the socket's read side down first ends the read with end-of-file; the write side stays
    open for the close frame ``close()`` sends next. The plain ``socket.shutdown`` is called on
    purpose: ``SSLSocket.shutdown`` would drop the TLS state the close frame still needs.
    """
    sock = session.stream.get_extra_info("socket")
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RD)
