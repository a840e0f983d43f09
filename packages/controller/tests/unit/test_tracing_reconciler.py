"""Tracing of Sandbox reconciles (upstream v0.5.6 Reconcile and reconcilePod spans).

The reconciler runs against the fake API server with an OpenTelemetry SDK tracer whose spans
land in an in-memory exporter, so names, attributes, parenting and events are read back from
real spans.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sandbox_fakes import FakeCluster, hash_label, make_pod, make_sandbox, request

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.otel import OTelTracer
from kube_agent_sandbox.controller.runtime import ApiError
from kube_agent_sandbox.controller.sandbox.errors import SandboxReconcileError

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"
ANNOTATION = json.dumps({"traceparent": TRACEPARENT})


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> OTelTracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OTelTracer(provider.get_tracer("agent-sandbox-controller"))


def _spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def _only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    spans = _spans(exporter, name)
    assert len(spans) == 1, [s.name for s in exporter.get_finished_spans()]
    return spans[0]


def _trace_patches(cluster: FakeCluster) -> list[Any]:
    return [
        call
        for call in cluster.writes(SANDBOXES)
        if call.verb == "patch"
        and c.ANNOTATION_TRACE_CONTEXT
        in ((call.body or {}).get("metadata") or {}).get("annotations", {})
    ]


def _stored_annotation(cluster: FakeCluster) -> str | None:
    sandbox = cluster.obj(SANDBOXES, "sandbox-name")
    assert sandbox is not None
    value = (sandbox["metadata"].get("annotations") or {}).get(c.ANNOTATION_TRACE_CONTEXT)
    return None if value is None else str(value)


class TestSpans:
    async def test_reconcile_span_continues_the_annotated_trace(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_TRACE_CONTEXT: ANNOTATION}))
        await cluster.reconciler(tracer=tracer).reconcile(request())

        root = _only(exporter, "ReconcileSandbox")
        assert root.parent is not None
        assert f"{root.parent.trace_id:032x}" == TRACE_ID
        assert f"{root.parent.span_id:016x}" == PARENT_SPAN_ID
        assert root.parent.is_remote
        assert f"{root.context.trace_id:032x}" == TRACE_ID
        assert dict(root.attributes or {}) == {
            "sandbox.name": "sandbox-name",
            "sandbox.namespace": "default",
        }

    async def test_child_spans_and_new_pod_event(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_TRACE_CONTEXT: ANNOTATION}))
        await cluster.reconciler(tracer=tracer).reconcile(request())

        root = _only(exporter, "ReconcileSandbox")
        pvcs = _only(exporter, "reconcilePVCs")
        pod_span = _only(exporter, "reconcilePod")
        for child in (pvcs, pod_span):
            assert child.parent is not None
            assert child.parent.span_id == root.context.span_id
            assert child.context.trace_id == root.context.trace_id
        assert [(e.name, dict(e.attributes or {})) for e in pod_span.events] == [
            ("NewPodStatusObserved", {"pod.Name": "sandbox-name", "pod.Phase": "Pending"})
        ]
        assert not root.events
        assert not pvcs.events

    async def test_existing_pod_event_carries_its_phase(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_TRACE_CONTEXT: ANNOTATION}))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), phase="Running"))
        await cluster.reconciler(tracer=tracer).reconcile(request())

        events = _only(exporter, "reconcilePod").events
        assert [(e.name, dict(e.attributes or {})) for e in events] == [
            ("ExistingPodStatusObserved", {"pod.Name": "sandbox-name", "pod.Phase": "Running"})
        ]

    async def test_the_pass_that_sees_the_pod_ready_records_sandbox_ready(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_TRACE_CONTEXT: ANNOTATION}))
        reconciler = cluster.reconciler(tracer=tracer)
        await reconciler.reconcile(request())  # creates the pod, not ready yet
        assert all(e.name != "SandboxReady" for e in _only(exporter, "ReconcileSandbox").events)
        exporter.clear()
        cluster.set_pod_status("sandbox-name")
        await reconciler.reconcile(request())
        root = _only(exporter, "ReconcileSandbox")
        assert root.parent is not None
        assert f"{root.parent.span_id:016x}" == PARENT_SPAN_ID
        assert [(e.name, dict(e.attributes or {})) for e in root.events] == [
            ("SandboxReady", {"sandbox.name": "sandbox-name", "pod.Name": "sandbox-name"})
        ]
        exporter.clear()
        await reconciler.reconcile(request())  # already Ready: no second event
        assert not _only(exporter, "ReconcileSandbox").events

    @pytest.mark.parametrize(
        ("label", "expected"),
        [
            ("python-client", "python-client"),
            ("go-client", "go-client"),
            ("controller", "controller"),
            ("someone-else", "unknown"),
            ("", "unknown"),
        ],
    )
    async def test_created_by_is_normalized(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter, label: str, expected: str
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(labels={c.LABEL_CREATED_BY: label}))
        await cluster.reconciler(tracer=tracer).reconcile(request())

        attributes = dict(_only(exporter, "ReconcileSandbox").attributes or {})
        assert attributes[c.LABEL_CREATED_BY] == expected

    async def test_terminating_sandbox_gets_a_span_and_no_writes(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        sandbox = make_sandbox()
        sandbox["metadata"]["deletionTimestamp"] = "2026-01-02T03:04:05Z"
        sandbox["metadata"]["finalizers"] = ["example.com/hold"]
        cluster.add(SANDBOXES, sandbox)
        cluster.clear_calls()
        await cluster.reconciler(tracer=tracer).reconcile(request())

        assert _only(exporter, "ReconcileSandbox").parent is None
        assert not _spans(exporter, "reconcilePod")
        assert cluster.writes() == []

    async def test_missing_sandbox_makes_no_span(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        await FakeCluster().reconciler(tracer=tracer).reconcile(request())
        assert exporter.get_finished_spans() == ()


class TestMalformedAnnotation:
    @pytest.mark.parametrize(
        ("value", "problem"),
        [
            ("not json", "not JSON"),
            ("{", "not JSON"),
            ('["00-x"]', "not a JSON object but list"),
            ('"traceparent"', "not a JSON object but str"),
            ("42", "not a JSON object but int"),
            ("null", "not a JSON object but NoneType"),
            ('{"traceparent": 5}', "a header value is not a string"),
            ('{"traceparent": ["a"]}', "a header value is not a string"),
            ('{"traceparent": "garbage"}', "no valid W3C traceparent"),
            (json.dumps({"traceparent": f"00-{'0' * 32}-{PARENT_SPAN_ID}-01"}), "no valid W3C"),
            ("{}", "no valid W3C traceparent"),
        ],
    )
    async def test_starts_a_new_trace_and_logs(
        self,
        tracer: OTelTracer,
        exporter: InMemorySpanExporter,
        caplog: pytest.LogCaptureFixture,
        value: str,
        problem: str,
    ) -> None:
        caplog.set_level(logging.INFO, logger="kube_agent_sandbox.controller.otel")
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_TRACE_CONTEXT: value}))
        await cluster.reconciler(tracer=tracer).reconcile(request())

        root = _only(exporter, "ReconcileSandbox")
        assert root.parent is None
        assert f"{root.context.trace_id:032x}" != TRACE_ID
        assert cluster.obj(PODS, "sandbox-name") is not None  # the reconcile went on
        messages = [
            r.getMessage() for r in caplog.records if r.name == "kube_agent_sandbox.controller.otel"
        ]
        assert len(messages) == 1
        assert c.ANNOTATION_TRACE_CONTEXT in messages[0]
        assert "default/sandbox-name" in messages[0]
        assert problem in messages[0]
        # A present (if unusable) annotation is left alone, as upstream does.
        assert _trace_patches(cluster) == []
        assert _stored_annotation(cluster) == value


class TestPersistedContext:
    async def test_sandbox_without_annotation_gets_the_reconcile_context(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        await cluster.reconciler(tracer=tracer).reconcile(request())

        root = _only(exporter, "ReconcileSandbox")
        assert root.parent is None
        ctx = root.context
        expected = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
        patches = _trace_patches(cluster)
        assert len(patches) == 1
        assert patches[0].body == {
            "metadata": {
                "annotations": {c.ANNOTATION_TRACE_CONTEXT: f'{{"traceparent":"{expected}"}}'}
            }
        }
        stored = _stored_annotation(cluster)
        assert stored is not None
        assert json.loads(stored) == {"traceparent": expected}

    async def test_empty_annotation_counts_as_missing(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_TRACE_CONTEXT: ""}))
        await cluster.reconciler(tracer=tracer).reconcile(request())

        assert len(_trace_patches(cluster)) == 1
        stored = _stored_annotation(cluster)
        assert stored is not None
        assert "traceparent" in json.loads(stored)

    async def test_next_reconciles_continue_the_persisted_trace_without_writing_it(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        rec = cluster.reconciler(tracer=tracer)
        await rec.reconcile(request())
        first = _only(exporter, "ReconcileSandbox")
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        await rec.reconcile(request())

        later = _spans(exporter, "ReconcileSandbox")[1:]
        assert len(later) == 2
        for span in later:
            assert span.parent is not None
            assert span.parent.span_id == first.context.span_id
            assert span.context.trace_id == first.context.trace_id
        assert len(_trace_patches(cluster)) == 1

    async def test_converged_traced_sandbox_makes_no_api_calls(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        rec = cluster.reconciler(tracer=tracer)
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        cluster.clear_calls()
        await rec.reconcile(request())
        assert cluster.calls == []

    async def test_patch_failure_is_retried_before_anything_else(
        self, tracer: OTelTracer, exporter: InMemorySpanExporter
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.fail("patch", "sandboxes", ApiError(500, "InternalError", "boom"))
        rec = cluster.reconciler(tracer=tracer)
        with pytest.raises(SandboxReconcileError, match="failed to persist trace context: boom"):
            await rec.reconcile(request())
        assert cluster.obj(PODS, "sandbox-name") is None
        assert _stored_annotation(cluster) is None
        assert _only(exporter, "ReconcileSandbox").status.status_code.name == "ERROR"

        await rec.reconcile(request())
        assert _stored_annotation(cluster) is not None
        assert cluster.obj(PODS, "sandbox-name") is not None


class TestTracingOff:
    async def test_no_annotation_is_written(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())

        assert _trace_patches(cluster) == []
        assert _stored_annotation(cluster) is None

    async def test_converged_sandbox_without_annotation_makes_no_api_calls(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(service=True))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        cluster.clear_calls()
        await rec.reconcile(request())
        assert cluster.calls == []
        assert _stored_annotation(cluster) is None

    async def test_malformed_annotation_is_never_parsed(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.DEBUG)
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_TRACE_CONTEXT: "{"}))
        await cluster.reconciler().reconcile(request())
        assert not [r for r in caplog.records if c.ANNOTATION_TRACE_CONTEXT in r.getMessage()]
        assert cluster.obj(PODS, "sandbox-name") is not None
