"""Activity heartbeats: while a process the daemon started runs, tell the gateway.

Work that runs without inbound traffic (a long build, an agent step) would otherwise look idle
to the gateway's idle shutdown. While at least one process is running the daemon POSTs to the
``heartbeatUrl`` given by ``/init`` every interval, with ``X-Access-Token`` (the envd token) and
``E2b-Sandbox-Id``. Failures are logged and retried on the next tick; they never affect
processes. Uses only the standard library (the daemon has no HTTP client dependency).
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable

from kube_agent_sandbox.sandboxd.init_state import DaemonState

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS = 30.0
REQUEST_TIMEOUT_SECONDS = 10.0


def send_heartbeat(url: str, *, token: str | None, sandbox_id: str | None, running: int) -> int:
    """POST one heartbeat; returns the HTTP status.

    Raises:
        OSError: the request failed (connection, timeout, HTTP error status).
    """
    body = json.dumps({"runningProcesses": running}).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["X-Access-Token"] = token
    if sandbox_id:
        headers["E2b-Sandbox-Id"] = sandbox_id
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:
        return int(response.status)


class Heartbeat:
    """Periodic reporter; start it with the app, stop it at shutdown."""

    def __init__(
        self,
        state: DaemonState,
        running: Callable[[], int],
        *,
        interval: float = DEFAULT_INTERVAL_SECONDS,
    ) -> None:
        """Create the reporter.

        Args:
            state: Where ``heartbeat_url``, the token and the sandbox id come from.
            running: How many processes currently run.
            interval: Seconds between heartbeats while processes run.
        """
        self.state = state
        self.running = running
        self.interval = interval
        self.sent = 0
        self.failed = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def poke(self) -> None:
        """Report soon (a process started): the first heartbeat does not wait a full interval."""
        self._wake.set()

    def start(self) -> None:
        """Start the background loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="sandboxd-heartbeat")

    async def stop(self) -> None:
        """Stop the background loop."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def beat_once(self) -> bool:
        """Send one heartbeat if there is work and a URL; True when one was sent successfully."""
        url = self.state.heartbeat_url
        running = self.running()
        if not url or running <= 0:
            return False
        try:
            status = await asyncio.to_thread(
                send_heartbeat,
                url,
                token=self.state.access_token,
                sandbox_id=self.state.sandbox_id,
                running=running,
            )
        except (OSError, ValueError) as exc:
            self.failed += 1
            logger.warning("heartbeat to %s failed: %s", url, exc)
            return False
        self.sent += 1
        logger.debug("heartbeat to %s: %d", url, status)
        return True

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.running() > 0:
                await self.beat_once()
                await asyncio.sleep(self.interval)
