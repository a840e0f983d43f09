"""Controller expectations: remember what we created or deleted until the cache shows it.

A reconcile reads from a cache that may lag behind its own writes. Without a memory of writes
in flight, a second reconcile of the same key would count too few objects and create again. A
key's expectations hold the number of creations not yet observed and the UIDs of deletions not
yet observed; they are satisfied when both are zero, or when they are older than the TTL (a
lost watch event must not block the key forever).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

DEFAULT_TTL = 300.0
"""Seconds after which unobserved expectations are dropped (5 minutes, like client-go)."""


@dataclass
class _Record:
    creations: int = 0
    deletions: set[str] = field(default_factory=set)
    raised_at: float = 0.0


class Expectations:
    """Pending creations (a count) and deletions (UIDs) per key, with a TTL.

    Args:
        ttl: seconds until a record times out.
        clock: monotonic clock.
    """

    def __init__(self, ttl: float = DEFAULT_TTL, *, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self._clock = clock
        self._records: dict[Hashable, _Record] = {}

    def _live(self, key: Hashable) -> _Record | None:
        rec = self._records.get(key)
        if rec is None:
            return None
        if self._clock() - rec.raised_at > self.ttl:
            del self._records[key]
            return None
        return rec

    def satisfied(self, key: Hashable) -> bool:
        """True when nothing is pending for ``key`` (or its record timed out and was dropped)."""
        rec = self._live(key)
        return rec is None or (rec.creations <= 0 and not rec.deletions)

    def expect_creations(self, key: Hashable, count: int) -> None:
        """Record that ``count`` creations are in flight (replaces the pending count).

        Raises:
            ValueError: if ``count`` is negative.
        """
        if count < 0:
            raise ValueError(f"count must not be negative, got {count}")
        rec = self._live(key) or _Record()
        rec.creations = count
        rec.raised_at = self._clock()
        self._records[key] = rec

    def try_expect_creations(self, key: Hashable, count: int) -> bool:
        """Atomically: if ``key`` is satisfied and ``count > 0``, expect ``count`` creations.

        Returns:
            False (and records nothing) when ``count <= 0`` or earlier writes are unobserved.
        """
        if count <= 0 or not self.satisfied(key):
            return False
        self.expect_creations(key, count)
        return True

    def creation_observed(self, key: Hashable) -> None:
        """The cache showed one created object (or a creation failed): lower the count."""
        rec = self._records.get(key)
        if rec is not None and rec.creations > 0:
            rec.creations -= 1

    def expect_deletion(self, key: Hashable, uid: str) -> None:
        """Record a deletion in flight (call before issuing the DELETE); empty UIDs are ignored."""
        if not uid:
            return
        rec = self._live(key) or _Record()
        rec.deletions.add(uid)
        rec.raised_at = self._clock()
        self._records[key] = rec

    def deletion_observed(self, key: Hashable, uid: str) -> None:
        """The cache showed the deletion (or the DELETE failed and is rolled back)."""
        rec = self._records.get(key)
        if rec is not None:
            rec.deletions.discard(uid)

    def is_pending_deletion(self, key: Hashable, uid: str) -> bool:
        """True if a deletion of ``uid`` is in flight and not timed out."""
        rec = self._live(key)
        return rec is not None and uid in rec.deletions

    def pending(self, key: Hashable) -> tuple[int, frozenset[str]]:
        """(pending creations, pending deletion UIDs) of ``key``, honouring the TTL."""
        rec = self._live(key)
        if rec is None:
            return 0, frozenset()
        return rec.creations, frozenset(rec.deletions)

    def forget(self, key: Hashable) -> None:
        """Drop the record of ``key`` (e.g. when its object is deleted)."""
        self._records.pop(key, None)

    def __len__(self) -> int:
        return len(self._records)
