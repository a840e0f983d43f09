"""Talk to the daemon in a sandbox (envd or sandboxd) the way E2B's orchestrator does.

After a sandbox becomes Ready (created or resumed) the gateway calls ``POST /init`` on port
49983 with the access token the clients will present, the caller's ``envVars`` and, when the
gateway knows its own URL, the ``heartbeatUrl`` sandboxd reports running processes to. The
daemon has no auth until a token is set; a re-init also carries the token as
``X-Access-Token``, as envd requires once a token is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import httpx

logger = logging.getLogger(__name__)

ENVD_PORT: Final = 49983
ENVD_VERSION: Final = "0.6.3"
"""The envd version the gateway advertises: the newest whose SDK-gated features sandboxd has
(file metadata on write 0.6.2, watch events with entries 0.6.3). Not 0.6.4: that envd refuses
watches on network mounts unless asked, which sandboxd does not do. Same as sandboxd's
``init_state.ENVD_VERSION`` (a unit test compares them)."""


RETRIED_STATUSES: Final = frozenset({404, 408, 425, 429, 500, 502, 503, 504})
"""Answers of a daemon still starting (or overloaded); any other error is final."""


class InitError(Exception):
    """``/init`` did not succeed within its budget."""


def init_body(
    *,
    access_token: str,
    env_vars: Mapping[str, str] | None,
    heartbeat_url: str | None = None,
    sandbox_id: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The JSON body of ``POST /init``."""
    body: dict[str, Any] = {
        "accessToken": access_token,
        "envVars": dict(env_vars or {}),
        "timestamp": (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z"),
    }
    if heartbeat_url:
        body["heartbeatUrl"] = heartbeat_url
    if sandbox_id:
        body["sandboxId"] = sandbox_id
    return body


async def init_daemon(
    address: tuple[str, int],
    *,
    access_token: str,
    env_vars: Mapping[str, str] | None,
    heartbeat_url: str | None = None,
    sandbox_id: str | None = None,
    budget: float = 5.0,
    retry_interval: float = 0.25,
    transport: httpx.AsyncBaseTransport | None = None,
    client: httpx.AsyncClient | None = None,
) -> None:
    """``POST /init`` to the daemon at ``address``, retrying until ``timeout`` runs out.

    Args:
        address: ``(host, port)`` of the daemon.
        access_token: the sandbox's envd access token.
        env_vars: environment of the processes the daemon starts.
        heartbeat_url: where sandboxd reports running processes (optional).
        sandbox_id: sent as ``E2b-Sandbox-Id`` (sandboxd echoes it in heartbeats).
        budget: total time for every attempt, in seconds.
        retry_interval: pause between attempts.
        transport: httpx transport (tests; ignored with ``client``).
        client: a shared HTTP client (a fresh one per call when None).

    Raises:
        InitError: if no attempt got a 2xx answer in time (the last failure is chained).
    """
    host, port = address
    url = f"http://{_host(host)}:{port}/init"
    headers = {"X-Access-Token": access_token}
    if sandbox_id:
        headers["E2b-Sandbox-Id"] = sandbox_id
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    last: Exception | None = None
    async with contextlib.AsyncExitStack() as stack:
        if client is None:
            client = await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, timeout=budget)
            )
        while True:
            body = init_body(
                access_token=access_token,
                env_vars=env_vars,
                heartbeat_url=heartbeat_url,
                sandbox_id=sandbox_id,
            )
            try:
                remaining = max(0.1, deadline - loop.time())
                response = await client.post(url, json=body, headers=headers, timeout=remaining)
                if response.is_success:
                    return
                last = InitError(f"/init answered {response.status_code}")
                if response.status_code not in RETRIED_STATUSES:
                    raise last
            except httpx.HTTPError as exc:
                last = exc
            if loop.time() + retry_interval >= deadline:
                raise InitError(f"/init of {host}:{port} failed: {last}") from last
            await asyncio.sleep(retry_interval)


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def daemon_metrics(
    address: tuple[str, int],
    *,
    access_token: str,
    client: httpx.AsyncClient,
    budget: float = 2.0,
) -> dict[str, Any] | None:
    """The daemon's ``GET /metrics`` (envd's field names), or None when it cannot answer."""
    host, port = address
    try:
        response = await client.get(
            f"http://{_host(host)}:{port}/metrics",
            headers={"X-Access-Token": access_token},
            timeout=budget,
        )
    except httpx.HTTPError:
        return None
    if not response.is_success:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
