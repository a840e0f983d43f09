"""Optional OpenTelemetry tracing of reconciles, free when it is off (``--enable-tracing``).

Reconcilers take a :class:`Tracer` and call it unconditionally. By default that is
:data:`NOOP_TRACER`, whose methods do nothing and allocate nothing, so the controller pays no
tracing cost and needs no OpenTelemetry package. With ``--enable-tracing``, :func:`setup`
installs an OTLP-exporting tracer provider and :func:`tracer_for` hands reconcilers an
OpenTelemetry-backed tracer (:mod:`kube_agent_sandbox.controller.otel`, imported only then,
because OpenTelemetry is the optional ``tracing`` extra).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Final

from kube_agent_sandbox.controller.tracer import (
    INSTALL_HINT,
    SERVICE_NAME,
    TRACER_NAME,
    Describe,
    Obj,
    Tracer,
    TracingError,
)

__all__ = [
    "INIT_TIMEOUT",
    "NOOP_TRACER",
    "SERVICE_NAME",
    "TRACER_NAME",
    "NoopTracer",
    "Tracer",
    "TracingError",
    "setup",
    "tracer_for",
]

INIT_TIMEOUT: Final = 10.0
"""Seconds the tracer provider may take to start before startup fails (upstream's)."""

_NULL_CONTEXT: Final[AbstractContextManager[None]] = contextlib.nullcontext()


class NoopTracer:
    """Tracing off: every method returns at once (one shared, reusable null context)."""

    def object_span(
        self, name: str, obj: Obj, attributes: Describe
    ) -> AbstractContextManager[None]:
        """Nothing to trace."""
        return _NULL_CONTEXT

    def span(self, name: str) -> AbstractContextManager[None]:
        """Nothing to trace."""
        return _NULL_CONTEXT

    def add_event(self, name: str, obj: Obj, attributes: Describe) -> None:
        """Nothing to record."""

    def trace_context(self) -> str:
        """No context, so reconcilers persist none."""
        return ""


NOOP_TRACER: Final = NoopTracer()
"""The tracer reconcilers use unless tracing is enabled."""


def _noop_shutdown() -> None:
    return None


def setup(*, enabled: bool, timeout: float = INIT_TIMEOUT) -> Callable[[], None]:
    """Install the process-wide OTLP tracer provider and W3C propagator when ``enabled``.

    Args:
        enabled: ``--enable-tracing``.
        timeout: Seconds the provider may take to start.

    Returns:
        A function that flushes and stops the provider (does nothing when disabled).

    Raises:
        TracingError: OpenTelemetry is not installed, or the provider did not start.
    """
    if not enabled:
        return _noop_shutdown
    with _needs_opentelemetry():
        from kube_agent_sandbox.controller import otel
    return otel.install_provider(timeout=timeout)


def tracer_for(*, enabled: bool) -> Tracer:
    """The tracer for reconcilers: OpenTelemetry-backed when ``enabled``, else the no-op one.

    Raises:
        TracingError: ``enabled`` but OpenTelemetry is not installed.
    """
    if not enabled:
        return NOOP_TRACER
    with _needs_opentelemetry():
        from kube_agent_sandbox.controller import otel
    return otel.global_tracer()


@contextlib.contextmanager
def _needs_opentelemetry() -> Iterator[None]:
    """Turn the ImportError of a missing ``tracing`` extra into a clear TracingError."""
    try:
        yield
    except ImportError as err:
        raise TracingError(
            f"--enable-tracing needs the OpenTelemetry packages, which are not installed ({err})",
            hint=INSTALL_HINT,
        ) from err
