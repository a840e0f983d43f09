"""Draw one trace the OpenTelemetry Collector received as a waterfall PNG (the docs' picture).

Usage::

    python scripts/trace_waterfall.py TRACES.jsonl --root SPAN_NAME -o OUT.png \\
        [--title TEXT] [--keep FILE]

``TRACES.jsonl`` is the collector's file exporter output (OTLP JSON lines), e.g. what an
integration test's collector wrote under pytest's ``--basetemp``; the trace drawn is the latest
one whose root span is named ``SPAN_NAME``. ``--keep`` also writes that trace alone, in the
same format, so the picture can be drawn again from the committed file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kube_agent_sandbox.testing.otelcol import read_spans
from kube_agent_sandbox.testing.tracechart import draw_waterfall, find_trace, keep_trace, trace_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", type=Path, help="the collector's OTLP JSON lines file")
    parser.add_argument("--root", required=True, help="name of the trace's root span")
    parser.add_argument("-o", "--output", type=Path, required=True, help="PNG to write")
    parser.add_argument("--title", default="", help="title above the waterfall")
    parser.add_argument("--keep", type=Path, help="also write the trace's spans alone here")
    args = parser.parse_args(argv)
    if not args.traces.is_file():
        parser.error(f"no such file: {args.traces}")
    try:
        spans = read_spans(args.traces)
        trace_id = find_trace(spans, args.root)
        rows = trace_rows(spans, trace_id)
    except ValueError as err:
        parser.error(str(err))
    title = args.title or f"trace {trace_id}"
    draw_waterfall(rows, args.output, title=title)
    if args.keep is not None:
        args.keep.write_text(keep_trace(args.traces.read_text(), trace_id))
    print(f"{args.output}: {len(rows)} spans of trace {trace_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
