"""The per-object timelines: what each watch event stamps, segments, writes, the waterfall."""

from __future__ import annotations

from typing import Any

from benchlib.timeline import (
    ObjectTimeline,
    Timelines,
    sample,
    segment_summary,
    waterfall_rows,
    writes_per_object,
)


def _pod(name: str, *, node: str = "", ready: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": conditions},
    }


def _sandbox(name: str, *, ready: bool | None = None, pod_name: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    annotations = {"agents.x-k8s.io/pod-name": pod_name} if pod_name else {}
    return {"metadata": {"name": name, "annotations": annotations}, "status": status}


def _walk() -> Timelines:
    lines = Timelines(client=None, namespace="ns")  # type: ignore[arg-type]
    lines.sent({"a": 1.0})
    lines.apply_sandbox("ADDED", _sandbox("a"), 1.01)
    lines.apply_pod("ADDED", _pod("a"), 1.05)
    lines.apply_sandbox("MODIFIED", _sandbox("a", pod_name="a"), 1.06)
    lines.apply_sandbox("MODIFIED", _sandbox("a", ready=False, pod_name="a"), 1.07)
    lines.apply_pod("MODIFIED", _pod("a", node="n1"), 1.10)
    lines.apply_pod("MODIFIED", _pod("a", node="n1", ready=True), 1.20)
    lines.apply_sandbox("MODIFIED", _sandbox("a", ready=True, pod_name="a"), 1.25)
    lines.apply_sandbox("MODIFIED", _sandbox("a", ready=True, pod_name="a"), 1.30)  # no change
    return lines


def test_each_event_stamps_its_mark_once() -> None:
    line = _walk().objects["a"]
    assert line.marks == {
        "sent": 1.0,
        "pod created": 1.05,
        "pod scheduled": 1.10,
        "pod ready": 1.20,
        "sandbox ready": 1.25,
    }


def test_writes_count_only_events_that_changed_status_or_annotations() -> None:
    line = _walk().objects["a"]
    assert line.status_writes == [1.07, 1.25]
    assert line.metadata_writes == [1.06]
    assert writes_per_object([line, ObjectTimeline()]) == (2.0, 1.0)  # unsent ones not counted


def test_segments_split_create_to_ready_between_processes() -> None:
    summary = segment_summary(_walk().objects.values())
    assert summary["controller: create Pod"]["p50_ms"] == 50.0
    assert summary["scheduler: bind"]["p50_ms"] == 50.0
    assert summary["node: start"]["p50_ms"] == 100.0
    assert summary["controller: mark Ready"]["p50_ms"] == 50.0
    assert summary["controller: mark Ready"]["n"] == 1


def test_a_missing_mark_leaves_the_segment_out() -> None:
    lines = Timelines(client=None, namespace="ns")  # type: ignore[arg-type]
    lines.sent({"b": 0.0})
    lines.apply_pod("ADDED", _pod("b"), 0.5)
    summary = segment_summary(lines.objects.values())
    assert summary["controller: create Pod"]["n"] == 1
    assert summary["scheduler: bind"] == {"n": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None}


def test_waterfall_rows_are_relative_to_the_send() -> None:
    rows = waterfall_rows(_walk().objects, ["a", "missing"])
    assert [r["name"] for r in rows] == ["a"]
    assert rows[0]["marks_ms"]["sandbox ready"] == 250.0
    assert rows[0]["status_writes_ms"] == [70.0, 250.0]


def test_sample_spreads_evenly() -> None:
    names = [f"n{i}" for i in range(10)]
    assert sample(names, 5) == ["n0", "n2", "n4", "n6", "n8"]
    assert sample(names[:3], 5) == names[:3]
