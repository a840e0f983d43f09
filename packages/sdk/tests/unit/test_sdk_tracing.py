"""Tracing of SDK calls (upstream's SandboxTracerConfig): spans, and the W3C context written on
the objects the SDK creates, read back from the OpenTelemetry SDK's in-memory exporter.

The API is not called: the client's request and wait calls are replaced by recorders.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kube_agent_sandbox.sdk import AsyncSandboxClient, ClusterConfig, SandboxClient
from kube_agent_sandbox.sdk._otel import OTelClientTracer
from kube_agent_sandbox.sdk.constants import TRACE_CONTEXT_ANNOTATION
from kube_agent_sandbox.sdk.tracing import NOOP_TRACER, SandboxTracerConfig, tracer_for

CONFIG = ClusterConfig("https://127.0.0.1:1", verify=False)
SANDBOX = {"spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> OTelClientTracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OTelClientTracer("sandbox-client", provider=provider)


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    spans = exporter.get_finished_spans()
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [s.name for s in spans]
    return named


def traceparent_of(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


class Recorder:
    """Stands in for the API: records created bodies, answers as the API server would."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(json.loads(json.dumps(body)))
        meta = dict(body["metadata"])
        meta.setdefault("name", "sandbox-abc")
        return {**body, "metadata": meta}


