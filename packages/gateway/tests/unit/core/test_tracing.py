"""Tracing of creates: the caller's traceparent continued in a server span, its create_claim
child's context on the SandboxClaim; spans read back from the OpenTelemetry SDK's in-memory
exporter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from controlplane_helpers import create_sandbox
from gateway_fakes import Gateway, claim_of
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.gateway import cli, tracing
from kube_agent_sandbox.gateway._otel import OTelGatewayTracer

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


@pytest.fixture
def exporter(gateway: Gateway) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gateway.state.tracer = OTelGatewayTracer(provider)
    return exporter


def spans_by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


async def test_a_create_continues_the_callers_trace_down_to_the_claim(
    gateway: Gateway, exporter: InMemorySpanExporter
) -> None:
    sid = await create_sandbox(gateway, traceparent=TRACEPARENT, tracestate="vendor=1")
    spans = spans_by_name(exporter)
    server = spans["POST /sandboxes"]
    create = spans["create_claim"]
    wait = spans["wait_for_claim_ready"]
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None
    assert server.parent.span_id == int(CALLER_SPAN, 16)
    assert server.parent.is_remote
    assert {f"{s.context.trace_id:032x}" for s in spans.values() if s.context} == {TRACE_ID}
    assert create.parent is not None
    assert create.parent.span_id == span_id(server)
    assert wait.parent is not None
    assert wait.parent.span_id == span_id(server)
    assert server.attributes is not None
    assert server.attributes["http.response.status_code"] == 201
    assert server.attributes["url.path"] == "/v2/sandboxes"
    assert create.attributes is not None
    assert create.attributes["sandbox.claim.name"] == sid

    annotation = claim_of(gateway.api, sid)["metadata"]["annotations"][c.ANNOTATION_TRACE_CONTEXT]
    carrier = json.loads(annotation)
    assert carrier["traceparent"].startswith(f"00-{TRACE_ID}-{span_id(create):016x}-")
    assert carrier["tracestate"] == "vendor=1"


async def test_without_a_traceparent_the_create_starts_a_trace(
    gateway: Gateway, exporter: InMemorySpanExporter
) -> None:
    sid = await create_sandbox(gateway)
    server = spans_by_name(exporter)["POST /sandboxes"]
    assert server.parent is None
    assert server.context is not None
    annotation = claim_of(gateway.api, sid)["metadata"]["annotations"][c.ANNOTATION_TRACE_CONTEXT]
    assert json.loads(annotation)["traceparent"].split("-")[1] == f"{server.context.trace_id:032x}"


async def test_a_failed_create_marks_the_server_span(
    gateway: Gateway, exporter: InMemorySpanExporter
) -> None:
    response = await gateway.client.post(
        "/v2/sandboxes", json={"templateID": "nope"}, headers=gateway.headers()
    )
    assert response.status_code == 404
    server = spans_by_name(exporter)["POST /sandboxes"]
    assert server.attributes is not None
    assert server.attributes["http.response.status_code"] == 404
    assert server.status.status_code is not StatusCode.ERROR  # a client error, not the gateway's


async def test_tracing_off_writes_no_annotation(gateway: Gateway) -> None:
    assert gateway.state.tracer is tracing.NOOP_TRACER
    sid = await create_sandbox(gateway, traceparent=TRACEPARENT)
    annotations = claim_of(gateway.api, sid)["metadata"]["annotations"]
    assert c.ANNOTATION_TRACE_CONTEXT not in annotations


def test_the_flag_and_the_environment_turn_tracing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cli.TRACING_ENV, raising=False)
    assert not cli.options_from_args(cli.build_parser().parse_args(["serve"])).enable_tracing
    args = cli.build_parser().parse_args(["serve", "--enable-tracing"])
    assert cli.options_from_args(args).enable_tracing
    monkeypatch.setenv(cli.TRACING_ENV, "true")
    assert cli.options_from_args(cli.build_parser().parse_args(["serve"])).enable_tracing


def test_setup_off_imports_nothing_and_on_installs_the_service_name() -> None:
    """In a fresh interpreter: the global provider is set once per process."""
    probe = """
import sys
from kube_agent_sandbox.gateway import tracing
assert tracing.tracer_for(enabled=False) is tracing.NOOP_TRACER
tracing.setup(enabled=False)()
assert not any(m.startswith("opentelemetry") for m in sys.modules), "imported when off"
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
stop = tracing.setup(enabled=True, exporter_factory=lambda: exporter)
with tracing.tracer_for(enabled=True).span("x"):
    pass
stop()
(span,) = exporter.get_finished_spans()
print(span.resource.attributes["service.name"], span.instrumentation_scope.name)
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["agent-sandbox-gateway", "agent-sandbox-gateway"]
