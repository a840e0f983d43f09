"""A real OpenTelemetry Collector for the tracing tests: OTLP/gRPC in, spans out as JSON lines.

The binary is built from the collector's Go modules into the testenv cache
(``python -m kube_agent_sandbox.testing.build --only otelcol``, or ``--with-otelcol``). Its file
exporter writes each batch it receives as one line of OTLP JSON; :func:`read_spans` flattens
them into :class:`ExportedSpan` records.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor, wait_until


def otelcol_binary() -> Path:
    """Where the build puts the collector (it may be missing)."""
    return versions.bin_dir() / "otelcol"


@dataclass(frozen=True)
class ExportedSpan:
    """One span as the collector exported it (ids in lower-case hex)."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[str, ...] = ()
    #: Unix nanoseconds of each event, in the order of ``events``.
    event_times: tuple[int, ...] = ()
    start_ns: int = 0
    end_ns: int = 0
    #: OTLP status code: 0 unset, 1 ok, 2 error.
    status_code: int = 0


@dataclass(frozen=True)
class RunningCollector:
    """A started collector.

    Attributes:
        endpoint: OTLP/gRPC endpoint for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``http://…``).
        output: The JSON-lines file the spans are written to.
        process: The collector's process.
    """

    endpoint: str
    output: Path
    process: ManagedProcess

    def spans(self) -> list[ExportedSpan]:
        """Every span received so far."""
        return read_spans(self.output)

    def environment(self) -> dict[str, str]:
        """The OTLP exporter variables that point a process at this collector (plain text gRPC,
        spans exported every 200 ms)."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def start_otel_collector(supervisor: ProcessSupervisor, workdir: Path) -> RunningCollector:
    """Start the collector on a free loopback port, writing spans under ``workdir``.

    Returns:
        The collector, once its OTLP/gRPC port accepts connections.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    output = workdir / "traces.jsonl"
    config = {
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{port}"}}}},
        "exporters": {"file": {"path": str(output), "flush_interval": "100ms"}},
        "service": {
            # no internal metrics server (it would take port 8888)
            "telemetry": {"metrics": {"level": "none"}},
            "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
        },
    }
    config_file = workdir / "otelcol.yaml"
    config_file.write_text(yaml.safe_dump(config))
    process = supervisor.start(
        "otelcol", [str(otelcol_binary()), f"--config=file:{config_file}"], cwd=workdir
    )
    wait_until(lambda: _accepts(port), timeout=60, what="otelcol OTLP port", process=process)
    return RunningCollector(endpoint=f"http://127.0.0.1:{port}", output=output, process=process)


def _value(value: dict[str, Any]) -> Any:
    """An OTLP JSON AnyValue as Python (scalars; arrays and maps as given)."""
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    return value


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: _value(item.get("value") or {}) for item in items or ()}


def read_spans(path: Path) -> list[ExportedSpan]:
    """The spans of the file exporter's output (missing file: none yet)."""
    if not path.is_file():
        return []
    spans: list[ExportedSpan] = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        for resource_spans in json.loads(line).get("resourceSpans") or ():
            resource = _attributes((resource_spans.get("resource") or {}).get("attributes"))
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.get("scopeSpans") or ():
                for span in scope_spans.get("spans") or ():
                    spans.append(
                        ExportedSpan(
                            service=service,
                            name=span["name"],
                            trace_id=span["traceId"].lower(),
                            span_id=span["spanId"].lower(),
                            parent_span_id=(span.get("parentSpanId") or "").lower(),
                            kind=int(span.get("kind") or 0),
                            attributes=_attributes(span.get("attributes")),
                            events=tuple(e["name"] for e in span.get("events") or ()),
                            event_times=tuple(
                                int(e.get("timeUnixNano") or 0) for e in span.get("events") or ()
                            ),
                            start_ns=int(span.get("startTimeUnixNano") or 0),
                            end_ns=int(span.get("endTimeUnixNano") or 0),
                            status_code=int((span.get("status") or {}).get("code") or 0),
                        )
                    )
    return spans
