"""Transport to the Kubernetes API: JSON requests, watches, log streams and websockets.

Built on httpx and httpx-ws, whose async and sync surfaces match name for name, so this module
is the single source of both clients. Every failure leaves here as an SDK error
(:mod:`kube_agent_sandbox.sdk.errors`), never as an httpx exception.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx

from kube_agent_sandbox.sdk._async import _backend
from kube_agent_sandbox.sdk.apierrors import api_error
from kube_agent_sandbox.sdk.config import ClusterConfig
from kube_agent_sandbox.sdk.errors import ApiRequestError, SandboxError

if TYPE_CHECKING:
    from httpx_ws import AsyncWebSocketSession

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
Params = Mapping[str, str] | Sequence[tuple[str, str]]
_Query = list[tuple[str, str | int | float | bool | None]]
USER_AGENT = "kube-agent-sandbox-sdk/0.1.0 (python; httpx)"
MAX_WS_MESSAGE = 16 * 1024 * 1024
# The websocket upgrade is not a JSON request. On a real node (Kubernetes 1.36, containerd) the
# upgrade of exec and port-forward reaches the node with the client's headers, and its router
# answers ``Accept: application/json`` with 406 Not Acceptable ("Available representations:"
# empty). Other clients send no Accept at all, which means ``*/*``.
WS_ACCEPT = "*/*"


def _query(params: Params | None) -> httpx.QueryParams:
    items: _Query = []
    if params is not None:
        pairs = params.items() if isinstance(params, Mapping) else params
        items = [(key, value) for key, value in pairs]
    return httpx.QueryParams(items)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def unwrap_group(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception a caller should see from a task group's ``ExceptionGroup``.

    httpx-ws runs its websocket reader in an anyio task group, which wraps whatever the body of
    ``async with`` raised (our own errors included) in an ``ExceptionGroup``. The SDK's own
    error wins; otherwise the first leaf.
    """
    leaves = _leaves(group)
    for leaf in leaves:
        if isinstance(leaf, SandboxError):
            return leaf
    return leaves[0] if leaves else group


async def _read_refusal(response: httpx.Response) -> None:
    """Read the body of a refused websocket upgrade while its stream is still open.

    httpx-ws raises ``WebSocketUpgradeError`` from inside the request's ``stream()`` block, so
    the response is already closed when the SDK sees it; the server's message (a ``Status``
    object, or the kubelet's plain text) would be lost. A response hook runs before that.
    """
    if response.status_code != 101:
        await response.aread()


def _refusal_body(response: httpx.Response) -> bytes:
    """The body :func:`_read_refusal` kept, or nothing if it could not be read."""
    try:
        return response.content
    except httpx.ResponseNotRead:
        return b""


class WatchExpiredError(SandboxError):
    """The watch's resourceVersion is too old (410 Gone): list again and watch from there."""


