"""One trace from an SDK call to the Sandbox's Ready pod, received by a real OpenTelemetry
Collector (built from its Go modules: ``nox -s testenv -- --only otelcol``).

The SDK runs in its own process with ``SandboxTracerConfig(enable_tracing=True)``, inside the
program's own span (an agent's task): it claims a sandbox, runs a command, writes a file and
terminates the sandbox. The controller (with the extension controllers) runs as
``agent-sandbox-controller --extensions --enable-tracing``; both export over OTLP/gRPC to the
collector, whose file exporter writes the spans as OTLP JSON. The claim goes cold (a warm pool
of 0), so the Sandbox's Pod is created and becomes Ready (kwok) inside the trace. kwok's pods
run nothing, so the command and the write fail at the exec API: their spans are in the trace
all the same, each ended with the error (the e2e suite runs commands on a real node).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import kwok_template_spec, start_controller, warm_template
from kube_agent_sandbox.testing.otelcol import (
    ExportedSpan,
    RunningCollector,
    otelcol_binary,
    start_otel_collector,
)
from kube_agent_sandbox.testing.plugin import unavailable
from kube_agent_sandbox.testing.processes import ProcessSupervisor

pytestmark = pytest.mark.integration

SDK_CALL = """
import json, sys
from opentelemetry import trace
from kube_agent_sandbox.sdk import SandboxClient, SandboxTracerConfig, load_kubeconfig

from kube_agent_sandbox.sdk import SandboxError

config = load_kubeconfig(sys.argv[1])
config.namespace = sys.argv[2]
client = SandboxClient(config, tracer_config=SandboxTracerConfig(enable_tracing=True))
failed = []
with trace.get_tracer("agent").start_as_current_span("agent-task"):
    box = client.claim_sandbox("pool", timeout=120)
    for call in (
        lambda: box.commands.run("python3 -c 'print(1)'", timeout=30),
        lambda: box.files.write("/tmp/notes.txt", "hello", timeout=30),
    ):
        try:
            call()
        except SandboxError as err:  # kwok: no container runtime behind the exec API
            failed.append(f"{type(err).__name__}: {err}")
    box.terminate()
