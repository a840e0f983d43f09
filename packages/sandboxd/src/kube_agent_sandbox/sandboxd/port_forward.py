"""Expose services that listen only on 127.0.0.1 on the pod's address, as envd does.

E2B users start servers inside the sandbox (``python -m http.server``, dev servers) that often
bind 127.0.0.1; ``sbx.get_host(port)`` must still reach them. envd watches the sandbox's
listening sockets and forwards each loopback-only port from the pod interface. This module does
the same: it polls ``/proc/net/tcp{,6}`` every interval, and for every port whose listeners are
all loopback it listens on the pod address(es) and relays connections to ``127.0.0.1:<port>``;
when the service goes away the forward stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Iterable

logger = logging.getLogger(__name__)

TCP_LISTEN = "0A"
RELAY_CHUNK = 64 * 1024


def _decode_address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    # /proc prints each 32-bit word in host (little-endian) byte order.
    words = b"".join(raw[index : index + 4][::-1] for index in range(0, len(raw), 4))
    if len(words) == 4:
        return ipaddress.IPv4Address(words)
    address = ipaddress.IPv6Address(words)
    mapped = address.ipv4_mapped
    return mapped if mapped is not None else address


def parse_listeners(text: str) -> list[tuple[str, int]]:
    """``(address, port)`` of the LISTEN sockets in a ``/proc/net/tcp[6]`` table."""
    listeners: list[tuple[str, int]] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != TCP_LISTEN:
            continue
        address, _, port = fields[1].partition(":")
        try:
            listeners.append((str(_decode_address(address)), int(port, 16)))
        except ValueError:
            continue
    return listeners


def loopback_only_ports(
    listeners: Iterable[tuple[str, int]], *, own_addresses: Iterable[str] = ()
) -> set[int]:
    """Ports every listener of which is loopback (ignoring the forwarder's own listeners)."""
    own = set(own_addresses)
    by_port: dict[int, set[str]] = {}
    for address, port in listeners:
        by_port.setdefault(port, set()).add(address)
    result: set[int] = set()
    for port, addresses in by_port.items():
        others = addresses - own
        parsed = [ipaddress.ip_address(address) for address in others]
        if parsed and all(address.is_loopback for address in parsed):
            result.add(port)
    return result


def read_listeners() -> list[tuple[str, int]]:
    """The LISTEN sockets of this network namespace."""
    listeners: list[tuple[str, int]] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as handle:
            listeners.extend(parse_listeners(handle.read()))
    return listeners


def pod_addresses() -> list[str]:
    """Where forwarded ports are exposed: ``SANDBOXD_FORWARD_ADDRESSES`` (comma list), else
    ``POD_IP``, else (only inside a Kubernetes pod) the address the host name resolves to.

    Outside a pod nothing is forwarded unless configured: on a workstation the host name's
    address is a real interface, and exposing its loopback services there would be a leak.
    """
    configured = os.environ.get("SANDBOXD_FORWARD_ADDRESSES") or os.environ.get("POD_IP")
    if configured:
        return [item.strip() for item in configured.split(",") if item.strip()]
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return []
    with contextlib.suppress(OSError):
        address = socket.gethostbyname(socket.gethostname())
        if not ipaddress.ip_address(address).is_loopback:
            return [address]
    return []


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            chunk = await reader.read(RELAY_CHUNK)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


class PortForwarder:
    """Keeps one listener per (pod address, loopback-only port) while the port is served."""

    def __init__(
        self,
        addresses: list[str],
        *,
        exclude: Iterable[int] = (),
        interval: float = 1.0,
        target_host: str = "127.0.0.1",
    ) -> None:
        """Create the forwarder.

        Args:
            addresses: Pod addresses to listen on.
            exclude: Ports never forwarded (the daemon's own).
            interval: Seconds between scans of the listening sockets.
            target_host: Where connections are relayed to.
        """
        self.addresses = addresses
        self.exclude = set(exclude)
        self.interval = interval
        self.target_host = target_host
        self.servers: dict[int, list[asyncio.Server]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start scanning in the background (no-op without addresses)."""
        if self.addresses and self._task is None:
            self._task = asyncio.create_task(self._loop(), name="sandboxd-port-forward")

    async def stop(self) -> None:
        """Stop scanning and close every forward."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for port in list(self.servers):
            await self._close(port)

    async def _loop(self) -> None:
        while True:
            try:
                await self.sync_once()
            except Exception:
                logger.exception("port forward scan failed")
            await asyncio.sleep(self.interval)

    async def sync_once(self) -> None:
        """Scan once: open forwards for new loopback-only ports, close stale ones."""
        listeners = await asyncio.to_thread(read_listeners)
        wanted = loopback_only_ports(listeners, own_addresses=self.addresses) - self.exclude
        for port in sorted(wanted - set(self.servers)):
            await self._open(port)
        for port in sorted(set(self.servers) - wanted):
            await self._close(port)

    async def _open(self, port: int) -> None:
        servers: list[asyncio.Server] = []
        for address in self.addresses:

            async def handle(
                reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int = port
            ) -> None:
                await self._serve(reader, writer, port)

            try:
                servers.append(await asyncio.start_server(handle, host=address, port=port))
            except OSError as exc:
                logger.debug("cannot forward %s:%d: %s", address, port, exc)
        self.servers[port] = servers
        if servers:
            logger.info("forwarding port %d from %s", port, ", ".join(self.addresses))

    async def _close(self, port: int) -> None:
        for server in self.servers.pop(port, []):
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1)
        logger.info("stopped forwarding port %d", port)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
    ) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection(self.target_host, port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_relay(reader, target_writer), _relay(target_reader, writer))
        finally:
            for stream in (writer, target_writer):
                stream.close()
                with contextlib.suppress(Exception):
                    await stream.wait_closed()
