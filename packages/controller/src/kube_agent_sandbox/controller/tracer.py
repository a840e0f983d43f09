"""What a tracer is: the :class:`Tracer` protocol reconcilers call, its names and its error.

Shared by :mod:`kube_agent_sandbox.controller.tracing` (the no-op tracer and the set-up) and
:mod:`kube_agent_sandbox.controller.otel` (the OpenTelemetry tracer, imported only when tracing
is on), so that neither imports the other at module level.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol

__all__ = [
    "INSTALL_HINT",
    "SERVICE_NAME",
    "TRACER_NAME",
    "Describe",
    "Obj",
    "Tracer",
    "TracingError",
]

SERVICE_NAME: Final = "agent-sandbox-controller"
"""``service.name`` resource attribute of every exported span (upstream's)."""

TRACER_NAME: Final = "agent-sandbox-controller"
"""Instrumentation scope name of the controller's tracer (upstream's)."""

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
