"""Errors of one Sandbox reconcile and how each one is retried.

Upstream returns every error to controller-runtime, which retries with exponential backoff
forever. Some errors cannot heal by retrying the same request (an invalid pod template, a
name taken by another owner, a namespace being deleted), so each error here says whether it
is *transient* (retry soon with backoff) or not (report it in status, retry slowly). The
message text is what ends up in the Ready condition, so it matches upstream's wording.

The steps of a reconcile raise these errors; :class:`ErrorCollector` is the one place a pass
catches them, so a failed step does not stop the next one (upstream joins the errors of every
step and returns them together).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from kube_agent_sandbox.controller.runtime.types import ApiError, TransientError

# Statuses that describe the request itself (bad input, permission, missing namespace):
# sending the same request again gives the same answer.
_PERMANENT_STATUSES = frozenset({400, 403, 404, 405, 406, 413, 415, 422})


class ChildError(Exception):
    """An error reconciling one child (or the Sandbox itself) during a reconcile.

    Attributes:
        message: Text shown in the Ready condition (upstream wording).
        transient: Whether retrying soon may succeed.
    """

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient

    def __str__(self) -> str:
        return self.message


class MultiplePodsError(ChildError):
    """Several pods are controlled by one Sandbox: refuse to pick one or create another."""

    def __init__(self, count: int) -> None:
        super().__init__(
            f"multiple Pods ({count}) are controlled by this Sandbox; "
            "refusing to choose or create a Pod",
            transient=False,
        )
        self.count = count


class SandboxReconcileError(TransientError):
    """Raised from ``reconcile`` when a transient error asks for a backoff retry."""


def describe(exc: BaseException) -> str:
    """Error text as Go would print it: an API error is its status message only."""
    if isinstance(exc, ApiError):
        return exc.message or f"{exc.status} {exc.reason}"
    text = str(exc)
    return text or type(exc).__name__


def is_transient(exc: BaseException) -> bool:
    """Whether an exception from a client call may go away when the call is repeated."""
    if isinstance(exc, ChildError):
        return exc.transient
    if isinstance(exc, ApiError):
        if exc.already_exists:
            return True  # the cache has not seen the object yet; the next pass will
        return exc.status not in _PERMANENT_STATUSES
    return True  # network errors, timeouts


def wrap(exc: BaseException, prefix: str | None = None) -> ChildError:
    """Turn a client exception into a ChildError, optionally prefixed (``pod get failed: ...``)."""
    if isinstance(exc, ChildError) and prefix is None:
        return exc
    text = describe(exc)
    return ChildError(f"{prefix}: {text}" if prefix else text, transient=is_transient(exc))


def join_messages(errors: list[ChildError]) -> str | None:
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
        errors: The ChildErrors raised so far, in step order.
        multiple_pods: The MultiplePods error, kept apart: it has its own Ready reason and is
            not retried (the owned-Pod watch brings the next pass).
    """

    def __init__(self) -> None:
        self.errors: list[ChildError] = []
        self.multiple_pods: MultiplePodsError | None = None

    @contextlib.contextmanager
    def step(self) -> Iterator[StepOutcome]:
        """Run one step: a ChildError it raises is recorded and the pass goes on.

        Yields:
            The step's outcome; ``failed`` is set once the block has raised.
        """
        outcome = StepOutcome()
        try:
            yield outcome
        except MultiplePodsError as error:
            outcome.failed = True
            self.multiple_pods = error
        except ChildError as error:
            outcome.failed = True
            self.errors.append(error)

    @property
    def text(self) -> str | None:
        """The errors joined as Go's ``errors.Join`` prints them; None when there are none."""
        return join_messages(self.errors)
