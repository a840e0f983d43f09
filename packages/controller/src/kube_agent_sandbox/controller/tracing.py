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
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol

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

SERVICE_NAME: Final = "agent-sandbox-controller"
"""``service.name`` resource attribute of every exported span (upstream's)."""

TRACER_NAME: Final = "agent-sandbox-controller"
"""Instrumentation scope name of the controller's tracer (upstream's)."""

INIT_TIMEOUT: Final = 10.0
"""Seconds the tracer provider may take to start before startup fails (upstream's)."""

INSTALL_HINT: Final = "install kube-agent-sandbox-controller[tracing]"


class TracingError(Exception):
    """Tracing was asked for but cannot start.

    Attributes:
        message: Upstream's log message (``unable to initialize tracing``).
        reason: What went wrong, for the operator.
        hint: How to fix it, when known.
    """

    def __init__(self, reason: str, *, hint: str | None = None) -> None:
        super().__init__(reason)
        self.message = "unable to initialize tracing"
        self.reason = reason
        self.hint = hint


class Tracer(Protocol):
    """What a reconciler may ask of tracing; every call is safe when tracing is off.

    Attributes are passed as a function of the object so that a disabled tracer never
    computes them.
    """

    def object_span(
        self, name: str, obj: Obj, attributes: Describe
    ) -> AbstractContextManager[None]:
        """A span for reconciling ``obj`` (attributes ``attributes(obj)``), parented on its
        trace-context annotation."""
        ...

    def span(self, name: str) -> AbstractContextManager[None]:
        """A child span of the current one."""
        ...

    def add_event(self, name: str, obj: Obj, attributes: Describe) -> None:
        """Record an event about ``obj`` (attributes ``attributes(obj)``) on the current span."""
        ...

    def trace_context(self) -> str:
        """JSON of the current W3C trace context headers; empty when there is none."""
        ...


Obj = dict[str, Any]
"""A Kubernetes object as decoded JSON."""

Describe = Callable[[Obj], Mapping[str, str]]
"""Computes span or event attributes of an object; called only when tracing records."""

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