def bound_claim(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "sandbox": {"name": "warm-1"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


class TestConfig:
    def test_defaults_are_upstreams(self) -> None:
        config = SandboxTracerConfig()
        assert config.enable_tracing is False
        assert config.trace_service_name == "sandbox-client"

    def test_tracing_off_is_the_noop_tracer(self) -> None:
        assert tracer_for(None) is NOOP_TRACER
        assert tracer_for(SandboxTracerConfig()) is NOOP_TRACER
        assert NOOP_TRACER.trace_context() == ""
        assert SandboxClient(CONFIG)._tracer is NOOP_TRACER


class TestClaimSandbox:
    async def test_one_trace_with_the_create_spans_context_on_the_claim(
        self,
        tracer: OTelClientTracer,
        exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        client = AsyncSandboxClient(CONFIG, namespace="team")
        client._tracer = tracer
        api = Recorder()

        async def request(method: str, resource: Any, ns: str, **kw: Any) -> dict[str, Any]:
            return api.answer(kw["body"])

        async def wait_claim_ready(name: str, **kw: Any) -> dict[str, Any]:
            return bound_claim(name)

        monkeypatch.setattr(client, "_request", request)
        monkeypatch.setattr(client, "wait_claim_ready", wait_claim_ready)
        handle = await client.claim_sandbox("pool", name="my-claim")
        assert handle.name == "warm-1"

        spans = by_name(exporter)
        call = spans["sandbox-client.claim_sandbox"]
        create = spans["sandbox-client.create_claim"]
        wait = spans["sandbox-client.wait_for_claim_ready"]
        assert call.parent is None
        assert create.parent is not None
        assert wait.parent is not None
        assert call.context is not None
        assert create.parent.span_id == call.context.span_id
        assert wait.parent.span_id == call.context.span_id
        assert {s.context.trace_id for s in spans.values() if s.context} == {call.context.trace_id}
        assert create.attributes is not None
        assert create.attributes["sandbox.claim.name"] == "my-claim"
        assert call.attributes is not None
        assert call.attributes["sandbox.name"] == "warm-1"

        (claim,) = api.created
        annotation = json.loads(claim["metadata"]["annotations"][TRACE_CONTEXT_ANNOTATION])
        assert annotation == {"traceparent": traceparent_of(create)}
        # the SDK's own annotations stay
        assert "agents.x-k8s.io/client-first-requested-at" in claim["metadata"]["annotations"]

    async def test_a_failed_wait_ends_the_spans_with_the_error(
        self,
        tracer: OTelClientTracer,
        exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        client = AsyncSandboxClient(CONFIG)
        client._tracer = tracer
        api = Recorder()

        async def request(method: str, resource: Any, ns: str, **kw: Any) -> dict[str, Any]:
            return api.answer(kw["body"]) if method == "POST" else {}

        async def wait_claim_ready(name: str, **kw: Any) -> dict[str, Any]:
            raise TimeoutError("not ready")

        async def delete(*args: Any, **kw: Any) -> None:
            return None

        monkeypatch.setattr(client, "_request", request)
        monkeypatch.setattr(client, "wait_claim_ready", wait_claim_ready)
        monkeypatch.setattr(client, "_delete", delete)
        with pytest.raises(TimeoutError):
            await client.claim_sandbox("pool")
        spans = by_name(exporter)
        wait = spans["sandbox-client.wait_for_claim_ready"]
        assert not wait.status.is_ok
        assert [e.name for e in wait.events] == ["exception"]

    def test_create_claim_alone_annotates_too(
        self,
        tracer: OTelClientTracer,
        exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        client = SandboxClient(CONFIG)
        client._tracer = tracer
        api = Recorder()
        monkeypatch.setattr(client, "_request", lambda *a, **kw: api.answer(kw["body"]))
        client.create_claim("pool", name="c1")
        create = by_name(exporter)["sandbox-client.create_claim"]
        annotation = api.created[0]["metadata"]["annotations"][TRACE_CONTEXT_ANNOTATION]
        assert json.loads(annotation)["traceparent"] == traceparent_of(create)

    def test_without_tracing_no_annotation_and_no_span(
        self, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        client = SandboxClient(CONFIG)
        api = Recorder()
        monkeypatch.setattr(client, "_request", lambda *a, **kw: api.answer(kw["body"]))
        monkeypatch.setattr(client, "wait_claim_ready", lambda name, **kw: bound_claim(name))
        client.claim_sandbox("pool")
        assert TRACE_CONTEXT_ANNOTATION not in api.created[0]["metadata"]["annotations"]
        assert exporter.get_finished_spans() == ()


class TestCreateSandbox:
    def test_the_sandbox_carries_the_create_spans_context(
        self,
        tracer: OTelClientTracer,
        exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        client = SandboxClient(CONFIG)
        client._tracer = tracer
        api = Recorder()
        monkeypatch.setattr(client, "_request", lambda *a, **kw: api.answer(kw["body"]))
        monkeypatch.setattr(client, "wait_ready", lambda *a, **kw: {})
        client.create_sandbox(SANDBOX, name="sb")
        spans = by_name(exporter)
        create = spans["sandbox-client.create_sandbox"]
        wait = spans["sandbox-client.wait_for_sandbox_ready"]
        assert create.context is not None
        assert wait.parent is not None
        assert wait.parent.span_id == create.context.span_id
        annotation = api.created[0]["metadata"]["annotations"][TRACE_CONTEXT_ANNOTATION]
        assert json.loads(annotation) == {"traceparent": traceparent_of(create)}


def test_enabled_tracing_keeps_a_provider_the_program_installed() -> None:
    """``tracer_for`` installs the OTLP provider only when the program has none (fresh process)."""
    probe = """
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from kube_agent_sandbox.sdk.tracing import SandboxTracerConfig, tracer_for

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
tracer = tracer_for(SandboxTracerConfig(enable_tracing=True, trace_service_name="my-app"))
with tracer.span("create_claim"):
    context = json.loads(tracer.trace_context())
(span,) = exporter.get_finished_spans()
assert trace.get_tracer_provider() is provider
print(json.dumps([span.name, span.instrumentation_scope.name, sorted(context)]))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(done.stdout) == ["my-app.create_claim", "my_app", ["traceparent"]]


def test_enabled_tracing_installs_an_otlp_provider_named_after_the_service() -> None:
    probe = """
import json
from opentelemetry import trace
from kube_agent_sandbox.sdk.tracing import SandboxTracerConfig, tracer_for

tracer_for(SandboxTracerConfig(enable_tracing=True, trace_service_name="my-app"))
provider = trace.get_tracer_provider()
processor = provider._active_span_processor._span_processors[0]
exporter = processor._batch_processor._exporter
print(json.dumps([provider.resource.attributes["service.name"], type(exporter).__module__]))
"""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    assert json.loads(done.stdout) == [
        "my-app",
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    ]
