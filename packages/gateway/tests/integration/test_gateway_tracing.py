"""One trace from an E2B client's create, through the gateway and the controllers, to the
Sandbox's Ready pod, received by a real OpenTelemetry Collector (built from its Go modules:
``nox -s testenv -- --only otelcol``).

The E2B client (the real ``e2b`` SDK, in its own process) opens an OpenTelemetry span and sends
its W3C ``traceparent`` with the create, as an instrumented program does. The gateway runs as
``agent-sandbox-gateway serve --enable-tracing`` and the controller as
``agent-sandbox-controller --extensions --enable-tracing``, each exporting over OTLP/gRPC to
the collector. The warm pool is empty, so the claim goes cold and the Pod becomes Ready (kwok)
inside the trace.
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
from kube_agent_sandbox.testing.gateway import (
    ENVD_PORT,
    GATEWAY_BIN,
    create_key,
    kwok_template_spec,
    start_controller,
    start_daemon,
    start_gateway,
    warm_template,
)
from kube_agent_sandbox.testing.otelcol import (
    ExportedSpan,
    RunningCollector,
    otelcol_binary,
    start_otel_collector,
)
from kube_agent_sandbox.testing.plugin import unavailable
from kube_agent_sandbox.testing.processes import ProcessSupervisor

pytestmark = pytest.mark.integration

E2B_CALL = """
import json, sys
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from e2b import Sandbox

provider = TracerProvider(resource=Resource.create({"service.name": "e2b-app"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("e2b-app")
with tracer.start_as_current_span("app.create_sandbox") as span:
    headers = {}
    propagate.inject(headers)
    box = Sandbox.create(
        "pool", api_key=sys.argv[1], api_url=sys.argv[2], sandbox_url=sys.argv[2],
        headers=headers,
    )
    ids = [format(span.get_span_context().trace_id, "032x"),
           format(span.get_span_context().span_id, "016x")]
provider.shutdown()
print(json.dumps({"sandbox": box.sandbox_id, "trace": ids[0], "span": ids[1]}))
"""


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[ProcessSupervisor]:
    supervisor = ProcessSupervisor(tmp_path / "logs")
    try:
        yield supervisor
    finally:
        supervisor.stop_all()


@pytest.fixture
def collector(supervisor: ProcessSupervisor, tmp_path: Path) -> RunningCollector:
    if not otelcol_binary().is_file():
        unavailable(f"{otelcol_binary()} missing: nox -s testenv -- --only otelcol")
    return start_otel_collector(supervisor, tmp_path / "otelcol")


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


def test_one_trace_from_an_e2b_create_through_the_gateway_to_the_ready_pod(
    cluster: ClusterAccess,
    namespace: str,
    controller_runner: ControllerRunner,
    agent_sandbox_crds: list[str],
    supervisor: ProcessSupervisor,
    collector: RunningCollector,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    del agent_sandbox_crds
    if not GATEWAY_BIN.is_file():
        unavailable(f"{GATEWAY_BIN} is not installed (uv sync --all-packages)")
    start_controller(
        controller_runner,
        namespace=namespace,
        repo_root=request.config.rootpath,
        flags=("--extensions", "--enable-tracing"),
        env=collector.environment(),
    )
    files = tmp_path / "sandbox-home"
    files.mkdir()
    _, envd_port = start_daemon(supervisor, "sandboxd", ["kube_agent_sandbox.sandboxd"], cwd=files)
    _, url = start_gateway(
        controller_runner,
        namespace=namespace,
        workdir=tmp_path,
        watch_namespace=namespace,
        pod_address_override="127.0.0.1",
        port_map={ENVD_PORT: envd_port},
        extra_args=("--enable-tracing",),
        env=collector.environment(),
    )
    api_key = create_key(cluster.kubeconfig, namespace, gateway_namespace=namespace)
    cluster.apply(
        warm_template("pool", template_spec=kwok_template_spec("e2b-pool:test"), replicas=0),
        namespace=namespace,
    )
    env = {**os.environ, **collector.environment()}
    done = subprocess.run(
        [sys.executable, "-c", E2B_CALL, api_key, url],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    trace_id, app_span = result["trace"], result["span"]
    sandbox_id = result["sandbox"].split("-")[0]

    # Each process exports in its own batches, so wait for every part of the trace, not only
    # the controller's last span: the gateway's request span may arrive after it.
    wanted = {
        ("e2b-app", "app.create_sandbox"),
        ("agent-sandbox-gateway", "POST /sandboxes"),
        ("agent-sandbox-gateway", "create_claim"),
        ("agent-sandbox-gateway", "wait_for_claim_ready"),
        ("agent-sandbox-controller", "ReconcileSandboxClaim"),
    }

    def whole(spans: list[ExportedSpan]) -> bool:
        in_trace = [s for s in spans if s.trace_id == trace_id]
        seen = {(s.service, s.name) for s in in_trace}
        return wanted <= seen and any(
            s.name == "ReconcileSandbox" and "SandboxReady" in s.events for s in in_trace
        )

    spans = _wait_for(collector, whole)
    in_trace = [s for s in spans if s.trace_id == trace_id]
    by_service: dict[str, list[ExportedSpan]] = {}
    for span in in_trace:
        by_service.setdefault(span.service, []).append(span)
    (app,) = by_service["e2b-app"]
    assert app.span_id == app_span
    assert app.parent_span_id == ""
    gateway = {s.name: s for s in by_service["agent-sandbox-gateway"]}
    server = gateway["POST /sandboxes"]
    create = gateway["create_claim"]
    wait = gateway["wait_for_claim_ready"]
    assert server.parent_span_id == app.span_id  # the E2B client's traceparent, continued
    assert server.kind == 2  # SERVER
    assert server.attributes["http.response.status_code"] == 201
    assert create.parent_span_id == server.span_id
    assert wait.parent_span_id == server.span_id
    assert create.attributes["sandbox.claim.name"] == sandbox_id

    controller = by_service["agent-sandbox-controller"]
    claim_spans = [s for s in controller if s.name == "ReconcileSandboxClaim"]
    sandbox_spans = [s for s in controller if s.name == "ReconcileSandbox"]
    assert claim_spans
    assert sandbox_spans
    assert {s.parent_span_id for s in claim_spans} == {create.span_id}
    assert {s.attributes["sandboxclaim.name"] for s in claim_spans} == {sandbox_id}
    assert {s.parent_span_id for s in sandbox_spans} == {create.span_id}
    assert len([s for s in sandbox_spans if "SandboxReady" in s.events]) == 1
