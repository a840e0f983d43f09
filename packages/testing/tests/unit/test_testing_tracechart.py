"""The trace waterfall: tree order, the trace kept alone, the PNG, and the docs' own picture
(drawn from a real collector's output, committed beside it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kube_agent_sandbox.testing.otelcol import ExportedSpan, read_spans
from kube_agent_sandbox.testing.tracechart import (
    draw_waterfall,
    find_trace,
    keep_trace,
    trace_rows,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER = "0af7651916cd43dd8448eb211c80319c"


def span(name: str, span_id: str, parent: str = "", start: int = 0, **kw: object) -> ExportedSpan:
    return ExportedSpan(
        service=str(kw.get("service", "svc")),
        name=name,
        trace_id=str(kw.get("trace", TRACE)),
        span_id=span_id,
        parent_span_id=parent,
        kind=0,
        start_ns=start,
        end_ns=start + 1_000_000,
        status_code=int(str(kw.get("status", 0))),
    )


SPANS = [
    span("late child", "c2", "r", 30),
    span("root", "r", "", 0),
    span("grandchild", "g1", "c1", 20),
    span("early child", "c1", "r", 10),
    span("orphan", "o", "missing", 5),
    span("root", "x", "", 99, trace=OTHER),
]


def test_rows_are_in_tree_order_and_an_orphan_is_kept_as_a_root() -> None:
    rows = [(r.span.name, r.depth) for r in trace_rows(SPANS, TRACE)]
    assert rows == [
        ("root", 0),
        ("early child", 1),
        ("grandchild", 2),
        ("late child", 1),
        ("orphan", 0),
    ]


def test_the_latest_trace_with_that_root_is_found() -> None:
    assert find_trace(SPANS, "root") == OTHER
    with pytest.raises(ValueError, match=r"no root span named 'nope'; root spans: \['root'\]"):
        find_trace(SPANS, "nope")
    with pytest.raises(ValueError, match="no span of trace"):
        trace_rows(SPANS, "f" * 32)


def test_keep_trace_drops_the_other_traces_and_emptied_parts(tmp_path: Path) -> None:
    def resource(service: str, trace_id: str) -> dict[str, object]:
        attributes = [{"key": "service.name", "value": {"stringValue": service}}]
        spans = [{"traceId": trace_id.upper(), "spanId": "01", "name": service}]
        return {"resource": {"attributes": attributes}, "scopeSpans": [{"spans": spans}]}

    lines = [
        {"resourceSpans": [resource("a", TRACE), resource("b", OTHER)]},
        {"resourceSpans": [resource("c", OTHER)]},
    ]
    kept = keep_trace("\n".join(json.dumps(line) for line in lines) + "\n\n", TRACE)
    assert len(kept.splitlines()) == 1
    out = tmp_path / "kept.jsonl"
    out.write_text(kept)
    assert [(s.service, s.trace_id) for s in read_spans(out)] == [("a", TRACE)]


def test_the_waterfall_is_a_png(tmp_path: Path) -> None:
    rows = trace_rows([*SPANS, span("failed", "f", "r", 40, status=2)], TRACE)
    target = draw_waterfall(rows, tmp_path / "sub" / "trace.png", title="t")
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no span to draw"):
        draw_waterfall([], tmp_path / "empty.png", title="t")


DOCS_IMG = Path(__file__).resolve().parents[4] / "docs" / "observe" / "img"


def test_the_docs_trace_holds_the_whole_path_with_its_parents() -> None:
    """The committed trace behind the docs' picture is what the picture claims."""
    spans = read_spans(DOCS_IMG / "trace-e2b-gateway.otlp.jsonl")
    rows = trace_rows(spans, find_trace(spans, "app.create_sandbox"))
    assert len(rows) == len(spans)  # one trace, nothing else
    by_id = {r.span.span_id: r.span for r in rows}

    def parent(s: ExportedSpan) -> tuple[str, str]:
        p = by_id[s.parent_span_id]
        return p.service, p.name

    server = next(r.span for r in rows if r.span.name == "POST /sandboxes")
    assert parent(server) == ("e2b-app", "app.create_sandbox")
    reconciles = [r.span for r in rows if r.span.name.startswith("Reconcile")]
    assert {parent(s) for s in reconciles} == {("agent-sandbox-gateway", "create_claim")}
    assert any("SandboxReady" in s.events for s in reconciles)


def test_the_script_redraws_the_docs_picture(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[4] / "scripts" / "trace_waterfall.py"
    source = DOCS_IMG / "trace-e2b-gateway.otlp.jsonl"
    out = tmp_path / "again.png"

    def draw(root: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, str(script), str(source), "--root", root, "-o", str(out)]
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)

    done = draw("app.create_sandbox")
    assert done.returncode == 0, done.stderr
    assert "27 spans of trace" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = draw("nope")
    assert missing.returncode == 2
    assert "no root span named 'nope'" in missing.stderr
