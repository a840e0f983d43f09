"""``agent-sandbox --enable-tracing``: the switch, its variables, and the command's span.

Each case runs the CLI in a fresh interpreter: tracing installs a process-wide tracer provider
(and the point of the switch being off is that OpenTelemetry is never imported). The program
installs an in-memory exporter first, which the SDK then keeps; the client is a fake whose calls
open spans through the tracer of the config the CLI gave it, as the SDK's client does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

PROBE = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

from kube_agent_sandbox.sdk import NotFoundError
from kube_agent_sandbox.sdk.cli import app as cli
from kube_agent_sandbox.sdk.tracing import tracer_for

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
configs = []


class Client:
    namespace = "ns"

    def __init__(self, config):
        self.tracer = tracer_for(config)

    def list_sandboxes(self, **kwargs):
        with self.tracer.span("list"):
            return []

    def get(self, name, **kwargs):
        with self.tracer.span("get"):
            raise NotFoundError(f"{name} not found", 404)


def factory(state):
    configs.append(state.tracer_config)
    return Client(state.tracer_config)


cli.state.factory = factory
result = CliRunner().invoke(cli.app, sys.argv[1:])
print(json.dumps({
    "exit_code": result.exit_code,
    "stderr": result.stderr,
    "configs": [None if c is None else [c.enable_tracing, c.trace_service_name] for c in configs],
    "spans": [
        {
            "name": s.name,
            "id": s.context.span_id,
            "parent": s.parent.span_id if s.parent else None,
            "attributes": dict(s.attributes or {}),
        }
        for s in exporter.get_finished_spans()
    ],
}))
"""


def run_cli(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if k not in {"OTEL_SERVICE_NAME"}}
    clean.pop("AGENT_SANDBOX_ENABLE_TRACING", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**clean, **(env or {})},
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_off_by_default() -> None:
    result = run_cli("list")
    assert result["exit_code"] == 0, result["stderr"]
    assert result["configs"] == [None]
    assert result["spans"] == []


@pytest.mark.parametrize("switch", ["--enable-tracing", "--trace"])
def test_the_switch_traces_the_command_with_the_sdk_calls_under_it(switch: str) -> None:
    result = run_cli(switch, "list")
    assert result["exit_code"] == 0, result["stderr"]
    assert result["configs"] == [[True, "sandbox-client"]]
    call, command = result["spans"]
    assert command["name"] == "sandbox-client.cli.list"
    assert command["parent"] is None
    assert command["attributes"] == {"cli.command": "list"}
    assert call["name"] == "sandbox-client.list"
    assert call["parent"] == command["id"]


def test_the_variables_turn_it_on_and_name_the_service() -> None:
    env = {"AGENT_SANDBOX_ENABLE_TRACING": "true", "OTEL_SERVICE_NAME": "my-cli"}
    result = run_cli("list", env=env)
    assert result["configs"] == [[True, "my-cli"]]
    assert [s["name"] for s in result["spans"]] == ["my-cli.list", "my-cli.cli.list"]
    # the flag's value wins over the variable
    assert run_cli("--trace-service-name", "flag", "list", env=env)["configs"] == [[True, "flag"]]
    assert run_cli("--no-enable-tracing", "list", env=env)["spans"] == []


def test_a_failed_command_records_its_exit_code() -> None:
    result = run_cli("--trace", "get", "ghost")
    assert result["exit_code"] == 3
    by_name = {s["name"]: s for s in result["spans"]}
    assert by_name["sandbox-client.cli.get"]["attributes"] == {
        "cli.command": "get",
        "cli.exit_code": 3,
    }


def test_an_empty_service_name_is_a_usage_error() -> None:
    result = run_cli("--trace", "--trace-service-name", " ", "list")
    assert result["exit_code"] == 2
    assert "--trace-service-name must not be empty" in result["stderr"]
    assert result["configs"] == []


def test_without_opentelemetry_the_switch_names_the_extra() -> None:
    # A Python without the tracing extra: the import of opentelemetry fails.
    code = (
        "import sys\nsys.modules['opentelemetry'] = None\n"
        "from typer.testing import CliRunner\n"
        "from kube_agent_sandbox.sdk.cli import app as cli\n"
        "result = CliRunner().invoke(cli.app, ['--trace', 'list'])\n"
        "print(result.exit_code)\nprint(result.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    code_line, *message = done.stdout.splitlines()
    assert code_line == "2"
    assert "kube-agent-sandbox-sdk[tracing]" in " ".join(message)
