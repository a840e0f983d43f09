"""Turning tracing on and off (``--enable-tracing``, upstream v0.5.6
cmd/agent-sandbox-controller/main.go).

Covers the no-op tracer, the tracer provider's start (and its failures), and what the process
does when ``--enable-tracing`` is given without the OpenTelemetry packages, simulated by making
their import fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import kube_agent_sandbox.controller as controller_package
from kube_agent_sandbox.controller import app, otel, tracing
from kube_agent_sandbox.controller.cli import main
from kube_agent_sandbox.controller.config import parse_args
from kube_agent_sandbox.controller.runtime import Obj


def _never_called(obj: Obj) -> dict[str, str]:
    raise AssertionError("a disabled tracer computed attributes")


@pytest.fixture
def without_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import opentelemetry...`` fail as it does when the extra is not installed."""
    for name in list(sys.modules):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "kube_agent_sandbox.controller.otel")
    # ``from package import module`` looks at the package attribute first.
    monkeypatch.delattr(controller_package, "otel")


class TestDisabled:
    def test_tracer_is_the_shared_no_op(self) -> None:
        assert tracing.tracer_for(enabled=False) is tracing.NOOP_TRACER

    def test_no_op_tracer_does_nothing(self) -> None:
        noop = tracing.NOOP_TRACER
        with (
            noop.object_span("ReconcileSandbox", {"metadata": {}}, _never_called),
            noop.span("reconcilePod"),
        ):
            noop.add_event("NewPodStatusObserved", {}, _never_called)
            assert noop.trace_context() == ""

    def test_setup_installs_nothing(self) -> None:
        shutdown = tracing.setup(enabled=False)
        shutdown()
        assert app.setup_tracing(parse_args([])) is shutdown

    def test_controller_modules_do_not_load_opentelemetry(self) -> None:
        script = (
            "import sys\n"
            "import kube_agent_sandbox.controller.app\n"
            "import kube_agent_sandbox.controller.sandbox.setup\n"
            "from kube_agent_sandbox.controller import tracing\n"
            "tracing.tracer_for(enabled=False)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry'))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]"

    def test_disabled_works_without_opentelemetry(self, without_opentelemetry: None) -> None:
        assert tracing.tracer_for(enabled=False) is tracing.NOOP_TRACER
        tracing.setup(enabled=False)()


class TestMissingPackages:
    def test_setup_raises_a_clear_error(self, without_opentelemetry: None) -> None:
        with pytest.raises(tracing.TracingError) as caught:
            tracing.setup(enabled=True)
        assert caught.value.message == "unable to initialize tracing"
        assert "OpenTelemetry packages" in caught.value.reason
        assert caught.value.hint == "install kube-agent-sandbox-controller[tracing]"
        assert isinstance(caught.value.__cause__, ImportError)

    def test_tracer_for_raises_the_same(self, without_opentelemetry: None) -> None:
        with pytest.raises(tracing.TracingError, match="not installed"):
            tracing.tracer_for(enabled=True)

    def test_startup_step_fails(self, without_opentelemetry: None) -> None:
        with pytest.raises(app.StartupError) as caught:
            app.setup_tracing(parse_args(["--enable-tracing"]))
        assert caught.value.message == "unable to initialize tracing"
        assert caught.value.exit_code == 1
        assert caught.value.fields["hint"] == "install kube-agent-sandbox-controller[tracing]"
        assert "not installed" in caught.value.fields["error"]

    def test_cli_exits_1_with_the_reason(
        self, without_opentelemetry: None, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["--enable-tracing", "--leader-elect=false"]) == 1
        lines = [
            json.loads(line)
            for line in capsys.readouterr().err.splitlines()
            if line.startswith("{")
        ]
        error = lines[-1]
        assert error["level"] == "error"
        assert error["msg"] == "unable to initialize tracing"
        assert error["hint"] == "install kube-agent-sandbox-controller[tracing]"
        assert "OpenTelemetry packages" in error["error"]


class TestProviderStart:
    def test_provider_names_the_service(self) -> None:
        exporter = InMemorySpanExporter()
        provider = otel.build_provider(lambda: exporter)
        try:
            assert provider.resource.attributes["service.name"] == "agent-sandbox-controller"
            with provider.get_tracer(tracing.TRACER_NAME).start_as_current_span("s"):
                pass
            provider.force_flush()
            (span,) = exporter.get_finished_spans()
            assert span.instrumentation_scope is not None
            assert span.instrumentation_scope.name == "agent-sandbox-controller"
        finally:
            provider.shutdown()

    def test_exporter_failure_is_a_tracing_error(self) -> None:
        def broken() -> SpanExporter:
            raise ValueError("bad OTEL_EXPORTER_OTLP_CERTIFICATE")

        with pytest.raises(tracing.TracingError, match="bad OTEL_EXPORTER_OTLP_CERTIFICATE"):
            otel.install_provider(timeout=10, exporter_factory=broken)

    def test_missing_exporter_package_gets_the_install_hint(self) -> None:
        def missing() -> SpanExporter:
            raise ModuleNotFoundError("No module named 'opentelemetry.exporter'")

        with pytest.raises(tracing.TracingError) as caught:
            otel.install_provider(timeout=10, exporter_factory=missing)
        assert "not installed" in caught.value.reason
        assert caught.value.hint == "install kube-agent-sandbox-controller[tracing]"

    @pytest.fixture
    def release(self) -> Iterator[threading.Event]:
        event = threading.Event()
        yield event
        event.set()

    def test_stuck_start_is_a_tracing_error(self, release: threading.Event) -> None:
        def stuck() -> SpanExporter:
            release.wait()
            return InMemorySpanExporter()

        with pytest.raises(tracing.TracingError, match=r"did not start within 0\.01s"):
            otel.install_provider(timeout=0.01, exporter_factory=stuck)

    def test_enabled_process_exports_with_w3c_propagation_only(self) -> None:
        """In a fresh interpreter, as the global provider can be set only once per process."""
        script = textwrap.dedent(
            """
            import json
            from opentelemetry import propagate, trace
            from kube_agent_sandbox.controller import tracing
            from kube_agent_sandbox.controller.otel import OTelTracer

            shutdown = tracing.setup(enabled=True)
            provider = trace.get_tracer_provider()
            tracer = tracing.tracer_for(enabled=True)
            exporter = provider._active_span_processor._span_processors[0].span_exporter
            with tracer.span("probe"):
                context = tracer.trace_context()
            print(json.dumps({
                "provider": type(provider).__module__ + "." + type(provider).__name__,
                "service": provider.resource.attributes["service.name"],
                "fields": sorted(propagate.get_global_textmap().fields),
                "tracer": isinstance(tracer, OTelTracer),
                "exporter": type(exporter).__module__,
                "endpoint": exporter._endpoint,
                "insecure": exporter._insecure,
                "context": json.loads(context),
            }))
            shutdown()
            """
        )
        env = {
            "PATH": "/usr/bin:/bin",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_BSP_EXPORT_TIMEOUT": "100",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        }
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["provider"] == "opentelemetry.sdk.trace.TracerProvider"
        assert report["service"] == "agent-sandbox-controller"
        assert report["fields"] == ["traceparent", "tracestate"]  # no baggage
        assert report["tracer"] is True
        assert report["exporter"].startswith("opentelemetry.exporter.otlp.proto.grpc")
        assert report["endpoint"] == "127.0.0.1:9"
        assert report["insecure"] is True
        assert list(report["context"]) == ["traceparent"]
