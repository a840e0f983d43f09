"""Which reconcile failures are retried soon, which slowly, and which are bugs.

controller-runtime retries every error with the per-key exponential backoff (5 ms doubling to
1000 s) and recovers panics into errors that are retried the same way. Retrying at once only
helps when the failure can heal by itself: a conflict with another writer, a throttled or
unavailable API server, a dropped connection. A programming error (``KeyError``,
``TypeError``, ...) fails the same way on every attempt; hot-retrying it burns the API server
and the log and hides the bug behind a stream of identical retries. So the controller sorts
every exception a reconcile raises into one of these classes (:func:`classify`) and the work
queue treats each class differently (see :class:`~kube_agent_sandbox.controller.runtime.
controller.Controller`).
"""

from __future__ import annotations

import asyncio
import enum
import socket
from typing import Final

import aiohttp

from kube_agent_sandbox.controller.runtime.types import ApiError, TerminalError, TransientError

TRANSIENT_STATUSES: Final = frozenset({401, 403, 408, 409, 410, 425, 429})
"""API statuses below 500 that can heal by retrying: 401 (credentials being rotated), 403 (a
restarted API server refuses requests until its RBAC authorizer has synced: seen for several
seconds in the restart test; also RBAC being applied), 408 (request timeout), 409 (conflict, or
AlreadyExists while the cache catches up), 410 (an expired list continue token), 425 and 429
(throttling). Every 5xx can heal too."""


class ErrorClass(enum.Enum):
    """How the work queue treats a failed reconcile."""

    TRANSIENT = "transient"
    """Can heal by itself: retried with the per-key exponential backoff."""
    PERMANENT = "permanent"
    """An API answer that repeats until someone changes something (400, 404, 405, 422, ...):
    retried slowly."""
    PROGRAMMING = "programming"
    """A bug in the reconciler (any other exception): logged with its traceback, counted in
    ``controller_runtime_reconcile_panics_total`` and retried slowly."""
    TERMINAL = "terminal"
    """:class:`TerminalError`: never retried; the next event of the object brings it back."""


def transient_status(status: int) -> bool:
    """Whether an API error status can heal by retrying the same request."""
    return status >= 500 or status in TRANSIENT_STATUSES


def classify(exc: BaseException) -> ErrorClass:
    """Sort an exception raised by a reconcile into its :class:`ErrorClass`.

    An exception raised explicitly ``from`` a transient cause (a reconciler wrapping a failed
    API call in its own error type) is as transient as its cause; an implicit context (an
    exception raised while handling another) is not, since that is how bugs in error
    handlers look.

    Args:
        exc: What the reconcile raised.

    Returns:
        The class that decides the retry policy.
    """
    if isinstance(exc, TerminalError):
        return ErrorClass.TERMINAL
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _classify_one(current)
        if found is not None:
            return found
        current = current.__cause__
    return ErrorClass.PROGRAMMING


def _classify_one(exc: BaseException) -> ErrorClass | None:
    if isinstance(exc, TransientError):
        return ErrorClass.TRANSIENT
    if isinstance(exc, ApiError):
        return ErrorClass.TRANSIENT if transient_status(exc.status) else ErrorClass.PERMANENT
    # connection refused/reset, DNS, TLS, timeouts, a stream cut mid-body, a task cancelled
    # by someone else (e.g. a timeout around an awaited call)
    if isinstance(
        exc,
        TimeoutError | ConnectionError | aiohttp.ClientError | asyncio.CancelledError,
    ):
        return ErrorClass.TRANSIENT
    if isinstance(exc, socket.gaierror):  # name resolution (the API server's DNS name)
        return ErrorClass.TRANSIENT
    return None
