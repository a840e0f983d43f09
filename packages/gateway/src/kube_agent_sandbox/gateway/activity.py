"""Activity accounting for idle shutdown: requests and open streams in memory, Leases in batches.

Every request and every open stream of a sandbox with an idle policy is activity; writing a
Lease per request would cost more than the sandbox. So the tracker only marks sandboxes in
memory, and a flush loop renews each marked sandbox's heartbeat Lease at most once per
``max(5 s, idle/10)``; a sandbox with a stream still open is marked again at every flush, so a
30-minute ``commands.run`` never looks idle. With a 15-minute timeout that is one Lease write
per sandbox per 90 s however busy it is. sandboxd's heartbeats (``POST /_gateway/heartbeat``,
authenticated with the sandbox's envd access token) and E2B's ``set_timeout`` and connect
arrive as :meth:`ActivityTracker.keepalive`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.heartbeat import format_micro_time, lease_body
from kube_agent_sandbox.api.rest import LEASES
from kube_agent_sandbox.controller.goduration import DurationError, parse_go_duration
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj
from kube_agent_sandbox.gateway.dataplane.interfaces import AccessTokens, Record, SandboxLookup
from kube_agent_sandbox.gateway.errors import e2b_error
from kube_agent_sandbox.gateway.index import SandboxRecord
from kube_agent_sandbox.gateway.periodic import Periodic
from kube_agent_sandbox.gateway.tokens import verify

__all__ = [
    "HEARTBEAT_PATH",
    "MIN_FLUSH_INTERVAL",
    "ActivityTracker",
    "KeepAlive",
    "flush_interval",
    "heartbeat_route",
    "holder_identity",
    "idle_timeout_of",
]

log = logging.getLogger(__name__)

HEARTBEAT_PATH: Final = "/_gateway/heartbeat"
MIN_FLUSH_INTERVAL: Final = 5.0
"""Seconds at least between two Lease writes for one sandbox."""
TICK: Final = 1.0
"""Seconds between two checks of the flush loop (each sandbox keeps its own interval)."""
MAX_PARALLEL_WRITES: Final = 16


def holder_identity() -> str:
    """The gateway's pod name (``POD_NAME`` from the downward API, else the host name)."""
    return os.environ.get("POD_NAME") or socket.gethostname()


def idle_timeout_of(sandbox: Obj | None) -> float | None:
    """The Sandbox's idle timeout in seconds, or None without a (valid, non-zero) one.

    The idle reconciler enforces the minimum and reports bad values; here a bad value only
    means "no heartbeat needed".
    """
    if sandbox is None:
        return None
    raw = ((sandbox.get("metadata") or {}).get("annotations") or {}).get(c.ANNOTATION_IDLE_TIMEOUT)
    if not raw:
        return None
    try:
        seconds = parse_go_duration(str(raw).strip())
    except DurationError:
        return None
    return seconds if seconds > 0 else None


def flush_interval(idle_timeout: float) -> float:
    """Seconds between Lease renewals of one sandbox: ``max(5 s, idle/10)``."""
    return max(MIN_FLUSH_INTERVAL, idle_timeout / 10)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class KeepAlive(Protocol):
    """Receives explicit signs of life (:meth:`ActivityTracker.keepalive`)."""

    def keepalive(self, record: SandboxRecord) -> None:
        """The sandbox was used: renew its heartbeat Lease at the next flush."""
        ...


class ApiSource(Protocol):
    """Where the tracker finds its Kubernetes client (the gateway state, once started)."""

    @property
    def api(self) -> Client:
        """The Kubernetes client."""
        ...


@dataclass
class _Entry:
    """What the tracker knows about one sandbox."""

    sandbox: Obj
    idle: float
    dirty: bool = False
    last_seen: dt.datetime | None = None
    open_streams: int = 0
    last_flush: float | None = None
    lease: Obj | None = field(default=None, repr=False)


