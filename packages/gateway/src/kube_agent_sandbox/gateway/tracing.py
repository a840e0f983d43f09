"""Optional OpenTelemetry tracing of creates (``serve --enable-tracing``), free when it is off.

With tracing on, a create (``POST /sandboxes``) opens a server span continuing the caller's W3C
``traceparent``/``tracestate`` headers (an E2B client with OpenTelemetry instrumentation sends
them), with children ``create_claim`` and ``wait_for_claim_ready``; the ``create_claim`` span's
context goes into the SandboxClaim's ``opentelemetry.io/trace-context`` annotation, where the
claim and Sandbox controllers continue the trace. Spans are exported over OTLP/gRPC, configured
by the standard ``OTEL_EXPORTER_OTLP_*`` variables, with ``service.name``
``agent-sandbox-gateway``.

Off, every call returns one shared null context and OpenTelemetry is never imported (it is the
controller package's ``tracing`` extra).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "NOOP_TRACER",
    "SERVICE_NAME",
    "GatewayTracer",
    "NoopGatewayTracer",
    "TracingError",
    "setup",
    "tracer_for",
]

SERVICE_NAME: Final = "agent-sandbox-gateway"
"""``service.name`` of the gateway's spans and its instrumentation scope."""

INSTALL_HINT: Final = "install kube-agent-sandbox-controller[tracing]"

Attributes = Mapping[str, str | int | float | bool]


class TracingError(RuntimeError):
    """Tracing was asked for but cannot start (OpenTelemetry is missing)."""


class GatewayTracer(Protocol):
    """What a create handler asks of tracing; every call is safe when tracing is off."""

    def server_span(
        self, name: str, headers: Mapping[str, str], attributes: Attributes
    ) -> AbstractContextManager[None]:
        """A server span continuing the request's W3C headers (a new trace without them)."""
        ...

    def span(self, name: str, attributes: Attributes | None = None) -> AbstractContextManager[None]:
        """A child span of the current one."""
        ...

    def set_status_code(self, status: int) -> None:
        """Record the response status on the current span (5xx marks it failed)."""
        ...

    def trace_context(self) -> str:
        """The current W3C context as the annotation's JSON; empty when there is none."""
        ...


_NULL_CONTEXT: Final[AbstractContextManager[None]] = contextlib.nullcontext()


class NoopGatewayTracer:
    """Tracing off: nothing recorded, nothing allocated."""

    def server_span(
        self, name: str, headers: Mapping[str, str], attributes: Attributes
    ) -> AbstractContextManager[None]:
        """Nothing to trace."""
        return _NULL_CONTEXT

    def span(self, name: str, attributes: Attributes | None = None) -> AbstractContextManager[None]:
        """Nothing to trace."""
        return _NULL_CONTEXT

    def set_status_code(self, status: int) -> None:
        """Nothing to record."""

    def trace_context(self) -> str:
        """No context: claims carry no annotation."""
        return ""


NOOP_TRACER: Final = NoopGatewayTracer()


@contextlib.contextmanager
def _needs_opentelemetry() -> Iterator[None]:
    try:
        yield
    except ImportError as err:
        raise TracingError(
            f"--enable-tracing needs the OpenTelemetry packages ({err}); {INSTALL_HINT}"
        ) from err


def setup(
    *, enabled: bool, exporter_factory: Callable[[], SpanExporter] | None = None
) -> Callable[[], None]:
    """Install the process-wide OTLP tracer provider and W3C propagator when ``enabled``.

    Returns:
        A function that flushes and stops the provider (does nothing when disabled).

    Raises:
        TracingError: OpenTelemetry is not installed.
    """
    if not enabled:
        return lambda: None
    with _needs_opentelemetry():
        from kube_agent_sandbox.gateway import _otel
    return _otel.install_provider(exporter_factory)


def tracer_for(*, enabled: bool) -> GatewayTracer:
    """The tracer of the create handler: OpenTelemetry-backed when ``enabled``."""
    if not enabled:
        return NOOP_TRACER
    with _needs_opentelemetry():
        from kube_agent_sandbox.gateway import _otel
    return _otel.OTelGatewayTracer()
