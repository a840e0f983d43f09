"""OpenTelemetry behind :class:`~kube_agent_sandbox.sdk.tracing.ClientTracer`.

Imported only when a client enables tracing (OpenTelemetry is the SDK's ``tracing`` extra).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from kube_agent_sandbox.sdk.tracing import Attributes

__all__ = ["OTelClientTracer", "initialize_tracer", "trace_context_json"]

_PROPAGATOR = TraceContextTextMapPropagator()
_LOCK = threading.Lock()
_installed: list[TracerProvider] = []


def _otlp_exporter() -> SpanExporter:
    # gRPC is loaded only by a program that exports.
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def initialize_tracer(
    service_name: str, exporter_factory: Callable[[], SpanExporter] | None = None
) -> None:
    """Install the global tracer provider once (upstream's ``initialize_tracer``).

    A provider the program installed itself is kept: its spans go where it decided. Otherwise a
    provider batching to the OTLP exporter (``OTEL_EXPORTER_OTLP_*``) with ``service.name`` =
    ``service_name`` becomes global; it is flushed at exit by OpenTelemetry's own atexit hook.
    """
    with _LOCK:
        if _installed or isinstance(trace.get_tracer_provider(), TracerProvider):
            return
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor((exporter_factory or _otlp_exporter)()))
        trace.set_tracer_provider(provider)
        _installed.append(provider)


def trace_context_json() -> str:
    """The current context's W3C headers (``traceparent``, ``tracestate``) as compact JSON."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return json.dumps(carrier, separators=(",", ":"), sort_keys=True) if carrier else ""


class OTelClientTracer:
    """Spans ``<service>.<operation>`` from the global provider.

    Args:
        service_name: prefix of span names; the instrumentation scope is it with ``-`` → ``_``
            (as upstream's ``TracerManager``).
        provider: where spans go (tests); the global provider when None.
    """

    def __init__(self, service_name: str, provider: trace.TracerProvider | None = None) -> None:
        self._prefix = service_name
        scope = service_name.replace("-", "_")
        self._tracer = (
            provider.get_tracer(scope) if provider is not None else trace.get_tracer(scope)
        )

    def span(
        self, operation: str, attributes: Attributes | None = None
    ) -> AbstractContextManager[None]:
        """A span ``<service>.<operation>``, child of the current one; errors are recorded."""
        return self._span(f"{self._prefix}.{operation}", attributes)

    @contextmanager
    def _span(self, name: str, attributes: Attributes | None) -> Iterator[None]:
        with self._tracer.start_as_current_span(name, attributes=dict(attributes or {})):
            yield

    def set_attributes(self, attributes: Attributes) -> None:
        """Set attributes on the current span (when it records)."""
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(dict(attributes))

    def trace_context(self) -> str:
        """The current W3C context as the annotation's JSON."""
        return trace_context_json()