class ActivityTracker:
    """In-memory activity per sandbox; renews heartbeat Leases in a debounced flush loop.

    Args:
        state: The gateway state (``api`` is used for the Lease writes); may be None when
            ``client`` is given.
        client: The Kubernetes client (default: ``state.api``, looked up at each flush).
        holder: ``spec.holderIdentity`` of the Leases (default: the pod name).
        clock: Monotonic seconds (debounce); tests pass a fake.
        wall: The current UTC time (``renewTime``); tests pass a fake.
    """

    def __init__(
        self,
        state: ApiSource | None = None,
        *,
        client: Client | None = None,
        holder: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = _utcnow,
    ) -> None:
        self._state = state
        self._client = client
        self.holder = holder or holder_identity()
        self._clock = clock
        self._wall = wall
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._loop = Periodic("activity flush", TICK, self.flush)
        self.writes = 0
        """Lease writes (create or update) made so far."""
        self.failures = 0
        """Lease writes that failed (retried at the sandbox's next interval)."""

    # -- signals (called on the request path: memory only) ------------------------------------
    def _entry(self, record: Record) -> _Entry | None:
        sandbox = record.sandbox
        idle = idle_timeout_of(sandbox)
        if sandbox is None or idle is None:
            return None
        meta = sandbox.get("metadata") or {}
        key = (str(meta.get("namespace") or record.namespace), str(meta.get("name") or ""))
        entry = self._entries.get(key)
        if entry is None or (entry.sandbox.get("metadata") or {}).get("uid") != meta.get("uid"):
            entry = _Entry(sandbox=sandbox, idle=idle)
            self._entries[key] = entry
        else:
            entry.sandbox = sandbox
            entry.idle = idle
        return entry

    def _mark(self, record: Record, *, streams: int = 0) -> None:
        entry = self._entry(record)
        if entry is None:
            return
        entry.dirty = True
        entry.last_seen = self._wall()
        entry.open_streams = max(0, entry.open_streams + streams)

    def request_started(self, record: Record) -> None:
        """A request for the sandbox arrived."""
        self._mark(record)

    def stream_opened(self, record: Record) -> None:
        """A long-lived stream to the sandbox opened: active until it closes."""
        self._mark(record, streams=1)

    def stream_closed(self, record: Record) -> None:
        """A stream opened with :meth:`stream_opened` closed (the close is activity too)."""
        self._mark(record, streams=-1)

    def keepalive(self, record: Record) -> None:
        """An explicit sign of life (sandboxd heartbeat, E2B set_timeout or connect)."""
        self._mark(record)

    def last_seen(self, namespace: str, name: str) -> dt.datetime | None:
        """When this replica last saw activity of the Sandbox ``namespace/name`` (None: never)."""
        entry = self._entries.get((namespace, name))
        return None if entry is None else entry.last_seen

    def open_streams(self, namespace: str, name: str) -> int:
        """Streams open to the Sandbox ``namespace/name`` (0 when unknown)."""
        entry = self._entries.get((namespace, name))
        return 0 if entry is None else entry.open_streams

    # -- flushing ------------------------------------------------------------------------------
    def due(self) -> list[tuple[tuple[str, str], _Entry]]:
        """Sandboxes whose Lease should be renewed now."""
        now = self._clock()
        found = []
        for key, entry in self._entries.items():
            if not entry.dirty and entry.open_streams == 0:
                continue
            if entry.last_flush is not None and now - entry.last_flush < flush_interval(entry.idle):
                continue
            found.append((key, entry))
        return found

    async def flush(self) -> int:
        """Renew the Leases that are due; returns how many were written."""
        due = self.due()
        if due:
            limit = asyncio.Semaphore(MAX_PARALLEL_WRITES)

            async def one(key: tuple[str, str], entry: _Entry) -> bool:
                async with limit:
                    return await self._renew(key, entry)

            results = await asyncio.gather(*(one(k, e) for k, e in due))
            written = sum(results)
        else:
            written = 0
        self._forget_quiet()
        return written

    def _forget_quiet(self) -> None:
        now = self._clock()
        quiet = [
            key
            for key, entry in self._entries.items()
            if not entry.dirty
            and entry.open_streams == 0
            and entry.last_flush is not None
            and now - entry.last_flush > 2 * flush_interval(entry.idle)
        ]
        for key in quiet:
            del self._entries[key]

    def _api(self) -> Client:
        if self._client is not None:
            return self._client
        if self._state is None:
            raise RuntimeError("the activity tracker has neither a client nor a state")
        return self._state.api

    async def _renew(self, key: tuple[str, str], entry: _Entry) -> bool:
        entry.last_flush = self._clock()
        # An open stream is activity right now; otherwise the last request is.
        moment = self._wall() if entry.open_streams else (entry.last_seen or self._wall())
        entry.dirty = False
        try:
            entry.lease = await renew_lease(
                self._api(),
                entry.sandbox,
                holder=self.holder,
                idle=entry.idle,
                now=moment,
                known=entry.lease,
            )
        except Exception as err:
            entry.dirty = True
            entry.lease = None
            self.failures += 1
            log.warning("heartbeat Lease %s/%s not renewed: %s", key[0], key[1], err)
            return False
        self.writes += 1
        return True

    async def start(self) -> None:
        """Start the flush loop (the gateway state calls this once its caches synced)."""
        await self._loop.start()

    async def stop(self) -> None:
        """Stop the loop after a last flush of what is pending."""
        await self._loop.stop()
        with contextlib.suppress(Exception):
            await self.flush()


