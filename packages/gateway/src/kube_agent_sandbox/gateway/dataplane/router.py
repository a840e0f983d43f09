"""The data-plane ASGI app: find the sandbox, check its token, resume it if needed, forward.

Order of checks (each answers on its own, nothing is forwarded before all pass):

1. the target (``E2b-Sandbox-Id``/``E2b-Sandbox-Port`` headers, else a ``<port>-<id>.<domain>``
   host) must be well formed, else 400;
2. the id must be known to the index, else 502 "The sandbox was not found" (the same answer for
   an id of another tenant: the data plane never consults API keys);
3. the sandbox's own token must match (:mod:`.auth`), else 401;
4. activity is recorded; a sandbox suspended by the idle or timeout policy with
   ``auto-resume: "true"`` is resumed while the request waits at the header phase (body unread)
   up to the hold budget, then 503 + ``Retry-After`` + ``Should-Retry: true``; any other
   suspended or not-ready sandbox is "not found";
5. the request is streamed to the pod (:mod:`.proxy`); a refused port answers 502 "port is not
   open", except envd's port on a pod without ``sandboxd``, which is served over ``pods/exec``
   (:mod:`.execfallback`) when the Sandbox says so (annotation ``kube-agent-sandbox.io/envd:
   exec``) or its pod just refused envd's port.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Any

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.gateway.dataplane import auth, responses
from kube_agent_sandbox.gateway.dataplane.proxy import (
    Outcome,
    Proxy,
    Receive,
    Scope,
    Send,
    UpstreamLost,
    is_streaming_request,
)
from kube_agent_sandbox.gateway.dataplane.target import TargetError, resolve
from kube_agent_sandbox.gateway.dataplane.wsproxy import WebSocketProxy

logger = logging.getLogger(__name__)

ENVD_PORT = auth.ENVD_PORT
ANNOTATION_ENVD = f"{constants.PROJECT_PREFIX}/envd"
"""``exec`` on the Sandbox, claim or pod: the image has no envd-compatible daemon."""
ENVD_EXEC = "exec"
RESUME_HOLD_SECONDS = 60.0
REFUSAL_MEMORY_SECONDS = 60.0
_RESUMABLE_BY = frozenset({constants.SUSPENDED_BY_IDLE, constants.SUSPENDED_BY_TIMEOUT})


def _annotations(obj: dict[str, Any] | None) -> dict[str, str]:
    if not obj:
        return {}
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations if isinstance(annotations, dict) else {}


def _uid(obj: dict[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid") or "")


def auto_resumable(record: Any) -> bool:
    """Whether traffic may resume the record's sandbox.

    True when the Sandbox allows it (``auto-resume: "true"``) and it is either suspended by
    the idle/timeout policy, or already back in ``Running`` mode but not yet Ready (a resume in
    flight: the request joins it instead of failing).
    """
    sandbox = record.sandbox
    annotations = _annotations(sandbox)
    if annotations.get(constants.ANNOTATION_AUTO_RESUME) != "true":
        return False
    mode = ((sandbox or {}).get("spec") or {}).get("operatingMode")
    if record.suspended and mode == constants.OPERATING_MODE_SUSPENDED:
        return annotations.get(constants.ANNOTATION_SUSPENDED_BY) in _RESUMABLE_BY
    return not record.ready and mode != constants.OPERATING_MODE_SUSPENDED


_GONE = object()


def _takes_on_traffic(resumer: Any) -> bool:
    """Whether the resumer enforces the auto-resume policy itself (``on_traffic=True``)."""
    try:
        parameters = inspect.signature(resumer.resume).parameters
    except (TypeError, ValueError):
        return False
    return "on_traffic" in parameters


def wants_exec(record: Any) -> bool:
    """Whether the Sandbox, its claim or its pod declare that the image has no daemon."""
    return any(
        _annotations(obj).get(ANNOTATION_ENVD) == ENVD_EXEC
        for obj in (record.sandbox, record.claim, record.pod)
    )


class DataPlane:
    """ASGI app serving requests addressed to one sandbox.

    Args:
        state: the gateway state; uses ``index``, ``tokens``, ``options.domain`` and, when
            present and not None, ``activity``, ``resumer`` and ``api`` (the Kubernetes client
            the exec fallback runs commands with).
        proxy: the pod client (one is created when omitted; closed by :meth:`aclose`).
        exec_fallback: serves envd over ``pods/exec``; built from ``state.api`` when omitted.
        resume_hold_seconds: how long a request waits for a resume before 503.
    """

    def __init__(
        self,
        state: Any,
        *,
        proxy: Proxy | None = None,
        exec_fallback: Any = None,
        resume_hold_seconds: float = RESUME_HOLD_SECONDS,
    ) -> None:
        self.state = state
        self.proxy = proxy or Proxy()
        self._own_proxy = proxy is None
        self._exec_fallback = exec_fallback
        self.ws_proxy = WebSocketProxy()
        self.resume_hold_seconds = resume_hold_seconds
        self._refused: dict[str, float] = {}

    async def aclose(self) -> None:
        """Close the pod connection pool (if this app created it) and the exec sessions."""
        if self._own_proxy:
            await self.proxy.aclose()
        await self.ws_proxy.aclose()
        if self._exec_fallback is not None and hasattr(self._exec_fallback, "aclose"):
            await self._exec_fallback.aclose()

    @property
    def exec_fallback(self) -> Any:
        """The exec fallback, built on first use from ``state.api`` (None without a client).

        Lazy because the app is built before the state starts and connects.
        """
        if self._exec_fallback is None:
            try:
                api = self.state.api
            except (AttributeError, RuntimeError):
                return None
            if api is None:
                return None
            from kube_agent_sandbox.gateway.dataplane.execfallback import ExecFallback

            self._exec_fallback = ExecFallback(api)
        return self._exec_fallback

    @property
    def _domain(self) -> str | None:
        options = getattr(self.state, "options", None)
        domain = getattr(options, "domain", None)
        return domain if isinstance(domain, str) and domain else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection (HTTP or WebSocket)."""
        if scope["type"] not in ("http", "websocket"):
            return
        response = await self._handle(scope, receive, send)
        if response is None:
            return
        if scope["type"] == "websocket":
            # Refuse the handshake (the ASGI server answers 403); the reason goes to the log.
            logger.info("websocket refused: %s %s", response.status_code, bytes(response.body))
            await send({"type": "websocket.close", "code": 1008})
            return
        await response(scope, receive, send)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> Any:
        headers = scope.get("headers", [])
        try:
            target = resolve(headers, domain=self._domain)
        except TargetError as err:
            return responses.bad_request(str(err))
        raw_path = scope.get("raw_path") or scope.get("path", "").encode()
        if not raw_path.startswith(b"/") or raw_path.startswith(b"//"):
            return responses.bad_request("invalid request path")
        record = self.state.index.lookup(target.sandbox_id)
        if record is None:
            return responses.not_found(target.sandbox_id)
        uid = _uid(record.claim)
        tokens = self.state.tokens
        if not uid or not auth.authorized(
            port=target.port,
            method=scope.get("method", "GET"),
            path=scope.get("path", ""),
            query_string=scope.get("query_string", b""),
            headers=headers,
            envd_token=tokens.envd_access_token(uid),
            traffic_token=tokens.traffic_access_token(uid),
        ):
            return responses.unauthorized()
        activity = getattr(self.state, "activity", None)
        if activity is not None:
            activity.request_started(record)
        if record.suspended or not record.ready:
            resumer = getattr(self.state, "resumer", None)
            if resumer is None or not auto_resumable(record):
                return responses.not_found(target.sandbox_id)
            resumed = await self._resume(resumer, record, target.sandbox_id)
            if resumed is _GONE:
                return responses.not_found(target.sandbox_id)
            if resumed is None:
                retry = max(1, int(self.resume_hold_seconds // 6))
                return responses.resuming(retry)
            record = resumed
        address = self.state.index.address(record, target.port)
        if address is None:
            return responses.not_found(target.sandbox_id)

        def on_stream(opened: bool) -> None:
            if activity is None:
                return
            if opened:
                activity.stream_opened(record)
            else:
                activity.stream_closed(record)

        if scope["type"] == "websocket":
            await self.ws_proxy.forward(scope, receive, send, address=address, on_stream=on_stream)
            return None
        if target.port == ENVD_PORT and self._use_exec(record):
            await self.exec_fallback.handle(
                scope, receive, send, record=record, on_stream=on_stream
            )
            return None
        streaming = is_streaming_request(scope, port=target.port, envd_port=ENVD_PORT)
        try:
            outcome = await self.proxy.forward(
                scope, receive, send, address=address, streaming=streaming, on_stream=on_stream
            )
        except UpstreamLost as err:
            # The response already started: returning without completing it makes the server
            # close the connection, so the client sees a truncated transfer, not a short one.
            logger.info("sandbox %s: %s", target.sandbox_id, err)
            return None
        if outcome is Outcome.REFUSED:
            if target.port == ENVD_PORT and self.exec_fallback is not None:
                pod_uid = _uid(record.pod)
                if pod_uid:
                    logger.info(
                        "sandbox %s: envd port refused, serving it over pods/exec",
                        target.sandbox_id,
                    )
                    self._refused[pod_uid] = time.monotonic() + REFUSAL_MEMORY_SECONDS
                    await self.exec_fallback.handle(
                        scope, receive, send, record=record, on_stream=on_stream
                    )
                    return None
            return responses.port_not_open(target.sandbox_id, target.port)
        if outcome is Outcome.UNREACHABLE:
            return responses.unreachable(target.sandbox_id)
        return None

    def _use_exec(self, record: Any) -> bool:
        if self.exec_fallback is None:
            return False
        if wants_exec(record):
            return True
        pod_uid = _uid(record.pod)
        until = self._refused.get(pod_uid)
        if until is None:
            return False
        if until < time.monotonic():
            del self._refused[pod_uid]
            return False
        return True

    async def _resume(self, resumer: Any, record: Any, sandbox_id: str) -> Any:
        """The resumed, Ready record; None after the hold budget; ``_GONE`` if not resumable.

        ``_GONE`` means the sandbox vanished or its policy forbids resuming on traffic. Only
        the wait is bounded here; the resume itself (shared by concurrent requests in the idle
        helper's Resumer) goes on, so a retry finds it further along.
        """
        try:
            async with asyncio.timeout(self.resume_hold_seconds):
                if _takes_on_traffic(resumer):
                    fresh = await resumer.resume(record, on_traffic=True)
                else:
                    fresh = await resumer.resume(record)
        except LookupError as err:  # NotResumable is a LookupError too
            logger.info("sandbox %s: not resumed: %s", sandbox_id, err)
            return _GONE
        except TimeoutError:
            logger.info(
                "sandbox %s: still resuming after %.0fs", sandbox_id, self.resume_hold_seconds
            )
            return None
        except Exception:
            logger.exception("sandbox %s: resume failed", sandbox_id)
            return None
        if fresh is None:
            fresh = self.state.index.lookup(sandbox_id)
        if fresh is None or fresh.suspended or not fresh.ready:
            return None
        return fresh