class AsyncKubeApi:
    """A small Kubernetes REST client on raw JSON.

    Args:
        config: where to connect and the credentials.
        timeout: seconds for connecting and for one ordinary request.
    """

    def __init__(self, config: ClusterConfig, *, timeout: float = 30.0) -> None:
        self.config = config
        self.timeout = timeout
        self._client = httpx.AsyncClient(
            base_url=config.host,
            verify=config.verify,
            timeout=httpx.Timeout(timeout),
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
        )
        self._ws_client: httpx.AsyncClient | None = None

    def _websocket_client(self) -> httpx.AsyncClient:
        """The websocket client, made with the first websocket (most calls never open one).

        Websockets get their own client: it keeps no idle connection (an upgraded one is never
        a candidate for reuse) and its response hook keeps a refused upgrade's body.
        """
        if self._ws_client is None:
            self._ws_client = httpx.AsyncClient(
                base_url=self.config.host,
                verify=self.config.verify,
                timeout=httpx.Timeout(self.timeout),
                headers={"User-Agent": USER_AGENT, "Accept": WS_ACCEPT},
                limits=httpx.Limits(max_keepalive_connections=0),
                event_hooks={"response": [_read_refusal]},
            )
        return self._ws_client

    async def __aenter__(self) -> AsyncKubeApi:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pools."""
        try:
            await self._client.aclose()
        finally:
            if self._ws_client is not None:
                await self._ws_client.aclose()

    async def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        token = await _backend.authorization(self.config)
        if token:
            headers["Authorization"] = token
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        resource: str,
        params: Params | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        """One request; the decoded JSON answer.

        Args:
            method: HTTP method.
            path: REST path.
            verb: RBAC verb (for errors).
            resource: ``plural.group`` (for errors).
            params: query parameters.
            body: a JSON-ready body.
            content_type: of the body (merge patches use ``application/merge-patch+json``).

        Raises:
            ApiRequestError: (or a subclass) on any failure.
        """
        headers = await self._headers({"Content-Type": content_type} if body is not None else None)
        content = None if body is None else json.dumps(body).encode()
        try:
            response = await self._client.request(
                method, path, params=_query(params), content=content, headers=headers
            )
        except httpx.HTTPError as err:
            raise ApiRequestError(f"{verb} {resource}: {err!r}") from err
        if response.status_code >= 300:
            raise api_error(response.status_code, response.content, verb=verb, resource=resource)
        try:
            decoded = response.json()
        except ValueError as err:
            raise ApiRequestError(
                f"{verb} {resource}: answer is not JSON", response.status_code
            ) from err
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    async def watch(
        self,
        path: str,
        *,
        resource: str,
        params: Mapping[str, str],
        timeout: float,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Watch events ``(type, object)`` until the server ends the watch after ``timeout``.

        Raises:
            WatchExpiredError: on 410 Gone (relist).
            ApiRequestError: on other failures.
        """
        query = dict(params)
        query["watch"] = "true"
        query["allowWatchBookmarks"] = "true"
        query["timeoutSeconds"] = str(max(1, math.ceil(timeout)))
        headers = await self._headers()
        stream_timeout = httpx.Timeout(self.timeout, read=timeout + 10)
        try:
            async with self._client.stream(
                "GET", path, params=query, headers=headers, timeout=stream_timeout
            ) as response:
                if response.status_code == 410:
                    raise WatchExpiredError("watch expired")
                if response.status_code >= 300:
                    body = await response.aread()
                    raise api_error(response.status_code, body, verb="watch", resource=resource)
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    try:
                        event = json.loads(line)
                    except ValueError as err:
                        raise ApiRequestError(
                            f"watch {resource}: bad event {line[:200]!r}"
                        ) from err
                    kind = str(event.get("type") or "")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise WatchExpiredError(str(obj.get("message") or "watch expired"))
                        raise api_error(
                            int(obj.get("code") or 500),
                            json.dumps(obj),
                            verb="watch",
                            resource=resource,
                        )
                    yield kind, obj
        except httpx.ReadTimeout:
            return
        except httpx.HTTPError as err:
            raise ApiRequestError(f"watch {resource}: {err!r}") from err

    async def stream_lines(self, path: str, *, resource: str, params: Params) -> AsyncIterator[str]:
        """Lines of a streamed text answer (pod logs with ``follow``).

        Raises:
            ApiRequestError: (or a subclass) on failure.
        """
        headers = await self._headers()
        no_read_timeout = httpx.Timeout(self.timeout, read=None)
        try:
            async with self._client.stream(
                "GET", path, params=_query(params), headers=headers, timeout=no_read_timeout
            ) as response:
                if response.status_code >= 300:
                    body = await response.aread()
                    raise api_error(response.status_code, body, verb="get", resource=resource)
                async for line in response.aiter_lines():
                    yield line
        except httpx.HTTPError as err:
            raise ApiRequestError(f"get {resource}: {err!r}") from err

    @asynccontextmanager
    async def websocket(
        self, path: str, *, resource: str, params: Params, subprotocols: list[str]
    ) -> AsyncIterator[AsyncWebSocketSession]:
        """A websocket to ``path`` (exec, port-forward), closed on exit.

        Raises:
            ApiRequestError: (or a subclass, e.g. permission denied on ``pods/exec``) when the
                upgrade is refused.
        """
        # httpx-ws (and its anyio task groups) loads with the first websocket: a client that
        # never opens one does not pay for it.
        from httpx_ws import HTTPXWSException, WebSocketUpgradeError, aconnect_ws

        headers = await self._headers()
        query = _query(params)
        session: AsyncWebSocketSession
        try:
            async with aconnect_ws(
                f"{path}?{query}",
                self._websocket_client(),
                subprotocols=subprotocols,
                headers=headers,
                max_message_size_bytes=MAX_WS_MESSAGE,
                keepalive_ping_interval_seconds=None,
            ) as session:
                try:
                    yield session
                finally:
                    _backend.release_websocket_reader(session)
        except WebSocketUpgradeError as err:
            response = err.response
            body = _refusal_body(response)
            raise api_error(response.status_code, body, verb="create", resource=resource) from err
        except (httpx.HTTPError, HTTPXWSException) as err:
            raise ApiRequestError(f"{resource}: {err!r}") from err
        except BaseExceptionGroup as group:
            leaf = unwrap_group(group)
            if isinstance(leaf, httpx.HTTPError | HTTPXWSException):
                raise ApiRequestError(f"{resource}: {leaf!r}") from leaf
            raise leaf from None