client.close()
trace.get_tracer_provider().shutdown()  # flush the SDK's spans to the collector
print(json.dumps({"claim": box.claim_name, "sandbox": box.name, "failed": failed}))
"""


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[RunningCollector]:
    if not otelcol_binary().is_file():
        unavailable(f"{otelcol_binary()} missing: nox -s testenv -- --only otelcol")
    supervisor = ProcessSupervisor(tmp_path / "otelcol-logs")
    try:
        yield start_otel_collector(supervisor, tmp_path / "otelcol")
    finally:
        supervisor.stop_all()


def _wait_for(
    collector: RunningCollector,
    done: Callable[[list[ExportedSpan]], bool],
    *,
    timeout: float = 60,
) -> list[ExportedSpan]:
    deadline = time.monotonic() + timeout
    while True:
        spans = collector.spans()
        if done(spans):
            return spans
        if time.monotonic() > deadline:
            names = sorted({f"{s.service}/{s.name}" for s in spans})
            raise AssertionError(f"the collector did not receive the whole trace: {names}")
        time.sleep(0.2)


@pytest.fixture
def traced_controller(
    cluster: ClusterAccess,
    namespace: str,
    controller_runner: ControllerRunner,
    agent_sandbox_crds: list[str],
    collector: RunningCollector,
    request: pytest.FixtureRequest,
) -> None:
    """The controller tracing to the collector, and a cold warm pool ``pool`` (kwok pods)."""
    del agent_sandbox_crds
    start_controller(
        controller_runner,
        namespace=namespace,
        repo_root=request.config.rootpath,
        flags=("--extensions", "--enable-tracing"),
        env=collector.environment(),
    )
    cluster.apply(
        warm_template("pool", template_spec=kwok_template_spec("busybox"), replicas=0),
        namespace=namespace,
    )


def _run(argv: list[str], env: dict[str, str]) -> str:
    """Run a traced program to its end (its spans flushed at exit); its stdout."""
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=180, env={**os.environ, **env}, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _has_ready(spans: list[ExportedSpan]) -> bool:
    return any(s.name == "ReconcileSandbox" and "SandboxReady" in s.events for s in spans)


@pytest.mark.usefixtures("traced_controller")
def test_one_trace_from_the_sdk_call_to_the_ready_pod(
    cluster: ClusterAccess, namespace: str, collector: RunningCollector
) -> None:
    out = _run(
        [sys.executable, "-c", SDK_CALL, str(cluster.kubeconfig), namespace],
        collector.environment(),
    )
    result = json.loads(out.splitlines()[-1])
    claim, sandbox = result["claim"], result["sandbox"]
    # The run fails with the API server's reason (no kubelet to reach); the write, which
    # sends its input at once, sees the stream already closed (the SDK's ApiRequestError).
    assert len(result["failed"]) == 2, result["failed"]
    assert result["failed"][0].startswith("ExecFailedError: exec failed:"), result["failed"]

    spans = _wait_for(collector, _has_ready)
    sdk = {s.name: s for s in spans if s.service == "sandbox-client"}
    task = sdk["agent-task"]
    call = sdk["sandbox-client.claim_sandbox"]
    create = sdk["sandbox-client.create_claim"]
    wait = sdk["sandbox-client.wait_for_claim_ready"]
    run = sdk["sandbox-client.run"]
    write = sdk["sandbox-client.write"]
    delete = sdk["sandbox-client.delete_claim"]
    trace_id = task.trace_id
    assert task.parent_span_id == ""
    # The agent's task holds the whole sandbox's life, in one trace.
    for child in (call, run, write, delete):
        assert (child.trace_id, child.parent_span_id) == (trace_id, task.span_id), child.name
    assert create.parent_span_id == call.span_id
    assert wait.parent_span_id == call.span_id
    assert create.attributes["sandbox.claim.name"] == claim
    assert run.attributes["sandbox.name"] == sandbox
    assert run.attributes["sandbox.command.executable"] == "python3"
    assert write.attributes["sandbox.file.path"] == "/tmp/notes.txt"
    assert write.attributes["sandbox.file.size"] == len("hello")
    assert delete.attributes["sandbox.claim.name"] == claim
    # The failed exec calls end their spans as errors, with the exception recorded.
    assert (run.status_code, write.status_code) == (2, 2)
    assert "exception" in run.events
    assert "exception" in write.events
    assert call.end_ns <= run.start_ns < run.end_ns <= write.start_ns

    in_trace = [s for s in spans if s.trace_id == trace_id]
    controller = [s for s in in_trace if s.service == "agent-sandbox-controller"]
    claim_spans = [s for s in controller if s.name == "ReconcileSandboxClaim"]
    sandbox_spans = [s for s in controller if s.name == "ReconcileSandbox"]
    assert claim_spans, "no claim reconcile in the SDK's trace"
    assert sandbox_spans, "no Sandbox reconcile in the SDK's trace"
    # Every reconcile of the claim and of its Sandbox continues the SDK's create_claim span:
    # the claim carries its context, and the claim controller copied it onto the Sandbox.
    assert {s.parent_span_id for s in claim_spans} == {create.span_id}
    assert {s.attributes["sandboxclaim.name"] for s in claim_spans} == {claim}
    assert {s.parent_span_id for s in sandbox_spans} == {create.span_id}
    assert {s.attributes["sandbox.name"] for s in sandbox_spans} == {sandbox}
    ready = [s for s in sandbox_spans if "SandboxReady" in s.events]
    assert len(ready) == 1, "SandboxReady is recorded once, by the pass that saw the pod Ready"
    pod_spans = [s for s in controller if s.name == "reconcilePod"]
    assert pod_spans
    assert {s.parent_span_id for s in pod_spans} <= {s.span_id for s in sandbox_spans}
    assert any("NewPodStatusObserved" in s.events for s in pod_spans)
    # Nothing of this claim or Sandbox was traced anywhere else.
    stray = [
        s
        for s in spans
        if s.trace_id != trace_id
        and (
            s.attributes.get("sandboxclaim.name") == claim
            or s.attributes.get("sandbox.name") == sandbox
        )
    ]
    assert stray == []


@pytest.mark.usefixtures("traced_controller")
def test_the_cli_switch_traces_the_command_down_to_the_ready_pod(
    cluster: ClusterAccess, namespace: str, collector: RunningCollector
) -> None:
    """``agent-sandbox --trace claim`` (the installed command, in its own process): the
    command's span is the root, the SDK's calls and the controller's reconciles under it."""
    command = Path(sys.executable).with_name("agent-sandbox")
    env = {
        **collector.environment(),
        "AGENT_SANDBOX_ENABLE_TRACING": "false",  # the flag wins
        "OTEL_SERVICE_NAME": "my-cli",
    }
    options = ["--trace", "--kubeconfig", str(cluster.kubeconfig), "-n", namespace]
    sandbox = _run([str(command), *options, "claim", "pool", "--timeout", "120"], env).strip()

    spans = _wait_for(collector, _has_ready)
    cli = {s.name: s for s in spans if s.service == "my-cli"}
    root = cli["my-cli.cli.claim"]
    call = cli["my-cli.claim_sandbox"]
    create = cli["my-cli.create_claim"]
    assert root.parent_span_id == ""
    assert root.attributes == {"cli.command": "claim"}
    assert call.parent_span_id == root.span_id
    assert create.parent_span_id == call.span_id
    in_trace = [s for s in spans if s.trace_id == root.trace_id]
    sandbox_spans = [s for s in in_trace if s.name == "ReconcileSandbox"]
    assert {s.attributes["sandbox.name"] for s in sandbox_spans} == {sandbox}
    assert {s.parent_span_id for s in sandbox_spans} == {create.span_id}
    assert any("SandboxReady" in s.events for s in sandbox_spans)
