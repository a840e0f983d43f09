"""When the controller first saw each claim (``controller-first-observed-at``, upstream's
observedTimeMap).

The primary watch's predicate records the time of the first event of every claim (by
namespace/name and UID, so a re-created claim starts over); the reconciler stamps it on the
claim and the controller-side startup latency is measured from it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kube_agent_sandbox.controller.runtime import Obj, meta

_Key = tuple[str, str]


def rfc3339nano(epoch_ns: int) -> str:
    """Format nanoseconds since the epoch as Go's ``time.RFC3339Nano`` in UTC.

    Trailing zeros of the fraction are dropped (and the dot with them), as Go does.
    """
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if nanos:
        stamp += "." + f"{nanos:09d}".rstrip("0")
    return stamp + "Z"


class FirstObserved:
    """First-observation times of claims, kept in memory.

    Args:
        clock_ns: Wall clock in nanoseconds since the epoch.
    """

    def __init__(self, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self._clock_ns = clock_ns
        self._seen: dict[_Key, tuple[str, int]] = {}

    def record(self, claim: Obj) -> int:
        """Remember now as the first observation of ``claim`` unless one is known; return it."""
        m = meta(claim)
        key = (str(m.get("namespace") or ""), str(m.get("name") or ""))
        uid = str(m.get("uid") or "")
        seen = self._seen.get(key)
        if seen is not None and seen[0] == uid:
            return seen[1]
        now = self._clock_ns()
        self._seen[key] = (uid, now)
        return now

    def forget(self, namespace: str, name: str) -> None:
        """Drop the entry of a deleted claim."""
        self._seen.pop((namespace, name), None)

    def predicate(self, old: Obj | None, new: Obj | None) -> bool:
        """Watch predicate: records first observations, drops deleted claims, passes all."""
        if new is None:
            if old is not None:
                m = meta(old)
                self.forget(str(m.get("namespace") or ""), str(m.get("name") or ""))
            return True
        self.record(new)
        return True

    def __len__(self) -> int:
        return len(self._seen)
