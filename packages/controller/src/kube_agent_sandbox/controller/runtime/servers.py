"""Plain-HTTP servers every replica runs: probes (``/healthz``, ``/readyz``) and ``/metrics``.

Kubelet probes and Prometheus scrape every replica, leader or not, so these start before leader
election. Checks are small callables; a failing check answers 500 with its name, as
controller-runtime's healthz handler does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

logger = logging.getLogger(__name__)

Check = Callable[[], bool]


@dataclass(frozen=True, slots=True)
class BindAddress:
    """A listen address; ``host`` ``None`` means every interface, IPv4 and IPv6 (Go's ``:port``)."""

    host: str | None
    port: int


_BIND = re.compile(r"(?:\[(?P<v6>[^\]\s]*)\]|(?P<host>[^:\[\]\s]*)):(?P<port>[0-9]+)")


def parse_bind_address(text: str) -> BindAddress | None:
    """Parse a Go ``host:port`` listen address (``--metrics-bind-address`` and the like).

    Args:
        text: ``:8080`` (every interface), ``127.0.0.1:8080``, ``localhost:8080``,
            ``[::1]:8080``, ``[::]:8080``; ``0`` or empty turns the server off
            (controller-runtime's convention). An IPv6 host needs its brackets.

    Returns:
        The address, or ``None`` when the server is disabled.

    Raises:
        ValueError: ``expected host:port`` for a malformed address, ``port out of range``
            above 65535.
    """
    if text in ("", "0"):
        return None
    match = _BIND.fullmatch(text)
    if match is None:
        raise ValueError("expected host:port")
    port = int(match["port"])
    if port > 65535:
        raise ValueError("port out of range")
    host = match["v6"] if match["v6"] is not None else match["host"]
    return BindAddress(host=host or None, port=port)


class HttpServer:
    """A small aiohttp server on one address.

    Args:
        host: interface to listen on; ``None`` listens on every interface (IPv4 and IPv6).
        port: TCP port (0 picks a free one; see :attr:`port` after start).
        app: the aiohttp application.
    """

    def __init__(self, host: str | None, port: int, app: web.Application) -> None:
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
        where = "*" if self.host is None else self.host
        logger.info("serving %s on %s:%d", ",".join(self._paths()), where, self.port)

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
