"""The HTTPS server the API server calls to convert objects (``POST /convert``).

Runs on every controller replica (not leader-gated), like controller-runtime's webhook server:
TLS with the serving certificate from the cert dir, no client certificates, one route. Bodies
are parsed and written with orjson; a LIST through v1alpha1 sends every object in one review.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from pathlib import Path
from typing import Final

import orjson
from aiohttp import web

from kube_agent_sandbox.api.constants import CONVERSION_PATH
from kube_agent_sandbox.controller.webhook.review import MalformedReviewError, handle_review

logger = logging.getLogger(__name__)

DEFAULT_PORT: Final = 9443
DEFAULT_MAX_BODY_BYTES: Final = 256 * 1024 * 1024
OFFLOAD_BODY_BYTES: Final = 256 * 1024


class ConversionWebhookServer:
    """Serves ConversionReviews over HTTPS until stopped.

    Args:
        cert_file: PEM serving certificate (chain); may be the same file as ``key_file``.
        key_file: PEM private key.
        host: Address to bind; ``""`` binds all interfaces (IPv4 and, where available, IPv6).
        port: TCP port (``--webhook-port``, default 9443); 0 picks a free port (see ``port``).
        path: URL path of the conversion endpoint.
        max_body_bytes: Largest accepted request body.
    """

    def __init__(
        self,
        cert_file: str | Path,
        key_file: str | Path,
        *,
        host: str = "",
        port: int = DEFAULT_PORT,
        path: str = CONVERSION_PATH,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._cert_file = Path(cert_file)
        self._key_file = Path(key_file)
        self._host = host
        self._requested_port = port
        self._path = path
        self._max_body_bytes = max_body_bytes
        self._ssl: ssl.SSLContext | None = None
        self._runner: web.AppRunner | None = None
        self._socket: socket.socket | None = None

    @property
    def started(self) -> bool:
        """True while the server accepts connections (for readiness checks)."""
        return self._runner is not None

    @property
    def port(self) -> int:
        """The bound port (useful with ``port=0``).

        Raises:
            RuntimeError: the server is not started.
        """
        if self._socket is None:
            raise RuntimeError("webhook server is not started")
        port: int = self._socket.getsockname()[1]
        return port

    def _load_certificates(self, context: ssl.SSLContext) -> None:
        key = None if self._key_file == self._cert_file else self._key_file
        context.load_cert_chain(self._cert_file, key)

    def reload_certificates(self) -> None:
        """Re-read the certificate and key; new TLS handshakes use them."""
        if self._ssl is None:
            raise RuntimeError("webhook server is not started")
        self._load_certificates(self._ssl)
        logger.info("reloaded webhook serving certificate", extra={"cert": str(self._cert_file)})

    def _bind(self) -> socket.socket:
        if self._host in ("", "::") and socket.has_dualstack_ipv6():
            return socket.create_server(
                ("::", self._requested_port), family=socket.AF_INET6, dualstack_ipv6=True
            )
        host = self._host or "0.0.0.0"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, self._requested_port), family=family)

    async def start(self) -> None:
        """Bind, load the certificate and serve; returns once connections are accepted."""
        if self._runner is not None:
            return
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load_certificates(context)
        app = web.Application(client_max_size=self._max_body_bytes)
        app.router.add_post(self._path, self._convert)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        sock = self._bind()
        try:
            await web.SockSite(runner, sock, ssl_context=context).start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._ssl, self._runner, self._socket = context, runner, sock
        logger.info(
            "conversion webhook serving",
            extra={"address": sock.getsockname()[0], "port": self.port, "path": self._path},
        )

    async def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        runner, sock = self._runner, self._socket
        self._runner = self._socket = self._ssl = None
        if runner is not None:
            await runner.cleanup()
        if sock is not None:
            sock.close()

    async def _convert(self, request: web.Request) -> web.Response:
        body = await request.read()
        if len(body) > OFFLOAD_BODY_BYTES:
            # A LIST through v1alpha1 converts every item in one review: keep the event loop
            # (reconcilers, probes) responsive while it runs.
            status, payload = await asyncio.to_thread(answer, body)
        else:
            status, payload = answer(body)
        if status != 200:
            return web.Response(status=status, body=payload, content_type="text/plain")
        return web.Response(body=payload, content_type="application/json")


def answer(body: bytes) -> tuple[int, bytes]:
    """Turn a request body into an HTTP status and response body (200 JSON or 400 text)."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        logger.warning("unparseable conversion request", extra={"error": str(exc)})
        return 400, f"invalid JSON: {exc}\n".encode()
    try:
        result = handle_review(review)
    except MalformedReviewError as exc:
        logger.warning("malformed conversion request", extra={"error": str(exc)})
        return 400, f"{exc}\n".encode()
    try:
        return 200, orjson.dumps(result)
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits: slower but exact
        return 200, json.dumps(result, separators=(",", ":")).encode()
