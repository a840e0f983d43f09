"""One trace from an SDK call to the Sandbox's Ready pod, received by a real OpenTelemetry
Collector (built from its Go modules: ``nox -s testenv -- --only otelcol``).

The SDK runs in its own process with ``SandboxTracerConfig(enable_tracing=True)``; the
controller (with the extension controllers) runs as ``agent-sandbox-controller --extensions
--enable-tracing``; both export over OTLP/gRPC to the collector, whose file exporter writes the
spans as OTLP JSON. The claim goes cold (a warm pool of 0), so the Sandbox's Pod is created and
becomes Ready (kwok) inside the trace.
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

config = load_kubeconfig(sys.argv[1])
config.namespace = sys.argv[2]
client = SandboxClient(config, tracer_config=SandboxTracerConfig(enable_tracing=True))
box = client.claim_sandbox("pool", timeout=120)
client.close()
trace.get_tracer_provider().shutdown()  # flush the SDK's spans to the collector
print(json.dumps({"claim": box.claim_name, "sandbox": box.name}))
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


def test_one_trace_from_the_sdk_call_to_the_ready_pod(
    cluster: ClusterAccess,
    namespace: str,
    controller_runner: ControllerRunner,
    agent_sandbox_crds: list[str],
    collector: RunningCollector,
    request: pytest.FixtureRequest,
) -> None:
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
    env = {**os.environ, **collector.environment()}
    done = subprocess.run(
        [sys.executable, "-c", SDK_CALL, str(cluster.kubeconfig), namespace],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    claim, sandbox = (json.loads(done.stdout.splitlines()[-1])[k] for k in ("claim", "sandbox"))

    def whole(spans: list[ExportedSpan]) -> bool:
        return any(s.name == "ReconcileSandbox" and "SandboxReady" in s.events for s in spans)

    spans = _wait_for(collector, whole)
    sdk = {s.name: s for s in spans if s.service == "sandbox-client"}
    call = sdk["sandbox-client.claim_sandbox"]
    create = sdk["sandbox-client.create_claim"]
    wait = sdk["sandbox-client.wait_for_claim_ready"]
    trace_id = call.trace_id
    assert call.parent_span_id == ""
    assert create.parent_span_id == call.span_id
    assert wait.parent_span_id == call.span_id
    assert create.attributes["sandbox.claim.name"] == claim

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
