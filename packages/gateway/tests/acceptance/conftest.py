"""Fixtures of the gateway's acceptance tests: the whole stack, started once per module.

``gateway_stack`` starts, against the session's local cluster (kwok nodes: pods become Ready
without containers):

* ``agent-sandbox-controller`` as a command, as the generated controller RBAC, with the
  behaviour flags the documented install (``manifests/overlays/gateway``) gives it
  (``--extensions --idle-shutdown``);
* one local ``sandboxd`` (envd surface, port 49983) and one local code interpreter (port
  49999) per sandbox pod, because kwok pods run nothing: each with
  its own home folder, listening on its pod's own loopback address
  (:class:`~kube_agent_sandbox.testing.pod_daemons.PodDaemons`), so two sandboxes do not share
  files or processes;
* ``agent-sandbox-gateway serve`` as a ServiceAccount bound only to the generated gateway
  ClusterRole, with every pod address rewritten to the pod's loopback address and the two
  sandbox ports mapped to the daemons' ports (``--pod-address-override=loopback``,
  ``--pod-port-map``: testing only);
* a tenant namespace with an API key (``agent-sandbox-gateway keys create``), a second
  tenant with its own key (which must not reach the first tenant's sandboxes), and a
  SandboxTemplate plus a one-member SandboxWarmPool for each E2B template the scenario uses
  (``base``, ``code-interpreter-v1``).

``hostname_gateway`` adds a second gateway of that stack serving HTTPS with
``--domain=sandbox.test``, a test CA and a wildcard tunnel (the offline stand-in for DNS), for
the clients configured with a domain only.

``e2b_python`` gives the interpreter of a virtualenv holding one release of the real SDK: the
workspace's own (newest) or the oldest supported, installed with ``uv`` into
``~/.cache/agent-sandbox/e2b-clients/<version>/`` and reused from there.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest

from kube_agent_sandbox.gateway.index import LOOPBACK_PER_POD
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import (
    ENVD_PORT,
    GATEWAY_BIN,
    INTERPRETER_PORT,
    create_key,
    documented_controller_flags,
    http_status,
    kwok_template_spec,
    start_controller,
    start_gateway,
    wait_warm_pool_ready,
    warm_template,
)
from kube_agent_sandbox.testing.pki import CertificateAuthority
from kube_agent_sandbox.testing.plugin import namespace_name, unavailable
from kube_agent_sandbox.testing.pod_daemons import PodDaemons
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor
from kube_agent_sandbox.testing.wildcard_tunnel import WildcardTunnel

REPO = Path(__file__).resolve().parents[4]
TEMPLATES = ("base", "code-interpreter-v1")
OLD_SDK = "2.45.1"
# The newest e2b-code-interpreter that accepts e2b 2.45.x (2.11 needs e2b >= 2.55.1).
OLD_CODE_INTERPRETER = "2.10.0"
CLIENTS_CACHE = Path.home() / ".cache" / "agent-sandbox" / "e2b-clients"
HOSTNAME_DOMAIN = "sandbox.test"
"""The wildcard domain of :func:`hostname_gateway`."""


@dataclass
class GatewayStack:
    """What the scenario needs to reach the running stack."""

    url: str
    api_key: str
    other_tenant_key: str
    namespace: str
    workdir: Path
    """A folder every sandbox can reach by absolute path (each has its own home besides)."""
    gateway: ManagedProcess
    daemons: PodDaemons
    runner: ControllerRunner
    port_map: dict[int, int]
    controller_metrics: str
    """``host:port`` of the controller's ``/metrics``."""
    extra_logs: list[ManagedProcess] = field(default_factory=list)

    def logs(self) -> str:
        """The tails of the local processes' logs (for failure messages)."""
        daemons = [p for daemon in self.daemons for p in daemon.processes]
        processes = [self.gateway, *self.extra_logs, *daemons]
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(40)}" for p in processes)


def _interpreter_module() -> str:
    module = "kube_agent_sandbox.sandboxd.interpreter"
    if importlib.util.find_spec(f"{module}.__main__") is None:
        module += ".cli"
    return module


