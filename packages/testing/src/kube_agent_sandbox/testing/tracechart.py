"""A trace's waterfall as a PNG, drawn from the spans a real collector exported.

The picture of a trace in the docs comes from this: the collector's file exporter writes OTLP
JSON (:func:`~kube_agent_sandbox.testing.otelcol.read_spans` reads it), :func:`trace_rows` puts
one trace's spans in tree order (children under their parent, by start time) and
:func:`draw_waterfall` draws them as a trace viewer does: one bar per span on a shared time axis,
coloured by service, indented by depth, events as markers, failed spans outlined in red.
matplotlib (a development dependency) is imported only to draw.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kube_agent_sandbox.testing.otelcol import ExportedSpan

__all__ = ["Row", "draw_waterfall", "find_trace", "keep_trace", "trace_rows"]

STATUS_ERROR = 2
#: One colour per service, in the order services first appear (matplotlib's tab10).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@dataclass(frozen=True)
class Row:
    """One span of the waterfall, at its depth in the tree."""

    span: ExportedSpan
    depth: int


def find_trace(spans: Sequence[ExportedSpan], root_name: str) -> str:
    """The id of the trace whose root span (no parent) is named ``root_name``, the latest one.

    Raises:
        ValueError: no such root span.
    """
    roots = [s for s in spans if s.name == root_name and not s.parent_span_id]
    if not roots:
        names = sorted({s.name for s in spans if not s.parent_span_id})
        raise ValueError(f"no root span named {root_name!r}; root spans: {names}")
    return max(roots, key=lambda s: s.start_ns).trace_id


def trace_rows(spans: Sequence[ExportedSpan], trace_id: str) -> list[Row]:
    """The spans of one trace in tree order: each parent, then its children by start time.

    A span whose parent was not received is drawn as a root, so nothing is hidden.

    Raises:
        ValueError: the trace has no span.
    """
    in_trace = [s for s in spans if s.trace_id == trace_id]
    if not in_trace:
        raise ValueError(f"no span of trace {trace_id}")
    ids = {s.span_id for s in in_trace}
    children: dict[str, list[ExportedSpan]] = {}
    for span in in_trace:
        parent = span.parent_span_id if span.parent_span_id in ids else ""
        children.setdefault(parent, []).append(span)
    rows: list[Row] = []

    def visit(parent: str, depth: int) -> None:
        for span in sorted(children.get(parent, ()), key=lambda s: (s.start_ns, s.name)):
            rows.append(Row(span, depth))
            visit(span.span_id, depth + 1)

    visit("", 0)
    return rows


def keep_trace(otlp_jsonl: str, trace_id: str) -> str:
    """The collector's OTLP JSON lines with only the spans of one trace (same format).

    Resources and scopes left without a span are dropped, as are lines left empty.
    """
    kept: list[str] = []
    for line in otlp_jsonl.splitlines():
        if not line.strip():
            continue
        resources: list[dict[str, Any]] = []
        for resource_spans in json.loads(line).get("resourceSpans") or ():
            scopes = []
            for scope_spans in resource_spans.get("scopeSpans") or ():
                spans = [
                    span
                    for span in scope_spans.get("spans") or ()
                    if span["traceId"].lower() == trace_id
                ]
                if spans:
                    scopes.append({**scope_spans, "spans": spans})
            if scopes:
                resources.append({**resource_spans, "scopeSpans": scopes})
        if resources:
            kept.append(json.dumps({"resourceSpans": resources}, separators=(",", ":")))
    return "".join(f"{line}\n" for line in kept)


def _label(span: ExportedSpan) -> str:
    name = span.name
    for key in ("sandbox.name", "sandboxclaim.name", "sandbox.claim.name"):
        if key in span.attributes and span.name.startswith("Reconcile"):
            return f"{name} ({span.attributes[key]})"
    return name


def draw_waterfall(rows: Sequence[Row], target: Path, *, title: str) -> Path:
    """Draw ``rows`` (from :func:`trace_rows`) into the PNG ``target``; returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if not rows:
        raise ValueError("no span to draw")
    start = min(r.span.start_ns for r in rows)
    end = max(r.span.end_ns for r in rows)
    total_ms = max((end - start) / 1e6, 1e-3)
    services: dict[str, str] = {}
    for row in rows:
        services.setdefault(row.span.service, PALETTE[len(services) % len(PALETTE)])

    height = 0.9 + 0.28 * len(rows)
    fig, (names, bars) = plt.subplots(
        1, 2, figsize=(13, height), dpi=110, gridspec_kw={"width_ratios": [2, 3], "wspace": 0.02}
    )
    names.set_xlim(0, 1)
    for ax in (names, bars):
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_yticks([])
    names.axis("off")
    for index, row in enumerate(rows):
        span = row.span
        left = (span.start_ns - start) / 1e6
        width = max((span.end_ns - span.start_ns) / 1e6, total_ms / 400)
        failed = span.status_code == STATUS_ERROR
        if index % 2 == 0:
            for ax in (names, bars):
                ax.axhspan(index - 0.5, index + 0.5, color="#f4f4f4", zorder=0)
        names.text(
            0.01 + 0.035 * row.depth,
            index,
            _label(span),
            va="center",
            fontsize=8,
            color="#b00020" if failed else "#222222",
        )
        bars.barh(
            index,
            width,
            left=left,
            height=0.62,
            color=services[span.service],
            edgecolor="#b00020" if failed else "none",
            linewidth=1.5,
            zorder=2,
        )
        duration = (span.end_ns - span.start_ns) / 1e6
        text = f"{duration:.1f} ms" if duration < 1000 else f"{duration / 1000:.2f} s"
        bars.text(left + width + total_ms * 0.005, index, text, va="center", fontsize=7)
        for event, at in zip(span.events, span.event_times, strict=False):
            x = (at - start) / 1e6
            bars.plot([x], [index], marker="D", color="black", markersize=4, zorder=3)
            if event == "SandboxReady":
                bars.annotate(
                    event,
                    (x, index),
                    xytext=(4, -9),
                    textcoords="offset points",
                    fontsize=7,
                    fontweight="bold",
                )
    bars.set_xlim(0, total_ms * 1.12)
    bars.set_xlabel("milliseconds since the trace's first span")
    bars.grid(axis="x", color="#dddddd", zorder=1)
    handles = [Patch(color=color, label=service) for service, color in services.items()]
    # upper right: the trace's first spans are early, so that corner is empty
    bars.legend(handles=handles, loc="upper right", fontsize=7, title="service.name")
    names.set_title(title, loc="left", fontsize=10)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, bbox_inches="tight")
    plt.close(fig)
    return target
