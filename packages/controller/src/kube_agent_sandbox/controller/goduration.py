"""Go ``time.Duration`` syntax: parsing flag values and printing durations the Go way.

Upstream's duration flags (``--sandbox-warm-pool-readiness-grace-period=1m30s``) are parsed by
Go's ``time.ParseDuration``, and some messages print a duration with ``Duration.String()``
(``5m0s``, ``1h0m0s``, ``300ms``). Both are reproduced here on integer nanoseconds so the flag
syntax and the message text match upstream byte for byte.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["DurationError", "format_go_duration", "parse_go_duration"]

_NS: Final = 1
_US: Final = 1_000
_MS: Final = 1_000_000
_S: Final = 1_000_000_000
_M: Final = 60 * _S
_H: Final = 60 * _M
_UNITS: Final = {
    "ns": _NS,
    "us": _US,
    "\u00b5s": _US,  # micro sign
    "\u03bcs": _US,  # Greek mu
    "ms": _MS,
    "s": _S,
    "m": _M,
    "h": _H,
}
_MAX_NS: Final = 2**63 - 1
_PART: Final = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]+)")


class DurationError(ValueError):
    """A text that Go's ``time.ParseDuration`` refuses; the message is Go's."""


def parse_go_duration(text: str) -> float:
    """Parse like Go's ``time.ParseDuration`` and return seconds.

    Args:
        text: e.g. ``300ms``, ``1m30s``, ``-1.5h``, ``0``.

    Returns:
        The duration in seconds (nanosecond precision).

    Raises:
        DurationError: ``time: invalid duration "<text>"``, ``time: missing unit in duration
            "<text>"``, ``time: unknown unit "<u>" in duration "<text>"`` or an overflow.
    """
    return parse_go_duration_ns(text) / _S


def parse_go_duration_ns(text: str) -> int:
    """Like :func:`parse_go_duration`, in integer nanoseconds."""
    quoted = '"' + text + '"'
    rest = text
    negative = False
    if rest[:1] in ("-", "+"):
        negative = rest[0] == "-"
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise DurationError(f"time: invalid duration {quoted}")
    total = 0
    while rest:
        match = _PART.match(rest)
        if match is None:
            if re.match(r"[0-9.]*$", rest) and re.search(r"[0-9]", rest):
                raise DurationError(f"time: missing unit in duration {quoted}")
            raise DurationError(f"time: invalid duration {quoted}")
        whole, frac, unit = match.groups()
        if not whole and not frac:
            raise DurationError(f"time: invalid duration {quoted}")
        scale = _UNITS.get(unit)
        if scale is None:
            raise DurationError(f'time: unknown unit "{unit}" in duration {quoted}')
        value = int(whole or "0") * scale
        if frac:
            value += int(frac) * scale // 10 ** len(frac)
        total += value
        if total > _MAX_NS + (1 if negative else 0):
            raise DurationError(f"time: invalid duration {quoted}")
        rest = rest[match.end() :]
    return -total if negative else total


def _fraction(value: int, digits: int) -> str:
    """``value`` as a decimal with ``digits`` fraction digits, trailing zeros dropped."""
    whole, frac = divmod(value, 10**digits)
    text = str(frac).rjust(digits, "0").rstrip("0")
    return f"{whole}.{text}" if text else str(whole)


def format_go_duration(seconds: float) -> str:
    """Print a duration as Go's ``time.Duration.String()`` does.

    Args:
        seconds: the duration; rounded to whole nanoseconds.

    Returns:
        e.g. ``0s``, ``300ms``, ``1.5s``, ``1m30s``, ``5m0s``, ``1h0m0s``.
    """
    ns = round(seconds * _S)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < _US:
        return f"{sign}{ns}ns"
    if ns < _MS:
        return f"{sign}{_fraction(ns, 3)}\u00b5s"
    if ns < _S:
        return f"{sign}{_fraction(ns, 6)}ms"
    hours, ns = divmod(ns, _H)
    minutes, ns = divmod(ns, _M)
    secs = _fraction(ns, 9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}"
    if minutes:
        return f"{sign}{minutes}m{secs}"
    return f"{sign}{secs}"
