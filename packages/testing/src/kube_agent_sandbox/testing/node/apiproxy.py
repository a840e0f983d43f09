"""A TCP relay that lets pods on the real node reach the apiserver listening on 127.0.0.1.

The local control plane listens on loopback only. In-cluster clients (the controller deployed
in the cluster) find the apiserver through the ``kubernetes`` Service, whose endpoint is the
apiserver's advertise address: the node's bridge address. This relay listens there, on the
apiserver's port, and copies bytes both ways to 127.0.0.1; TLS passes through untouched, so
clients still verify the apiserver's own certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

_log = logging.getLogger(__name__)


class TcpRelay:
    """Forwards every connection on ``listen_host:listen_port`` to ``target_host:target_port``."""

    def __init__(
        self, listen_host: str, listen_port: int, *, target_host: str, target_port: int
    ) -> None:
        """Prepare the relay.

        Args:
            listen_host: Address to listen on.
            listen_port: Port to listen on.
            target_host: Address to connect to.
            target_port: Port to connect to.
        """
        self.listen = (listen_host, listen_port)
        self.target = (target_host, target_port)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> None:
        """Start listening in a background thread.

        Raises:
            OSError: If the address cannot be bound.
        """
        self._thread = threading.Thread(target=self._run, name="apiserver-relay", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10)
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Stop listening and close every open connection."""
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, *self.listen, reuse_address=True)
            )
        except OSError as err:
            self._error = err
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        _log.info("relaying %s:%d to %s:%d", *self.listen, *self.target)
        try:
            loop.run_forever()
        finally:
            self._server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError as err:
            _log.warning("relay cannot reach %s:%d: %s", *self.target, err)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (OSError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()
