"""Every reconciler's error model: which failures are retried soon, which slowly, which are bugs.

controller-runtime retries every error with the per-key exponential backoff (5 ms doubling to
1000 s) and recovers panics into errors that are retried the same way. Retrying at once only
helps when the failure can heal by itself: a conflict with another writer, a throttled or
unavailable API server, a dropped connection. A programming error (``KeyError``,
``TypeError``, ...) fails the same way on every attempt; hot-retrying it burns the API server
and the log and hides the bug behind a stream of identical retries. So the controller sorts
every exception a reconcile raises into one of these classes (:func:`classify`) and the work
queue treats each class differently (see :class:`~kube_agent_sandbox.controller.runtime.
controller.Controller`).

Inside a pass, a reconciler turns each failed step into a :class:`ReconcileError` (the text
users see in a condition, its Ready reason, and whether retrying soon helps, decided by
:func:`is_transient` from the one status table :data:`TRANSIENT_STATUSES`), and an
:class:`ErrorCollector` gathers them so one failed step does not stop the next (upstream joins
the errors of every step and returns them together).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import aiohttp

from kube_agent_sandbox.controller.runtime.types import ApiError, TerminalError, TransientError

TRANSIENT_STATUSES: Final = frozenset({401, 403, 408, 409, 410, 425, 429})
"""API statuses below 500 that can heal by retrying: 401 (credentials being rotated), 403 (a
restarted API server refuses requests until its RBAC authorizer has synced: seen for several
seconds in the restart test; also RBAC being applied), 408 (request timeout), 409 (conflict, or
AlreadyExists while the cache catches up), 410 (an expired list continue token), 425 and 429
(throttling). Every 5xx can heal too. Every other status (400, 404, 405, 422, ...) describes
the request itself and is permanent: retried slowly.

403 is transient on purpose, as controller-runtime retries every error with backoff: when the
controller's RBAC is missing, the error is shown (in the object's Ready condition and the log)
and the object heals within the transient retry cap (30 s by default) of the Role being
applied, instead of waiting for a slow retry. A create refused in a terminating namespace (a
403 too) is the exception: it can never heal (see :func:`is_transient`)."""

RECONCILER_ERROR_REASON: Final = "ReconcilerError"
"""The condition reason of a failed pass (upstream's ``ReconcilerError``)."""


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
    if isinstance(exc, ReconcileError):
        return ErrorClass.TRANSIENT if exc.transient else ErrorClass.PERMANENT
    if isinstance(exc, ApiError):
        return ErrorClass.TRANSIENT if is_transient(exc) else ErrorClass.PERMANENT
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


class ReconcileError(Exception):
    """A failed step of a reconcile: the text users see, its reason, and its retry rule.

    Attributes:
        message: Text shown in the object's condition (upstream's wording).
        reason: The condition reason a reconciler reports for it.
        transient: Whether retrying soon may succeed: raised to the work queue, it is retried
            with the per-key backoff; otherwise the reconciler reports it and looks again
            slowly (or when the object changes).
    """

    reason: str = RECONCILER_ERROR_REASON
    transient: bool = True

    def __init__(self, message: str, *, transient: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if transient is not None:
            self.transient = transient

    def __str__(self) -> str:
        return self.message


def describe(exc: BaseException) -> str:
    """Error text as Go would print it: an API error is its status message only."""
    if isinstance(exc, ApiError):
        return exc.message or f"{exc.status} {exc.reason}"
    text = str(exc)
    return text or type(exc).__name__


def is_transient(exc: BaseException) -> bool:
    """Whether an exception from a client call may go away when the call is repeated.

    A :class:`ReconcileError` says so itself; an API error follows :data:`TRANSIENT_STATUSES`
    (AlreadyExists is transient: the cache has not shown the object yet; a create refused in a
    terminating namespace is not); anything else (network errors, timeouts) is transient.
    """
    if isinstance(exc, ReconcileError):
        return exc.transient
    if isinstance(exc, ApiError):
        if exc.already_exists:
            return True
        if exc.namespace_terminating:
            return False
        return transient_status(exc.status)
    return True


def wrap(exc: BaseException, prefix: str | None = None) -> ReconcileError:
    """A client exception as a ReconcileError, optionally prefixed (``pod get failed: ...``)."""
    if isinstance(exc, ReconcileError) and prefix is None:
        return exc
    text = describe(exc)
    return ReconcileError(f"{prefix}: {text}" if prefix else text, transient=is_transient(exc))


def join_messages(errors: list[ReconcileError]) -> str | None:
    """Errors joined with newlines, as Go's ``errors.Join``; None when there are none."""
    if not errors:
        return None
    return "\n".join(err.message for err in errors)


@dataclass(slots=True)
class StepOutcome:
    """Whether the step run inside :meth:`ErrorCollector.step` raised."""

    failed: bool = False


class ErrorCollector:
    """The errors of one reconcile pass, caught at one boundary as the steps raise them.

    Attributes:
        errors: The ReconcileErrors raised so far, in step order.
    """

    def __init__(self) -> None:
        self.errors: list[ReconcileError] = []

    @contextlib.contextmanager
    def step(self) -> Iterator[StepOutcome]:
        """Run one step: a ReconcileError it raises is recorded and the pass goes on.

        Yields:
            The step's outcome; ``failed`` is set once the block has raised.
        """
        outcome = StepOutcome()
        try:
            yield outcome
        except ReconcileError as error:
            outcome.failed = True
            self.record(error)

    def record(self, error: ReconcileError) -> None:
        """Keep one error of the pass (a subclass may keep some apart)."""
        self.errors.append(error)

    @property
    def text(self) -> str | None:
        """The errors joined as Go's ``errors.Join`` prints them; None when there are none."""
        return join_messages(self.errors)
