"""OpenTelemetry behind :class:`~kube_agent_sandbox.gateway.tracing.GatewayTracer`.

Imported only with ``--enable-tracing``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from kube_agent_sandbox.gateway.tracing import SERVICE_NAME, Attributes

__all__ = ["OTelGatewayTracer", "install_provider"]

_PROPAGATOR = TraceContextTextMapPropagator()


def _otlp_exporter() -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def install_provider(
    exporter_factory: Callable[[], SpanExporter] | None = None,
) -> Callable[[], None]:
    """Make a batching OTLP provider (``service.name`` set) and W3C propagation global."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor((exporter_factory or _otlp_exporter)()))
    trace.set_tracer_provider(provider)
    propagate.set_global_textmap(TraceContextTextMapPropagator())
    return provider.shutdown


class OTelGatewayTracer:
    """Spans of the gateway's creates.

    Args:
        provider: where spans go (tests); the global provider when None.
    """

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        source = provider if provider is not None else trace.get_tracer_provider()
        self._tracer = source.get_tracer(SERVICE_NAME)

    def server_span(
        self, name: str, headers: Mapping[str, str], attributes: Attributes
    ) -> AbstractContextManager[None]:
        """A SERVER span, child of the request's ``traceparent`` (a root without one)."""
        carrier = {k: headers[k] for k in ("traceparent", "tracestate") if k in headers}
        parent = _PROPAGATOR.extract(carrier, context=Context())
        return self._span(name, parent, SpanKind.SERVER, attributes)

    def span(self, name: str, attributes: Attributes | None = None) -> AbstractContextManager[None]:
        """An INTERNAL child of the current span."""
        return self._span(name, None, SpanKind.INTERNAL, attributes)

    @contextmanager
    def _span(
        self, name: str, parent: Context | None, kind: SpanKind, attributes: Attributes | None
    ) -> Iterator[None]:
        with self._tracer.start_as_current_span(
            name, context=parent, kind=kind, attributes=dict(attributes or {})
        ):
            yield

    def set_status_code(self, status: int) -> None:
        """``http.response.status_code`` on the current span; a 5xx sets the span's error."""
        span = trace.get_current_span()
        if not span.is_recording():
            return
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))

    def trace_context(self) -> str:
        """The current span's W3C headers as compact JSON."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return json.dumps(carrier, separators=(",", ":"), sort_keys=True) if carrier else ""
