"""Plain-HTTP servers every replica runs: probes (``/healthz``, ``/readyz``) and ``/metrics``.

Kubelet probes and Prometheus scrape every replica, leader or not, so these start before leader
election. Checks are small callables; a failing check answers 500 with its name, as
controller-runtime's healthz handler does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

logger = logging.getLogger(__name__)

Check = Callable[[], bool]


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """Parse ``host:port`` / ``:port``; ``""`` or ``"0"`` mean disabled (None).

    Raises:
        ValueError: for a malformed address or port.
    """
    if address in ("", "0"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"bind address {address!r} needs a port (host:port or :port)")
    try:
        port_number = int(port)
    except ValueError:
        raise ValueError(f"invalid port in bind address {address!r}") from None
    if not 0 <= port_number <= 65535:
        raise ValueError(f"port out of range in bind address {address!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, port_number


class HttpServer:
    """A small aiohttp server on one address.

    Args:
        host: interface to listen on.
        port: TCP port (0 picks a free one; see :attr:`port` after start).
        app: the aiohttp application.
    """

    def __init__(self, host: str, port: int, app: web.Application) -> None:
        self.host = host
        self.port = port
        self.app = app
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen and serve."""
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        logger.info("serving %s on %s:%d", ",".join(self._paths()), self.host, self.port)

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _paths(self) -> list[str]:
        return sorted({r.resource.canonical for r in self.app.router.routes() if r.resource})


def _check_handler(checks: dict[str, Check]) -> Callable[[web.Request], object]:
    async def handle(_: web.Request) -> web.Response:
        failed = []
        for name, check in checks.items():
            try:
                ok = check()
            except Exception:
                logger.exception("check %s raised", name)
                ok = False
            if not ok:
                failed.append(name)
        if failed:
            return web.Response(status=500, text=f"checks failed: {', '.join(failed)}\n")
        return web.Response(text="ok")

    return handle


def health_app(healthz: dict[str, Check], readyz: dict[str, Check]) -> web.Application:
    """Application answering ``/healthz`` and ``/readyz`` from the given (live) check dicts."""
    app = web.Application()
    app.router.add_get("/healthz", _check_handler(healthz))  # type: ignore[arg-type]
    app.router.add_get("/readyz", _check_handler(readyz))  # type: ignore[arg-type]
    return app


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """Application answering ``/metrics`` in the Prometheus text format."""

    async def handle(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    return app
