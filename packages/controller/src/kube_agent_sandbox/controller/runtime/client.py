"""An asyncio Kubernetes API client on raw JSON (aiohttp + orjson).

It stays one module: :class:`ApiClient` is one class whose verbs share its private sessions,
throttle and metrics labels, and every verb goes through the same request path.

The generated ``kubernetes`` models cost an order of magnitude more CPU than decoding JSON, and
its watch helper mishandles ERROR events; reconcilers and informers only need dicts. This client
builds REST paths from a :class:`Resource`, throttles itself with a token bucket
(``--kube-api-qps``/``--kube-api-burst``), turns error statuses into :class:`ApiError` and records
client-go's ``rest_client_*`` metrics. Watch streams are read line by line without a size limit.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from kube_agent_sandbox.api.rest import resource_path
from kube_agent_sandbox.controller.runtime.config import ClusterConfig
from kube_agent_sandbox.controller.runtime.metrics import RuntimeMetrics, default_metrics
from kube_agent_sandbox.controller.runtime.ratelimit import TokenBucket
from kube_agent_sandbox.controller.runtime.types import (
    ApiError,
    Obj,
    PatchType,
    Resource,
    WatchEvent,
)

logger = logging.getLogger(__name__)

USER_AGENT = "agent-sandbox-controller/0.1.0 (python; aiohttp)"

PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}

_WATCH_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})
_MAX_429_RETRIES = 5


def error_from_status(
    status: int, body: bytes | Obj | None, *, default_reason: str = ""
) -> ApiError:
    """Build an :class:`ApiError` from an HTTP status and a (possibly Status) body."""
    decoded: Obj | None = None
    if isinstance(body, dict):
        decoded = body
    elif body:
        try:
            parsed = orjson.loads(body)
            decoded = parsed if isinstance(parsed, dict) else None
        except orjson.JSONDecodeError:
            decoded = None
    if decoded is not None and decoded.get("kind") == "Status":
        code = int(decoded.get("code") or status)
        return ApiError(
            code,
            str(decoded.get("reason") or default_reason),
            str(decoded.get("message") or ""),
            decoded,
        )
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else ""
    return ApiError(status, default_reason or "Unknown", text[:1024], decoded)


class ApiClient:
    """Async client implementing :class:`~kube_agent_sandbox.controller.runtime.types.Client`.

    Create it inside a running event loop (or call its methods only there); close it with
    :meth:`close` or ``async with``.

    Args:
        config: where and how to connect.
        qps: client-side requests per second; ``<= 0`` disables throttling.
        burst: token bucket size; must be positive.
        metrics: metric set; the process default when omitted.
        max_connections: connection limit of each pool.
        pools: independent connection pools (``--api-connections``); requests take them in
            turn (round-robin), so one slow or broken connection holds back only its share.
        separate_watch_pool: watches get a dedicated, unbounded pool of their own
            (``--separate-watch-connection``); otherwise they take their turn in the
            round-robin like any request and hold a connection of that pool while open.
        request_timeout: total timeout of one non-watch request in seconds.

    Raises:
        ValueError: if ``burst`` or ``pools`` is not positive.
    """

    def __init__(
        self,
        config: ClusterConfig,
        *,
        qps: float = -1.0,
        burst: int = 10,
        metrics: RuntimeMetrics | None = None,
        max_connections: int = 100,
        pools: int = 1,
        separate_watch_pool: bool = True,
        request_timeout: float = 60.0,
    ) -> None:
        if burst <= 0:
            raise ValueError(f"burst must be positive, got {burst}")
        if pools <= 0:
            raise ValueError(f"pools must be positive, got {pools}")
        self.config = config
        self.bucket = TokenBucket(qps, burst)
        self.metrics = metrics or default_metrics()
        self._host_label = urlsplit(config.host).netloc
        self._max_connections = max_connections
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=30)
        self._sessions: list[aiohttp.ClientSession | None] = [None] * pools
        self._turn = itertools.count()
        self._separate_watch_pool = separate_watch_pool
        self._watch_session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP sessions (open watches end)."""
        for session in (*self._sessions, self._watch_session):
            if session is not None and not session.closed:
                await session.close()
        self._sessions = [None] * len(self._sessions)
        self._watch_session = None

    @property
    def pool_count(self) -> int:
        """Number of round-robin connection pools (``--api-connections``)."""
        return len(self._sessions)

    def _new_session(self, limit: int) -> aiohttp.ClientSession:
        ssl_setting: ssl.SSLContext | bool = self.config.ssl_context or True
        connector = aiohttp.TCPConnector(limit=limit, ssl=ssl_setting)
        return aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            json_serialize=lambda o: orjson.dumps(o).decode(),
        )

    def _sess(self) -> aiohttp.ClientSession:
        """The next pool in the round-robin (created on first use)."""
        index = next(self._turn) % len(self._sessions)
        session = self._sessions[index]
        if session is None or session.closed:
            session = self._sessions[index] = self._new_session(self._max_connections)
        return session

    def _wsess(self) -> aiohttp.ClientSession:
        """The dedicated watch pool, or the next round-robin pool without one."""
        if not self._separate_watch_pool:
            return self._sess()
        if self._watch_session is None or self._watch_session.closed:
            self._watch_session = self._new_session(0)
        return self._watch_session

    async def _throttle(self, verb: str) -> None:
        if self.bucket.unlimited:
            return
        waited = await self.bucket.wait()
        self.metrics.rest_client_rate_limiter_duration_seconds.labels(
            verb=verb, host=self._host_label
        ).observe(waited)

    def _record(self, method: str, code: int | str, started: float) -> None:
        m = self.metrics
        m.rest_client_requests_total.labels(
            code=str(code), method=method, host=self._host_label
        ).inc()
        m.rest_client_request_duration_seconds.labels(verb=method, host=self._host_label).observe(
            time.monotonic() - started
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj | None:
        """Send one request and decode the JSON answer.

        Args:
            method: HTTP method.
            path: absolute REST path (see :func:`resource_path`).
            params: query parameters.
            body: JSON-serializable body (None for no body).
            content_type: body content type (patch types differ).

        Returns:
            The decoded JSON body, or None for an empty body.

        Raises:
            ApiError: for every status >= 400 (after retrying 429s that carry Retry-After).
        """
        data = orjson.dumps(body) if body is not None else None
        url = self.config.host + path
        reauthenticated = False
        for attempt in range(_MAX_429_RETRIES + 1):
            await self._throttle(method)
            headers = await self.config.request_headers()
            if data is not None:
                headers["Content-Type"] = content_type
            started = time.monotonic()
            try:
                async with self._sess().request(
                    method,
                    url,
                    params=params,
                    data=data,
                    headers=headers,
                    timeout=self._timeout,
                    server_hostname=self.config.tls_server_name,
                ) as resp:
                    payload = await resp.read()
                    status = resp.status
                    retry_after = resp.headers.get("Retry-After")
                    reason = resp.reason or ""
            except (aiohttp.ClientError, TimeoutError):
                self._record(method, "<error>", started)
                raise
            self._record(method, status, started)
            if status == 401 and not reauthenticated and self.config.unauthorized():
                reauthenticated = True  # refreshed credentials get one more try
                continue
            if status == 429 and retry_after and attempt < _MAX_429_RETRIES:
                try:
                    delay = min(float(retry_after), 10.0)
                except ValueError:
                    delay = 1.0
                logger.debug("429 from %s %s, retrying in %.1fs", method, path, delay)
                await asyncio.sleep(delay)
                continue
            if status >= 400:
                raise error_from_status(status, payload, default_reason=reason)
            if not payload:
                return None
            decoded = orjson.loads(payload)
            return decoded if isinstance(decoded, dict) else {"items": decoded}
        raise AssertionError("unreachable")  # pragma: no cover

    async def _object(self, method: str, path: str, **kwargs: Any) -> Obj:
        result = await self.request(method, path, **kwargs)
        if result is None:
            raise ApiError(500, "EmptyResponse", f"{method} {path} returned no body")
        return result

    # -- Client protocol --------------------------------------------------------------------
    async def get(
        self, resource: Resource, namespace: str, name: str, *, subresource: str | None = None
    ) -> Obj:
        """GET one object (optionally a subresource such as ``status`` or ``scale``)."""
        return await self._object("GET", resource_path(resource, namespace, name, subresource))

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> Obj:
        """LIST one page of a collection (all namespaces when ``namespace`` is None)."""
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        return await self._object("GET", resource_path(resource, namespace), params=params)

    async def create(
        self, resource: Resource, namespace: str, body: Obj, *, field_manager: str | None = None
    ) -> Obj:
        """POST a new object into ``namespace`` (ignored for cluster-scoped resources)."""
        params = {"fieldManager": field_manager} if field_manager else None
        return await self._object(
            "POST", resource_path(resource, namespace), params=params, body=body
        )

    async def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Obj,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        """PUT the whole object (or a subresource); conflicts raise 409 ApiError."""
        params = {"fieldManager": field_manager} if field_manager else None
        return await self._object(
            "PUT", resource_path(resource, namespace, name, subresource), params=params, body=body
        )

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Obj | Sequence[Obj],
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> Obj:
        """PATCH an object: merge, JSON (a list of operations), strategic merge, or apply.

        Raises:
            ValueError: for an unknown patch type, a JSON patch that is not a list, or an apply
                patch without ``field_manager``.
        """
        content_type = PATCH_CONTENT_TYPES.get(patch_type)
        if content_type is None:
            raise ValueError(f"unknown patch type {patch_type!r}")
        if patch_type == "json" and not isinstance(patch, Sequence):
            raise ValueError("a JSON patch is a list of operations")
        if patch_type != "json" and not isinstance(patch, Mapping):
            raise ValueError(f"a {patch_type} patch is an object")
        params: dict[str, str] = {}
        if field_manager:
            params["fieldManager"] = field_manager
        if patch_type == "apply":
            if not field_manager:
                raise ValueError("server-side apply needs a field_manager")
            if force:
                params["force"] = "true"
        elif force:
            raise ValueError("force is only valid for apply patches")
        body: Any = list(patch) if patch_type == "json" else patch
        return await self._object(
            "PATCH",
            resource_path(resource, namespace, name, subresource),
            params=params or None,
            body=body,
            content_type=content_type,
        )

    async def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj | None:
        """DELETE an object; returns it (e.g. with deletionTimestamp) or None for a Status.

        Raises:
            ValueError: for a propagation policy other than Foreground/Background/Orphan or a
                precondition other than ``uid``/``resourceVersion``.
        """
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy is not None:
            if propagation_policy not in ("Foreground", "Background", "Orphan"):
                raise ValueError(f"invalid propagation policy {propagation_policy!r}")
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            unknown = set(preconditions) - {"uid", "resourceVersion"}
            if unknown:
                raise ValueError(f"unknown preconditions {sorted(unknown)}")
            options["preconditions"] = dict(preconditions)
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        result = await self.request(
            "DELETE", resource_path(resource, namespace, name), body=options
        )
        if result is None or result.get("kind") == "Status":
            return None
        return result

    # -- watch ------------------------------------------------------------------------------
    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Stream watch events until the server closes the stream.

        Raises:
            ApiError: for an error status or an ERROR event (410 Gone: too old resourceVersion).
        """
        params: dict[str, str] = {"watch": "true"}
        if label_selector:
            params["labelSelector"] = label_selector
        if resource_version:
            params["resourceVersion"] = resource_version
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if timeout_seconds:
            params["timeoutSeconds"] = str(timeout_seconds)
        await self._throttle("WATCH")
        read_timeout = (timeout_seconds or 1800) + 60
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=read_timeout)
        url = self.config.host + resource_path(resource, namespace)
        started = time.monotonic()
        async with self._wsess().get(
            url,
            params=params,
            headers=await self.config.request_headers(),
            timeout=timeout,
            server_hostname=self.config.tls_server_name,
        ) as resp:
            self._record("WATCH", resp.status, started)
            if resp.status == 401:
                self.config.unauthorized()  # the informer's retry uses fresh credentials
            if resp.status >= 400:
                raise error_from_status(
                    resp.status, await resp.read(), default_reason=resp.reason or ""
                )
            rest = b""
            async for chunk in resp.content.iter_any():
                if rest:
                    chunk = rest + chunk
                lines = chunk.split(b"\n")
                rest = lines.pop()
                for line in lines:
                    if line.strip():
                        yield parse_watch_line(line)
            if rest.strip():
                yield parse_watch_line(rest)


def parse_watch_line(line: bytes) -> WatchEvent:
    """Decode one line of a watch stream.

    Raises:
        ApiError: for an ERROR event (its Status) or a malformed line.
    """
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ApiError(500, "InvalidWatchEvent", f"undecodable watch line: {exc}") from exc
    if not isinstance(event, dict):
        raise ApiError(500, "InvalidWatchEvent", "watch event is not an object")
    etype = event.get("type")
    obj = event.get("object")
    if etype == "ERROR":
        status = obj if isinstance(obj, dict) else {}
        raise error_from_status(int(status.get("code") or 500), status, default_reason="Unknown")
    if etype not in _WATCH_TYPES or not isinstance(obj, dict):
        raise ApiError(500, "InvalidWatchEvent", f"unexpected watch event type {etype!r}")
    return WatchEvent(etype, obj)
