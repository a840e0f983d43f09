"""What the data plane needs from the gateway's state, as structural types.

The gateway's state (``gateway.state.GatewayState``), its index, token issuer, activity tracker
and resumer are written elsewhere; the data plane depends only on these small protocols, so it
can be tested with plain stand-in objects and stays independent of how the caches are built.
"""

from __future__ import annotations

from typing import Any, Protocol

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


class Index(Protocol):
    """Sandbox lookups from the informer caches (``gateway.index.SandboxIndex``)."""

    def lookup(self, sandbox_id: str) -> Any:
        """The :class:`Record` of ``sandbox_id``, or None."""
        ...

    def address(self, record: Any, port: int) -> tuple[str, int] | None:
        """Where ``port`` of the record's pod is reached, or None without a pod IP."""
        ...


class Tokens(Protocol):
    """Per-sandbox tokens derived from the claim UID (``gateway.tokens``)."""

    def envd_access_token(self, claim_uid: str) -> str:
        """The token envd (port 49983) requires in ``X-Access-Token``."""
        ...

    def traffic_access_token(self, claim_uid: str) -> str:
        """The token other ports accept in ``E2B-Traffic-Access-Token``."""
        ...


class Activity(Protocol):
    """In-memory activity accounting (``gateway.activity.ActivityTracker``)."""

    def request_started(self, record: Any) -> None:
        """A request for the sandbox arrived."""
        ...

    def stream_opened(self, record: Any) -> None:
        """A streamed response to the sandbox started."""
        ...

    def stream_closed(self, record: Any) -> None:
        """A streamed response ended."""
        ...


class Resumer(Protocol):
    """Brings an idle-suspended sandbox back (``gateway.resume.Resumer``)."""

    async def resume(self, record: Any) -> Any:
        """Resume, wait until Ready; returns the fresh record (or None: look it up again)."""
        ...
