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

Each step is a method of :class:`DataPlane` named after it. A step that refuses the request
raises a :class:`Refused` subclass saying why; :meth:`DataPlane.__call__` turns it into the
HTTP answer with :func:`refusal_response`, the one table from refusal to status and wording.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Generic

from starlette.responses import Response

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.gateway.annotations import ANNOTATION_PUBLIC_TRAFFIC
from kube_agent_sandbox.gateway.dataplane import auth, responses
from kube_agent_sandbox.gateway.dataplane.execfallback import ExecFallback
from kube_agent_sandbox.gateway.dataplane.interfaces import (
    ActivitySignals,
    DataPlaneState,
    Record,
    RecordT,
    TrafficResume,
)
from kube_agent_sandbox.gateway.dataplane.proxy import (
    Outcome,
    Proxy,
    Receive,
    Scope,
    Send,
    UpstreamLost,
    is_streaming_request,
)
from kube_agent_sandbox.gateway.dataplane.target import Target, TargetError, resolve
from kube_agent_sandbox.gateway.dataplane.wsproxy import WebSocketProxy
from kube_agent_sandbox.gateway.envvars import EnvNotRestored

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


def auto_resumable(record: Record) -> bool:
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


def wants_exec(record: Record) -> bool:
    """Whether the Sandbox, its claim or its pod declare that the image has no daemon."""
    return any(
        _annotations(obj).get(ANNOTATION_ENVD) == ENVD_EXEC
        for obj in (record.sandbox, record.claim, record.pod)
    )


# -- why a request is answered by the gateway instead of the sandbox ---------------------------
class Refused(Exception):
    """The data plane answers the request itself; :func:`refusal_response` says how."""


class MalformedRequest(Refused):
    """No well-formed target, or a path that is not origin-form."""


class SandboxUnavailable(Refused):
    """Unknown, another tenant's, not running, or not resumable: "not found" to the SDK."""

    def __init__(self, sandbox_id: str) -> None:
        super().__init__(sandbox_id)
        self.sandbox_id = sandbox_id


class NotAuthorized(Refused):
    """The sandbox's own access token is missing or wrong."""