async def renew_lease(
    client: Client,
    sandbox: Obj,
    *,
    holder: str,
    idle: float,
    now: dt.datetime,
    known: Obj | None = None,
) -> Obj:
    """Create or update the heartbeat Lease of ``sandbox``; returns the Lease as written.

    One request in the steady state: an update of the Lease this writer last wrote (``known``);
    a conflict (another writer renewed it) reads it once and updates again; a missing Lease
    is created.

    Args:
        client: The Kubernetes client (needs leases get, create, update).
        sandbox: The Sandbox (name, namespace, uid).
        holder: ``spec.holderIdentity``.
        idle: The idle timeout (``spec.leaseDurationSeconds``).
        now: ``spec.renewTime``.
        known: The Lease as this writer last saw it, if any.
    """
    meta = sandbox.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    fresh = lease_body(sandbox, holder=holder, duration_seconds=round(idle), now=now)
    current = known
    for _ in range(3):
        if current is None:
            try:
                return await client.create(LEASES, namespace, fresh)
            except ApiError as err:
                if not err.already_exists:
                    raise
            current = await client.get(LEASES, namespace, name)
        body = copy.deepcopy(current)
        body.setdefault("metadata", {}).setdefault("labels", {})[c.LABEL_HEARTBEAT] = "true"
        if not body["metadata"].get("ownerReferences"):
            body["metadata"]["ownerReferences"] = fresh["metadata"]["ownerReferences"]
        body["spec"] = {
            **(body.get("spec") or {}),
            "holderIdentity": holder,
            "leaseDurationSeconds": fresh["spec"]["leaseDurationSeconds"],
            "renewTime": format_micro_time(now),
        }
        try:
            return await client.update(LEASES, namespace, name, body)
        except ApiError as err:
            if err.not_found:
                current = None
                continue
            if not err.conflict:
                raise
            current = await client.get(LEASES, namespace, name)
    raise RuntimeError(f"heartbeat Lease {namespace}/{name}: too many conflicts")


class HeartbeatState(Protocol):
    """What the heartbeat route uses of the gateway state."""

    @property
    def index(self) -> SandboxLookup[SandboxRecord]:
        """The sandbox index."""
        ...

    @property
    def tokens(self) -> AccessTokens:
        """The token issuer."""
        ...

    @property
    def activity(self) -> KeepAlive:
        """Activity accounting."""
        ...


def heartbeat_route(state: HeartbeatState) -> Route:
    """``POST /_gateway/heartbeat``: sandboxd reports that processes it started still run.

    Authenticated like envd itself: ``X-Access-Token`` must be the sandbox's envd access token
    and ``E2b-Sandbox-Id`` names the sandbox. Answers 204, or 401 for a missing or wrong token
    (also for an unknown sandbox, so ids cannot be probed).

    Note: requests carrying ``E2b-Sandbox-Id`` are otherwise routed to the data plane; the
    app must serve this path first.
    """

    async def heartbeat(request: Request) -> Response:
        sandbox_id = request.headers.get("e2b-sandbox-id", "")
        token = request.headers.get("x-access-token")
        record = state.index.lookup(sandbox_id) if sandbox_id else None
        expected = state.tokens.envd_access_token(record.claim_uid) if record else ""
        if record is None or not token or not verify(token, expected):
            return e2b_error(401, "Invalid or missing access token")
        state.activity.keepalive(record)
        return Response(status_code=204)

    return Route(HEARTBEAT_PATH, heartbeat, methods=["POST"])
