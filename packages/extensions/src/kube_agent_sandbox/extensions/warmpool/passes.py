"""What one pass over a pool carries between its steps, and what a pool keeps between passes.

The steps of upstream v0.5.6 extensions/controllers/sandboxwarmpool_controller.go, reconcilePool
(filter, stuck pass, create, trim, status) each take a :class:`Pass` and append to its errors
instead of raising, so the reconciler raises them once, at the end, as upstream returns one
aggregated error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kube_agent_sandbox.controller.runtime import Obj, Request, meta
from kube_agent_sandbox.extensions.warmpool.refill import ReplenishHold, TokenBucket

__all__ = ["Pass", "PoolState", "Requeue", "uid_of"]


def uid_of(obj: Obj) -> str:
    """The object's UID, or ``""``."""
    return str(meta(obj).get("uid") or "")


@dataclass
class PoolState:
    """In-memory state of one pool that outlives a pass (refill shaping, last status write)."""

    hold: ReplenishHold
    bucket: TokenBucket | None = None
    status_written_at: float | None = None
    written: tuple[str, dict[str, Any]] | None = None
    """(resourceVersion the last status write started from, the status it wrote): the cache
    shows that version until the write arrives, and must not cause the same write again."""


@dataclass
class Requeue:
    """The minimum non-zero requeue of a pass."""

    after: float | None = None

    def at_most(self, seconds: float | None) -> None:
        """Lower the requeue to ``seconds`` if that is positive and sooner."""
        if seconds is not None and seconds > 0 and (self.after is None or seconds < self.after):
            self.after = seconds


@dataclass
class Pass:
    """What one pass found and did (kept together so the steps stay small)."""

    key: Request
    pool: Obj
    template: Obj | None
    active: list[Obj] = field(default_factory=list)
    terminating: int = 0
    adopting: int = 0
    """Orphans whose adoption met a conflict (the cache had an older version): they still
    exist, so they hold their place in the pool until the retry adopts (or rejects) them."""
    unschedulable: int = 0
    errors: list[BaseException] = field(default_factory=list)
    requeue: Requeue = field(default_factory=Requeue)

    @property
    def namespace(self) -> str:
        """The pool's namespace."""
        return self.key.namespace
