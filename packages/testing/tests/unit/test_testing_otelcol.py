"""The collector helper's reading of the file exporter's OTLP JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

from kube_agent_sandbox.testing.otelcol import ExportedSpan, read_spans


def test_spans_are_flattened_with_their_service(tmp_path: Path) -> None:
    batch = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "svc"},
                        "spans": [
                            {
                                "traceId": "4BF92F3577B34DA6A3CE929D0E0E4736",
                                "spanId": "00f067aa0ba902b7",
                                "parentSpanId": "",
                                "name": "root",
                                "kind": 2,
                                "attributes": [
                                    {"key": "n", "value": {"intValue": "3"}},
                                    {"key": "s", "value": {"stringValue": "x"}},
                                ],
                                "events": [{"name": "SandboxReady", "timeUnixNano": "1500"}],
                                "startTimeUnixNano": "1000",
                                "endTimeUnixNano": "2000",
                                "status": {"code": 2, "message": "boom"},
                            },
                            {
                                "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
                                "spanId": "b7ad6b7169203331",
                                "parentSpanId": "00f067aa0ba902b7",
                                "name": "child",
                            },
                        ],
                    }
                ],
            }
        ]
    }
    output = tmp_path / "traces.jsonl"
    output.write_text(json.dumps(batch) + "\n\n" + json.dumps({"resourceSpans": []}) + "\n")
    root, child = read_spans(output)
    assert root == ExportedSpan(
        service="svc",
        name="root",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        span_id="00f067aa0ba902b7",
        parent_span_id="",
        kind=2,
        attributes={"n": 3, "s": "x"},
        events=("SandboxReady",),
        event_times=(1500,),
        start_ns=1000,
        end_ns=2000,
        status_code=2,
    )
    assert (child.parent_span_id, child.kind, child.events) == ("00f067aa0ba902b7", 0, ())
    assert (child.start_ns, child.end_ns, child.status_code) == (0, 0, 0)


def test_no_output_yet_is_no_span(tmp_path: Path) -> None:
    assert read_spans(tmp_path / "missing.jsonl") == []
