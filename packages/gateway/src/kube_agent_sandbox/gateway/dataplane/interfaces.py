"""The data plane's seams: what it needs from the rest of the gateway, as structural types.

The router (:mod:`.router`) and the exec fallback (:mod:`.execfallback`) are typed against
these protocols, not against :class:`~kube_agent_sandbox.gateway.state.GatewayState`: the
gateway's state satisfies them (``DataPlaneState[SandboxRecord]``), and the unit tests pass
plain stand-in objects that satisfy them too. Each protocol names only what its user calls.

The record type is a parameter (:data:`RecordT`): whatever the index returns is what the
resumer takes back and returns, so the real index and resumer agree on ``SandboxRecord``
while the data plane itself reads only the fields of :class:`Record`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

Obj = dict[str, Any]


class Record(Protocol):
    """One sandbox as the index sees it (``gateway.index.SandboxRecord``)."""

    @property
    def namespace(self) -> str:
        """The tenant namespace."""
        ...

    @property
    def claim(self) -> Obj:
        """The SandboxClaim (its UID keys the access tokens)."""
        ...

    @property
    def sandbox(self) -> Obj | None:
        """The Sandbox, once bound."""
        ...

    @property
    def pod(self) -> Obj | None:
        """The Pod, while one exists."""
        ...

    @property
    def ready(self) -> bool:
        """The sandbox is Ready (its pod runs)."""
        ...

    @property
    def suspended(self) -> bool:
        """The Sandbox is suspended (``Suspended=True``)."""
        ...


RecordT = TypeVar("RecordT", bound=Record)
"""The record type one gateway's index hands out and its resumer takes back."""


class SandboxLookup(Protocol[RecordT]):
    """Sandbox lookups from the informer caches (``gateway.index.SandboxIndex``)."""

    def lookup(self, sandbox_id: str) -> RecordT | None:
        """The record of ``sandbox_id``, or None."""
        ...

    def address(self, record: RecordT, port: int) -> tuple[str, int] | None:
        """Where ``port`` of the record's pod is reached, or None without a pod IP."""
        ...


class AccessTokens(Protocol):
    """Per-sandbox tokens derived from the claim UID (``gateway.tokens.Tokens``)."""

    def envd_access_token(self, claim_uid: str) -> str:
        """The token envd (port 49983) requires in ``X-Access-Token``."""
        ...

    def traffic_access_token(self, claim_uid: str) -> str:
        """The token other ports accept in ``E2B-Traffic-Access-Token``."""
        ...


class ActivitySignals(Protocol):
    """Activity the data plane reports (``gateway.activity.ActivityTracker``)."""

    def request_started(self, record: Record) -> None:
        """A request for the sandbox arrived."""
        ...

    def stream_opened(self, record: Record) -> None:
        """A streamed response to the sandbox started."""
        ...

    def stream_closed(self, record: Record) -> None:
        """A streamed response ended."""
        ...


class TrafficResume(Protocol[RecordT]):
    """Brings an idle-suspended sandbox back (``gateway.resume.Resumer``)."""

    async def resume(self, record: RecordT, *, on_traffic: bool = False) -> RecordT | None:
        """Resume, wait until Ready; returns the fresh record (or None: look it up again).

        Raises:
            LookupError: the sandbox is gone, or ``on_traffic`` and its policy forbids it.
        """
        ...


class RoutingOptions(Protocol):
    """The gateway settings the data plane reads (``gateway.config.GatewayOptions``)."""

    @property
    def domain(self) -> str | None:
        """The wildcard domain of ``<port>-<id>.<domain>`` hosts; None: headers only."""
        ...


class DataPlaneState(Protocol[RecordT]):
    """What the data plane reads of the gateway's state, at each request.

    ``activity`` and ``resumer`` may be None: no activity accounting, no resume on traffic.
    """

    @property
    def index(self) -> SandboxLookup[RecordT]:
        """The sandbox index."""
        ...

    @property
    def tokens(self) -> AccessTokens:
        """The token issuer."""
        ...

    @property
    def activity(self) -> ActivitySignals | None:
        """The activity tracker, if any."""
        ...

    @property
    def resumer(self) -> TrafficResume[RecordT] | None:
        """The resumer, if any."""
        ...

    @property
    def options(self) -> RoutingOptions:
        """The gateway's settings."""
        ...


class CommandStream(Protocol):
    """One command running in a pod (``dataplane.podexec.ExecStream``)."""

    @property
    def exit_code(self) -> int | None:
        """The exit code once the command ended, else None."""
        ...

    @property
    def failure(self) -> str | None:
        """Why the command could not run, when the exec status says so."""
        ...

    @property
    def can_close_stdin(self) -> bool:
        """Whether the exec protocol can signal the end of stdin (v5)."""
        ...

    async def write(self, data: bytes) -> None:
        """Send ``data`` to the command's stdin."""
        ...

    async def close_stdin(self) -> None:
        """Close the command's stdin."""
        ...

    async def resize(self, cols: int, rows: int) -> None:
        """Set the terminal size (a command opened with ``tty``)."""
        ...

    async def read(self) -> tuple[int, bytes] | None:
        """The next ``(channel, chunk)`` of stdout/stderr, or None once the command ended."""
        ...


class CommandOutput(Protocol):
    """A finished command's output (``dataplane.podexec.Output``)."""

    @property
    def exit_code(self) -> int:
        """The exit code (-1 when unknown)."""
        ...

    @property
    def stdout(self) -> bytes:
        """All of stdout."""
        ...

    @property
    def stderr(self) -> bytes:
        """All of stderr."""
        ...

    @property
    def failure(self) -> str | None:
        """Why the command could not run, when the exec status says so."""
        ...


class PodCommands(Protocol):
    """Runs commands in a pod's container (``dataplane.podexec.PodExec``)."""

    def open(
        self,
        namespace: str,
        pod: str,
        command: Sequence[str],
        *,
        container: str | None = None,
        stdin: bool = False,
        tty: bool = False,
    ) -> AbstractAsyncContextManager[CommandStream]:
        """A stream running ``command`` (on a terminal with ``tty``); closed when the context
        exits."""
        ...

    async def run(
        self,
        namespace: str,
        pod: str,
        command: Sequence[str],
        *,
        container: str | None = None,
        stdin: bytes | None = None,
    ) -> CommandOutput:
        """Run ``command`` to completion and collect its output (``stdin`` written to it, then
        closed)."""
        ...

    async def aclose(self) -> None:
        """Release pooled connections."""
        ...
