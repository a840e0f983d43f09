"""A selected sandbox's recent Events and last log lines, read from the API server on demand.

Only when a user opens one sandbox, never for the list: Events of its claim, Sandbox and Pod
(one LIST per object, narrowed by a field selector) and the tail of its Pod's log
(``pods/log``). Either can fail on its own (no Pod yet, a node that serves no logs): the
answer then carries the reason instead, and the page shows it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any, Final

import aiohttp

from kube_agent_sandbox.api.rest import PODS, Resource, resource_path
from kube_agent_sandbox.controller.runtime import ApiClient, ApiError, ClusterConfig, Obj
from kube_agent_sandbox.gateway.state import GatewayState

CORE_EVENTS: Final = Resource("", "v1", "events", "Event")
"""Events as ``core/v1`` serves them: its field selectors name the involved object."""
MAX_EVENTS: Final = 20
LOG_LINES: Final = 50
LOG_BYTES: Final = 64 * 1024
LOG_TIMEOUT: Final = 10.0


def _event_time(event: Obj) -> str:
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def event_row(event: Obj) -> dict[str, Any]:
    """One Event as the page lists it."""
    involved = event.get("involvedObject") or {}
    series = event.get("series") or {}
    return {
        "time": _event_time(event),
        "type": str(event.get("type") or ""),
        "reason": str(event.get("reason") or ""),
        "object": f"{involved.get('kind', '')}/{involved.get('name', '')}",
        "message": str(event.get("message") or ""),
        "count": int(series.get("count") or event.get("count") or 1),
    }


async def recent_events(
    state: GatewayState, namespace: str, objects: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The newest :data:`MAX_EVENTS` Events about ``(kind, name)`` objects, newest first."""

    api = state.api

    async def of(kind: str, name: str) -> list[Obj]:
        if isinstance(api, ApiClient):
            selector = f"involvedObject.kind={kind},involvedObject.name={name}"
            page = await api.list(CORE_EVENTS, namespace, field_selector=selector)
            return list(page.get("items") or [])
        # a client without field selectors (the unit tests' fake API): filter here
        page = await api.list(CORE_EVENTS, namespace)
        return [
            e
            for e in page.get("items") or []
            if (e.get("involvedObject") or {}).get("kind") == kind
            and (e.get("involvedObject") or {}).get("name") == name
        ]

    pages = await asyncio.gather(*(of(kind, name) for kind, name in objects))
    rows = [event_row(e) for page in pages for e in page]
    rows.sort(key=lambda r: r["time"], reverse=True)
    return rows[:MAX_EVENTS]


async def pod_log_tail(config: ClusterConfig, namespace: str, pod: str) -> str:
    """The last :data:`LOG_LINES` lines of the Pod's log (its first container).

    Raises:
        ApiError: the API server refused (no such pod, container not started, no logs).
        aiohttp.ClientError, TimeoutError: the API server could not be reached in time.
    """
    params = {"tailLines": str(LOG_LINES), "limitBytes": str(LOG_BYTES)}
    ssl_setting: ssl.SSLContext | bool = config.ssl_context or True
    timeout = aiohttp.ClientTimeout(total=LOG_TIMEOUT)
    async with (
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl_setting), timeout=timeout
        ) as session,
        session.get(
            config.host + resource_path(PODS, namespace, pod, "log"),
            params=params,
            headers=await config.request_headers(),
            server_hostname=config.tls_server_name,
        ) as resp,
    ):
        body = await resp.read()
        if resp.status >= 400:
            raise ApiError(resp.status, resp.reason or "Error", _status_message(body))
        return body.decode("utf-8", "replace")


def _status_message(body: bytes) -> str:
    """The message of a ``Status`` answer (or the raw text), short."""
    text = body.decode("utf-8", "replace")
    try:
        decoded = json.loads(text)
    except ValueError:
        return text[:300]
    return str(decoded.get("message") or text)[:300] if isinstance(decoded, dict) else text[:300]


async def log_tail(state: GatewayState, namespace: str, pod: str | None) -> dict[str, Any]:
    """``{"lines": [...]}``, or ``{"lines": [], "unavailable": reason}``."""
    if pod is None:
        return {"lines": [], "unavailable": "No pod: the sandbox is not running."}
    config = state.cluster_config
    if config is None:
        return {"lines": [], "unavailable": "The gateway has no cluster connection for logs."}
    try:
        text = await pod_log_tail(config, namespace, pod)
    except ApiError as exc:
        return {"lines": [], "unavailable": f"Logs unavailable ({exc.status}): {exc.message}"}
    except (aiohttp.ClientError, TimeoutError) as exc:
        return {"lines": [], "unavailable": f"Logs unavailable: {exc!r}"}
    return {"lines": text.splitlines()[-LOG_LINES:]}
