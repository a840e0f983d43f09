"""Tracing of SDK calls (upstream's SandboxTracerConfig): spans, and the W3C context written on
the objects the SDK creates, read back from the OpenTelemetry SDK's in-memory exporter.

The API is not called: the client's request, wait and exec calls are replaced by recorders.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kube_agent_sandbox.sdk import (
    AsyncSandboxClient,
    ClusterConfig,
    ExecResult,
    NotFoundError,
    SandboxClient,
)
from kube_agent_sandbox.sdk._otel import OTelClientTracer
from kube_agent_sandbox.sdk.constants import TRACE_CONTEXT_ANNOTATION
from kube_agent_sandbox.sdk.tracing import (
    NOOP_TRACER,
    SandboxTracerConfig,
    command_executable,
    tracer_for,
)

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


class FakeSandbox:
    """Stands in for the Sandbox's Pod: the exec calls of a client, answered from a file map."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.argvs: list[list[str]] = []
        self.kill_on_timeout: list[bool] = []

    async def exec(self, name: str, command: Sequence[str], **kw: Any) -> ExecResult:
        argv = list(command)
        self.argvs.append(argv)
        self.kill_on_timeout.append(bool(kw.get("kill_on_timeout")))
        if argv[:2] == ["cat", "--"]:
            if argv[2] not in self.files:
                return ExecResult(1, b"", b"cat: no such file: No such file or directory")
            return ExecResult(0, self.files[argv[2]])
        if argv[:2] == ["test", "-e"]:
            return ExecResult(0 if argv[2] in self.files else 1)
        if argv[0] == "rm":
            del self.files[argv[-1]]
            return ExecResult(0)
        if argv[:2] == ["sh", "-c"] and argv[-1] == "/work":
            listing = "".join(f"{len(v)} 0 regular file|{k}\n" for k, v in self.files.items())
            return ExecResult(0, listing.encode())
        return ExecResult(3, b"out")

    @asynccontextmanager
    async def exec_session(
        self, name: str, command: Sequence[str], **kw: Any
    ) -> AsyncIterator[Any]:
        argv = list(command)
        self.argvs.append(argv)
        session = WriteSession()
        yield session
        self.files[argv[-1]] = b"".join(session.received)


class WriteSession:
    """An exec stream whose command reads stdin and exits 0."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.exit_code: int | None = None

    async def write(self, data: bytes) -> None:
        self.received.append(data)

    async def close_stdin(self) -> None:
        self.exit_code = 0

    async def read(self, *_: object) -> None:
        return None


def traced_client(
    tracer: OTelClientTracer, monkeypatch: pytest.MonkeyPatch, pod: FakeSandbox
) -> AsyncSandboxClient:
    client = AsyncSandboxClient(CONFIG, namespace="team")
    client._tracer = tracer
    monkeypatch.setattr(client, "exec", pod.exec)
    monkeypatch.setattr(client, "exec_session", pod.exec_session)
    return client


class TestSandboxCalls:
    """The calls upstream traces on a sandbox: ``run``, the file calls, ``delete_claim``."""

    async def test_run_records_the_program_and_the_exit_code(
        self,
        tracer: OTelClientTracer,
        exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        pod = FakeSandbox({})
        box = traced_client(tracer, monkeypatch, pod).sandbox("sb")
        result = await box.commands.run("TOKEN=s3cret /usr/bin/python3 -c 'print(1)'")
        assert result.exit_code == 3
        assert pod.argvs == [["sh", "-c", "TOKEN=s3cret /usr/bin/python3 -c 'print(1)'"]]
        assert pod.kill_on_timeout == [True]
        run = by_name(exporter)["sandbox-client.run"]
        assert dict(run.attributes or {}) == {
            "sandbox.name": "sb",
            "sandbox.command.executable": "python3",
            "sandbox.exit_code": 3,
        }

    async def test_file_calls_have_upstreams_spans_and_attributes(
        self,
        tracer: OTelClientTracer,
        exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        pod = FakeSandbox({})
        box = traced_client(tracer, monkeypatch, pod).sandbox("sb")
        await box.files.write("/work/a.txt", "hello")
        assert pod.files == {"/work/a.txt": b"hello"}
        assert await box.files.read("/work/a.txt") == b"hello"
        assert [e.name for e in await box.files.list("/work")] == ["a.txt"]
        assert await box.files.exists("/work/a.txt")
        await box.files.delete("/work/a.txt")
        assert pod.files == {}

        spans = exporter.get_finished_spans()
        attrs = [(s.name.removeprefix("sandbox-client."), dict(s.attributes or {})) for s in spans]
        on = {"sandbox.name": "sb", "sandbox.file.path": "/work/a.txt"}
        assert attrs == [
            ("write", {**on, "sandbox.file.size": 5}),
            ("read", {**on, "sandbox.file.size": 5}),
            ("list", {**on, "sandbox.file.path": "/work", "sandbox.file.count": 1}),
            ("exists", {**on, "sandbox.file.exists": True}),
            ("exists", {**on, "sandbox.file.exists": True}),  # delete's own check
            ("delete", on),
        ]
        by_id = {s.context.span_id: s.name for s in spans if s.context}
        check, delete = spans[4], spans[5]
        assert check.parent is not None
        assert by_id[check.parent.span_id] == "sandbox-client.delete"
        assert {s.parent for s in spans if s is not check} == {None}
        assert delete.context is not None

    async def test_a_failed_file_call_ends_its_span_with_the_error(
        self,
        tracer: OTelClientTracer,
        exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        box = traced_client(tracer, monkeypatch, FakeSandbox({})).sandbox("sb")
        with pytest.raises(NotFoundError):
            await box.files.read("/nope")
        read = by_name(exporter)["sandbox-client.read"]
        assert not read.status.is_ok
        assert [e.name for e in read.events] == ["exception"]
        assert "sandbox.file.size" not in (read.attributes or {})

    async def test_terminate_is_the_delete_claim_span(
        self,
        tracer: OTelClientTracer,
        exporter: InMemorySpanExporter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        client = AsyncSandboxClient(CONFIG)
        client._tracer = tracer
        deleted: list[str] = []

        async def delete(resource: Any, name: str, **kw: Any) -> None:
            deleted.append(f"{resource.kind}/{name}")

        monkeypatch.setattr(client, "_delete", delete)
        await client.sandbox("warm-1", claim_name="c1").terminate()
        await client.sandbox("sb").terminate()
        assert deleted == ["SandboxClaim/c1", "Sandbox/sb"]
        spans = by_name(exporter)
        assert dict(spans["sandbox-client.delete_claim"].attributes or {}) == {
            "sandbox.claim.name": "c1"
        }
        assert dict(spans["sandbox-client.delete_sandbox"].attributes or {}) == {
            "sandbox.name": "sb"
        }

    def test_without_tracing_the_calls_run_on_the_null_tracer(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        client = SandboxClient(CONFIG)
        assert client._tracer is NOOP_TRACER
        monkeypatch.setattr(client, "exec", lambda *a, **kw: ExecResult(0, b"hi"))
        assert client.sandbox("sb").commands.run("echo hi").stdout == "hi"
        assert client.file_exists("sb", "/x")


@pytest.mark.parametrize(
    ("command", "executable"),
    [
        ("python3 -c 'print(1)'", "python3"),
        ("/usr/local/bin/node app.js", "node"),
        ("A=1 B=2 ls -la", "ls"),
        ("  echo   hi ", "echo"),
        ("A=1", ""),
        ("", ""),
    ],
)
def test_command_executable_is_the_program_without_arguments(command: str, executable: str) -> None:
    assert command_executable(command) == executable


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
