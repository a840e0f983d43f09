"""Where a create's time goes, phase by phase, for the log and the ``Server-Timing`` header.

A create through the gateway is a few API calls, a wait for the claim to become Ready and a
call to the sandbox's daemon. Timing each phase on the request path costs nothing measurable
and lets a client (the benchmark, a browser's developer tools) see the split without
scraping logs: the create answers with ``Server-Timing: resolve;dur=0.1, claim;dur=6.2, ...``
(W3C Server Timing, durations in milliseconds).
"""

from __future__ import annotations

import re
import time
from typing import Final

SERVER_TIMING: Final = "Server-Timing"
_NAME: Final = re.compile(r"^[A-Za-z0-9_-]+$")


class PhaseTimer:
    """Splits the time since it was made into named phases.

    :meth:`mark` closes the phase running since the previous mark (or the start) under a
    name; a name marked twice adds up.
    """

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self._last = self.started
        self.phases: dict[str, float] = {}
        """Seconds per phase, in the order they first ended."""

    def mark(self, name: str) -> None:
        """End the running phase and call it ``name``.

        Raises:
            ValueError: if ``name`` is not a token (letters, digits, ``_``, ``-``).
        """
        if _NAME.fullmatch(name) is None:
            raise ValueError(f"phase name {name!r} is not a token")
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + (now - self._last)
        self._last = now

    def elapsed(self) -> float:
        """Seconds since the timer was made."""
        return time.perf_counter() - self.started

    def header(self) -> str:
        """The ``Server-Timing`` value: every phase, then ``total``, in milliseconds."""
        parts = [f"{name};dur={seconds * 1000:.1f}" for name, seconds in self.phases.items()]
        parts.append(f"total;dur={self.elapsed() * 1000:.1f}")
        return ", ".join(parts)

    def summary(self) -> str:
        """The phases for a log line: ``resolve 0.1 ms, claim 6.2 ms, ...``."""
        return ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in self.phases.items())
