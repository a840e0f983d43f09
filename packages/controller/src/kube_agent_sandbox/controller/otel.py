"""OpenTelemetry behind the controller's :class:`~kube_agent_sandbox.controller.tracing.Tracer`.

Imported only with ``--enable-tracing`` (OpenTelemetry is the optional ``tracing`` extra). As
upstream: one OTLP/gRPC exporter configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables,
``service.name`` ``agent-sandbox-controller``, the W3C TraceContext propagator only (no
baggage), and reconcile spans continued from an object's ``opentelemetry.io/trace-context``
annotation, a JSON map of W3C headers such as ``{"traceparent": "00-…-01"}``. An annotation
that cannot be used starts a new trace and is logged; it never fails a reconcile.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.tracer import (
    INSTALL_HINT,
    SERVICE_NAME,
    TRACER_NAME,
    Describe,
    Obj,
    TracingError,
)

__all__ = ["OTelTracer", "build_provider", "global_tracer", "install_provider"]

log = logging.getLogger(__name__)


class OTelTracer:
    """A :class:`~kube_agent_sandbox.controller.tracing.Tracer` recording OpenTelemetry spans.

    Args:
        tracer: Where spans go (the global provider's in production, a test provider's in
            tests).
    """

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._propagator = TraceContextTextMapPropagator()

    def object_span(
        self, name: str, obj: Obj, attributes: Describe
    ) -> AbstractContextManager[None]:
        """A span for reconciling ``obj``: a child of its annotation's context, else a root.

        Args:
            name: Span name.
            obj: The Kubernetes object (its annotations are read).
            attributes: Computes the span attributes from ``obj``.
        """
        return self._span(name, context=self._parent_context(obj), attributes=attributes(obj))

    def span(self, name: str) -> AbstractContextManager[None]:
        """A child span of the current one."""
        return self._span(name, context=None, attributes=None)

    def add_event(self, name: str, obj: Obj, attributes: Describe) -> None:
        """Record an event about ``obj`` on the current span (dropped when it is not recording)."""
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(name, dict(attributes(obj)))

    def trace_context(self) -> str:
        """The current span's W3C headers as compact JSON; empty outside a span."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        if not carrier:
            return ""
        return json.dumps(carrier, separators=(",", ":"), sort_keys=True)

    @contextlib.contextmanager
    def _span(
        self, name: str, *, context: Context | None, attributes: Mapping[str, str] | None
    ) -> Iterator[None]:
        with self._tracer.start_as_current_span(name, context=context, attributes=attributes):
            yield

    def _parent_context(self, obj: Obj) -> Context:
        """The context carried by ``obj``'s annotation; an empty one (new trace) otherwise."""
        meta = obj.get("metadata") or {}
        raw = (meta.get("annotations") or {}).get(c.ANNOTATION_TRACE_CONTEXT)
        if not raw:
            return Context()
        carrier, problem = _parse_carrier(raw)
        if carrier is not None:
            context = self._propagator.extract(carrier, context=Context())
            if trace.get_current_span(context).get_span_context().is_valid:
                return context
            problem = "no valid W3C traceparent in it"
        log.info(
            "ignoring the %s annotation of %s/%s: %s; starting a new trace",
            c.ANNOTATION_TRACE_CONTEXT,
            meta.get("namespace", ""),
            meta.get("name", ""),
            problem,
        )
        return Context()


def _parse_carrier(raw: object) -> tuple[dict[str, str] | None, str]:
    """The annotation as a header map, or None and why not (as Go's json into map[string]string)."""
    if not isinstance(raw, str):
        return None, "not a string"
    try:
        value = json.loads(raw)
    except ValueError as err:
        return None, f"not JSON ({err})"
    if not isinstance(value, dict):
        return None, f"not a JSON object but {type(value).__name__}"
    if not all(isinstance(v, str) for v in value.values()):
        return None, "a header value is not a string"
    return value, ""


def build_provider(
    exporter_factory: Callable[[], SpanExporter] | None = None,
) -> TracerProvider:
    """A tracer provider batching spans to the exporter, ``service.name`` set.

    Args:
        exporter_factory: Makes the exporter; the OTLP/gRPC one (configured by the
            ``OTEL_EXPORTER_OTLP_*`` variables) when None.
    """
    if exporter_factory is None:
        exporter_factory = _otlp_exporter
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(exporter_factory()))
    return provider


def _otlp_exporter() -> SpanExporter:
    # Imported here: it loads gRPC, which only the exporting process needs.
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def install_provider(
    *,
    timeout: float,
    exporter_factory: Callable[[], SpanExporter] | None = None,
) -> Callable[[], None]:
    """Build the provider within ``timeout`` seconds, then make it and W3C propagation global.

    Args:
        timeout: Seconds the provider may take to build (upstream allows 10).
        exporter_factory: As for :func:`build_provider`.

    Returns:
        A function that flushes pending spans and stops the provider.

    Raises:
        TracingError: building failed or took longer than ``timeout``.
    """
    built: list[TracerProvider] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def build() -> None:
        try:
            built.append(build_provider(exporter_factory))
        except BaseException as err:
            failed.append(err)
        finally:
            done.set()

    # A daemon thread: an exporter stuck connecting must not keep the process alive.
    threading.Thread(target=build, name="tracing-init", daemon=True).start()
    if not done.wait(timeout):
        raise TracingError(f"the tracer provider did not start within {timeout:g}s")
    if failed:
        error = failed[0]
        if isinstance(error, ImportError):  # the exporter of the ``tracing`` extra is missing
            raise TracingError(
                f"the OTLP exporter is not installed ({error})", hint=INSTALL_HINT
            ) from error
        raise TracingError(f"the tracer provider did not start: {error}") from error
    provider = built[0]
    trace.set_tracer_provider(provider)
    propagate.set_global_textmap(TraceContextTextMapPropagator())
    log.info("tracing enabled", extra={"serviceName": SERVICE_NAME})
    return provider.shutdown


def global_tracer() -> OTelTracer:
    """The controller's tracer from the global provider (set by :func:`install_provider`)."""
    return OTelTracer(trace.get_tracer(TRACER_NAME))