@pytest.fixture(scope="session")
def gateway_stack(
    cluster: ClusterAccess,
    agent_sandbox_crds: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayStack]:
    """The controller, the daemons, the gateway, a tenant with a key and warm templates.

    One stack per session: every acceptance module's scenarios run against it; every
    sandbox pod gets daemons of its own (:class:`PodDaemons`).
    """
    assert "sandboxwarmpools.extensions.agents.x-k8s.io" in agent_sandbox_crds
    if not GATEWAY_BIN.is_file():
        unavailable(f"{GATEWAY_BIN} is not installed (uv sync --all-packages)")
    workdir = tmp_path_factory.mktemp("gateway-acceptance")
    files = workdir / "shared"
    files.mkdir()
    namespace = namespace_name("gateway-acceptance")
    other = namespace_name("gateway-acceptance-other")
    runner = ControllerRunner(cluster, workdir / "runner")
    supervisor = ProcessSupervisor(workdir / "logs")
    stack = contextlib.ExitStack()
    try:
        # The controller's identity creates the namespace.
        # ...with the flags of the documented install (manifests/overlays/gateway).
        flags = documented_controller_flags(cluster, REPO / "manifests" / "overlays" / "gateway")
        metrics_port = free_port()
        start_controller(
            runner, namespace=namespace, repo_root=REPO, flags=flags, metrics_port=metrics_port
        )
        daemons = stack.enter_context(
            PodDaemons(
                cluster,
                namespace,
                workdir / "pods",
                supervisor=supervisor,
                interpreter_module=_interpreter_module(),
            )
        )
        # All namespaces, as deployed (manifests/components/gateway): tenants are told apart
        # by their keys, which the cross-tenant test relies on. `keys create` stores both
        # tenants' keys in the gateway's namespace (the only one whose Secrets it lists) and
        # binds the tenant role (env Secrets) in each tenant namespace (docs/guides/gateway.md).
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
        port_map = {ENVD_PORT: daemons.envd_port, INTERPRETER_PORT: daemons.interpreter_port}
        gateway, url = start_gateway(
            runner,
            namespace=namespace,
            workdir=workdir,
            pod_address_override=LOOPBACK_PER_POD,
            port_map=port_map,
            mcp_file_root=str(files),
            tenants=(),
        )
        # An unauthenticated control-plane call is refused.
        assert http_status(f"{url}/v2/sandboxes") == 401
        api_key = create_key(cluster.kubeconfig, namespace, gateway_namespace=namespace)
        other_key = create_key(cluster.kubeconfig, other, gateway_namespace=namespace)
        cluster.apply(
            [
                obj
                for name in TEMPLATES
                for obj in warm_template(
                    name, template_spec=kwok_template_spec(f"e2b-{name}:test"), namespace=namespace
                )
            ]
        )
        for name in TEMPLATES:
            wait_warm_pool_ready(cluster, name, namespace=namespace)
        yield GatewayStack(
            url=url,
            api_key=api_key,
            other_tenant_key=other_key,
            namespace=namespace,
            workdir=files,
            gateway=gateway,
            daemons=daemons,
            runner=runner,
            port_map=port_map,
            controller_metrics=f"127.0.0.1:{metrics_port}",
        )
    finally:
        stack.close()
        supervisor.stop_all()
        runner.close()
        for name in (namespace, other):
            cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


@dataclass
class HostnameGateway:
    """The HTTPS gateway with a wildcard domain, and what a client needs to reach it."""

    url: str
    ca_file: Path
    tunnel: WildcardTunnel
    process: ManagedProcess
    domain: str = HOSTNAME_DOMAIN


@pytest.fixture(scope="session")
def hostname_gateway(
    gateway_stack: GatewayStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostnameGateway]:
    """``agent-sandbox-gateway serve --domain=sandbox.test --tls-*`` plus the tunnel to it.

    A second gateway of the session's stack, serving HTTPS itself, for the clients configured
    with a domain only (``test_e2b_hostnames.py``, the JavaScript SDK's ``domain`` case).
    """
    workdir = tmp_path_factory.mktemp("gateway-tls")
    ca = CertificateAuthority("gateway-acceptance-ca")
    ca_file = workdir / "ca.crt"
    ca_file.write_bytes(ca.key_pair.cert_pem)
    serving = ca.issue_serving(
        "agent-sandbox-gateway",
        dns_names=[f"*.{HOSTNAME_DOMAIN}", HOSTNAME_DOMAIN],
        ip_addresses=["127.0.0.1"],
    )
    cert, key = serving.write(workdir, "gateway")
    process, url = start_gateway(
        gateway_stack.runner,
        namespace=gateway_stack.namespace,
        workdir=workdir,
        pod_address_override=LOOPBACK_PER_POD,
        port_map=gateway_stack.port_map,
        domain=HOSTNAME_DOMAIN,
        tls=(cert, key),
        cafile=ca_file,
        name="gateway-tls",
        tenants=(),  # `keys create` bound the tenant role (gateway_stack)
    )
    gateway_stack.extra_logs.append(process)
    assert url.startswith("https://127.0.0.1:")
    # TLS is really on: plain HTTP and an unknown CA both fail; the control plane answers.
    assert http_status(url.replace("https://", "http://") + "/health") == 0
    assert http_status(f"{url}/health") == 0
    assert http_status(f"{url}/v2/sandboxes", cafile=ca_file) == 401
    with WildcardTunnel(domain=HOSTNAME_DOMAIN, target_port=int(url.rsplit(":", 1)[1])) as tunnel:
        try:
            yield HostnameGateway(url=url, ca_file=ca_file, tunnel=tunnel, process=process)
        finally:
            gateway_stack.extra_logs.remove(process)
            process.stop()


def _old_sdk_python() -> Path:
    """The cached venv with the oldest supported SDK (created with uv on first use)."""
    root = CLIENTS_CACHE / OLD_SDK
    python = root / "venv" / "bin" / "python"
    marker = root / "installed.json"
    wanted = {"e2b": OLD_SDK, "e2b-code-interpreter": OLD_CODE_INTERPRETER}
    if python.is_file() and marker.is_file() and json.loads(marker.read_text()) == wanted:
        return python
    uv = shutil.which("uv")
    if uv is None:
        unavailable("uv is needed to install the old E2B SDK (pip install uv)")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    steps = [
        [uv, "venv", "--quiet", "--python", sys.executable, str(root / "venv")],
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(python),
            *(f"{name}=={version}" for name, version in wanted.items()),
        ],
    ]
    for argv in steps:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=600, check=False, env=env
        )
        if result.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            unavailable(f"could not install e2b {OLD_SDK}: {result.stderr.strip()[-2000:]}")
    marker.write_text(json.dumps(wanted))
    return python


SDK_VERSIONS = ("newest", OLD_SDK)


@pytest.fixture(scope="module", params=SDK_VERSIONS)
def e2b_python(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """``(expected e2b version, python)`` of a venv holding that release of the real SDK."""
    if request.param == "newest":
        return metadata.version("e2b"), Path(sys.executable)
    return OLD_SDK, _old_sdk_python()