class StillResuming(Refused):
    """A resume on traffic did not finish within the hold budget: retry."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"retry after {retry_after}s")
        self.retry_after = retry_after


class PortNotOpen(Refused):
    """The sandbox runs but its pod refused the port."""

    def __init__(self, sandbox_id: str, port: int) -> None:
        super().__init__(f"{sandbox_id}:{port}")
        self.sandbox_id = sandbox_id
        self.port = port


class ResumeFailed(Refused):
    """The resume cannot succeed by retrying (the sandbox's environment is unreadable)."""


class PodUnreachable(Refused):
    """The pod could not be reached for another reason than a refusal."""

    def __init__(self, sandbox_id: str) -> None:
        super().__init__(sandbox_id)
        self.sandbox_id = sandbox_id


def refusal_response(refusal: Refused) -> Response:
    """The HTTP answer of each refusal, worded as E2B's proxy words it (:mod:`.responses`)."""
    match refusal:
        case MalformedRequest():
            return responses.bad_request(str(refusal))
        case SandboxUnavailable(sandbox_id=sandbox_id):
            return responses.not_found(sandbox_id)
        case NotAuthorized():
            return responses.unauthorized()
        case StillResuming(retry_after=retry_after):
            return responses.resuming(retry_after)
        case PortNotOpen(sandbox_id=sandbox_id, port=port):
            return responses.port_not_open(sandbox_id, port)
        case PodUnreachable(sandbox_id=sandbox_id):
            return responses.unreachable(sandbox_id)
        case ResumeFailed():
            return responses.error(500, str(refusal), should_retry=False)
    raise TypeError(f"no response for {refusal!r}")  # pragma: no cover - every kind is mapped


class DataPlane(Generic[RecordT]):
    """ASGI app serving requests addressed to one sandbox.

    Args:
        state: what the data plane reads at each request: ``index``, ``tokens``,
            ``options.domain``, and ``activity`` and ``resumer`` when not None.
        proxy: the pod client (one is created when omitted; closed by :meth:`aclose`).
        exec_fallback: serves envd over ``pods/exec``.
        exec_fallback_factory: builds the exec fallback on first use when ``exec_fallback``
            is omitted (the app is built before the gateway connects); None from it, or no
            factory, means no fallback.
        resume_hold_seconds: how long a request waits for a resume before 503.
    """

    def __init__(
        self,
        state: DataPlaneState[RecordT],
        *,
        proxy: Proxy | None = None,
        exec_fallback: ExecFallback | None = None,
        exec_fallback_factory: Callable[[], ExecFallback | None] | None = None,
        resume_hold_seconds: float = RESUME_HOLD_SECONDS,
    ) -> None:
        self.state = state
        self.proxy = proxy or Proxy()
        self._own_proxy = proxy is None
        self._exec_fallback = exec_fallback
        self._exec_fallback_factory = exec_fallback_factory
        self.ws_proxy = WebSocketProxy()
        self.resume_hold_seconds = resume_hold_seconds
        self._refused: dict[str, float] = {}

    async def aclose(self) -> None:
        """Close the pod connection pool (if this app created it) and the exec sessions."""
        if self._own_proxy:
            await self.proxy.aclose()
        await self.ws_proxy.aclose()
        if self._exec_fallback is not None:
            await self._exec_fallback.aclose()

    @property
    def exec_fallback(self) -> ExecFallback | None:
        """The exec fallback, built on first use by the factory (None without one)."""
        if self._exec_fallback is None and self._exec_fallback_factory is not None:
            self._exec_fallback = self._exec_fallback_factory()
        return self._exec_fallback

    @property
    def _domain(self) -> str | None:
        return self.state.options.domain or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection (HTTP or WebSocket)."""
        if scope["type"] not in ("http", "websocket"):
            return
        try:
            await self._serve(scope, receive, send)
        except Refused as refusal:
            response = refusal_response(refusal)
            if scope["type"] == "websocket":
                # Refuse the handshake (the ASGI server answers 403); the reason goes to the log.
                logger.info("websocket refused: %s %s", response.status_code, bytes(response.body))
                await send({"type": "websocket.close", "code": 1008})
                return
            await response(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The checks of the module docstring in order, then the forward.

        Raises:
            Refused: the request is answered by the gateway (nothing was sent yet).
        """
        target = self._target(scope)
        record = self._authorized_record(scope, target)
        activity = self.state.activity
        if activity is not None:
            activity.request_started(record)
        record = await self._running(record, target.sandbox_id)
        address = self.state.index.address(record, target.port)
        if address is None:
            raise SandboxUnavailable(target.sandbox_id)
        await self._forward(scope, receive, send, target=target, record=record, address=address)

    # -- 1.-3.: target, record, token -------------------------------------------------------
    def _target(self, scope: Scope) -> Target:
        """The addressed sandbox and port, from the headers or the Host."""
        try:
            target = resolve(scope.get("headers", []), domain=self._domain)
        except TargetError as err:
            raise MalformedRequest(str(err)) from err
        raw_path = scope.get("raw_path") or scope.get("path", "").encode()
        if not raw_path.startswith(b"/") or raw_path.startswith(b"//"):
            raise MalformedRequest("invalid request path")
        return target

    def _authorized_record(self, scope: Scope, target: Target) -> RecordT:
        """The target's record, if the request carries the sandbox's own token."""
        record = self.state.index.lookup(target.sandbox_id)
        if record is None:
            raise SandboxUnavailable(target.sandbox_id)
        uid = _uid(record.claim)
        tokens = self.state.tokens
        if not uid or not auth.authorized(
            port=target.port,
            method=scope.get("method", "GET"),
            path=scope.get("path", ""),
            query_string=scope.get("query_string", b""),
            headers=scope.get("headers", []),
            envd_token=tokens.envd_access_token(uid),
            traffic_token=tokens.traffic_access_token(uid),
            public_traffic=_annotations(record.claim).get(ANNOTATION_PUBLIC_TRAFFIC) != "false",
        ):
            raise NotAuthorized
        return record

    # -- 4.: resume on traffic --------------------------------------------------------------
    async def _running(self, record: RecordT, sandbox_id: str) -> RecordT:
        """The record of a running sandbox: this one, or the one a resume on traffic gave."""
        if not record.suspended and record.ready:
            return record
        resumer = self.state.resumer
        if resumer is None or not auto_resumable(record):
            raise SandboxUnavailable(sandbox_id)
        return await self._resume(resumer, record, sandbox_id)

    async def _resume(
        self, resumer: TrafficResume[RecordT], record: RecordT, sandbox_id: str
    ) -> RecordT:
        """The resumed, Ready record.

        Only the wait is bounded here; the resume itself (shared by concurrent requests in the
        idle helper's Resumer) goes on, so a retry finds it further along.

        Raises:
            SandboxUnavailable: the sandbox vanished or its policy forbids resuming on traffic.
            StillResuming: not Ready within the hold budget, or the resume failed.
            ResumeFailed: the sandbox's environment is unreadable (retrying cannot help).
        """
        retry = StillResuming(max(1, int(self.resume_hold_seconds // 6)))
        try:
            async with asyncio.timeout(self.resume_hold_seconds):
                fresh = await resumer.resume(record, on_traffic=True)
        except LookupError as err:  # NotResumable is a LookupError too
            logger.info("sandbox %s: not resumed: %s", sandbox_id, err)
            raise SandboxUnavailable(sandbox_id) from err
        except TimeoutError:
            logger.info(
                "sandbox %s: still resuming after %.0fs", sandbox_id, self.resume_hold_seconds
            )
            raise retry from None
        except EnvNotRestored as err:  # logged and counted by the resumer
            raise ResumeFailed(str(err)) from err
        except Exception as err:
            logger.exception("sandbox %s: resume failed", sandbox_id)
            raise retry from err
        if fresh is None:
            fresh = self.state.index.lookup(sandbox_id)
        if fresh is None or fresh.suspended or not fresh.ready:
            raise retry
        return fresh

    # -- 5.: forward ------------------------------------------------------------------------
    def _stream_signals(self, record: Record) -> Callable[[bool], None]:
        """The ``on_stream`` callback reporting a streamed response as activity."""
        activity: ActivitySignals | None = self.state.activity

        def on_stream(opened: bool) -> None:
            if activity is None:
                return
            if opened:
                activity.stream_opened(record)
            else:
                activity.stream_closed(record)

        return on_stream

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        target: Target,
        record: RecordT,
        address: tuple[str, int],
    ) -> None:
        """Stream the request to the pod: WebSocket, envd over exec, or plain HTTP.

        Raises:
            PortNotOpen: the pod refused the port (and no exec fallback serves it).
            PodUnreachable: the pod could not be reached.
        """
        on_stream = self._stream_signals(record)
        if scope["type"] == "websocket":
            await self.ws_proxy.forward(scope, receive, send, address=address, on_stream=on_stream)
            return
        fallback = self.exec_fallback if target.port == ENVD_PORT else None
        if fallback is not None and self._use_exec(record):
            await fallback.handle(scope, receive, send, record=record, on_stream=on_stream)
            return
        streaming = is_streaming_request(scope, port=target.port, envd_port=ENVD_PORT)
        try:
            outcome = await self.proxy.forward(
                scope, receive, send, address=address, streaming=streaming, on_stream=on_stream
            )
        except UpstreamLost as err:
            # The response already started: returning without completing it makes the server
            # close the connection, so the client sees a truncated transfer, not a short one.
            logger.info("sandbox %s: %s", target.sandbox_id, err)
            return
        if outcome is Outcome.REFUSED:
            pod_uid = _uid(record.pod)
            if fallback is None or not pod_uid:
                raise PortNotOpen(target.sandbox_id, target.port)
            logger.info(
                "sandbox %s: envd port refused, serving it over pods/exec", target.sandbox_id
            )
            self._refused[pod_uid] = time.monotonic() + REFUSAL_MEMORY_SECONDS
            await fallback.handle(scope, receive, send, record=record, on_stream=on_stream)
        elif outcome is Outcome.UNREACHABLE:
            raise PodUnreachable(target.sandbox_id)

    def _use_exec(self, record: Record) -> bool:
        """Whether envd is served over exec: declared so, or its pod refused envd lately."""
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
