"""Fixtures of the gateway's acceptance tests: the whole stack, started once per module.

``gateway_stack`` starts, against the session's local cluster (kwok nodes: pods become Ready
without containers):

* ``agent-sandbox-controller --extensions`` as a command, as the generated controller RBAC;
* a local ``sandboxd`` (envd surface, port 49983 of every sandbox) and a local code
  interpreter (port 49999), because kwok pods run nothing;
* ``agent-sandbox-gateway serve`` as a ServiceAccount bound only to the generated gateway
  ClusterRole, with every pod address rewritten to 127.0.0.1 and the two sandbox ports mapped
  to the local daemons (``--pod-address-override``, ``--pod-port-map``: testing only);
* a tenant namespace with an API key (``agent-sandbox-gateway keys create``), a second
  tenant with its own key (which must not reach the first tenant's sandboxes), and a
  SandboxTemplate plus a one-member SandboxWarmPool for each E2B template the scenario uses
  (``base``, ``code-interpreter-v1``).

``e2b_python`` gives the interpreter of a virtualenv holding one release of the real SDK: the
workspace's own (newest) or the oldest supported, installed with ``uv`` into
``~/.cache/agent-sandbox/e2b-clients/<version>/`` and reused from there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.gateway import rbacgen
from kube_agent_sandbox.testing.access import ClusterAccess, load_manifests
from kube_agent_sandbox.testing.cluster import free_port
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.plugin import namespace_name, unavailable
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor, wait_until
from kube_agent_sandbox.testing.waiting import ObjectRef, wait_for_object

REPO = Path(__file__).resolve().parents[4]
RBAC = REPO / "manifests" / "rbac"
BIN = Path(sys.executable).parent
TEMPLATES = ("base", "code-interpreter-v1")
ENVD_PORT = 49983
INTERPRETER_PORT = 49999
OLD_SDK = "2.45.1"
# The newest e2b-code-interpreter that accepts e2b 2.45.x (2.11 needs e2b >= 2.55.1).
OLD_CODE_INTERPRETER = "2.10.0"
CLIENTS_CACHE = Path.home() / ".cache" / "agent-sandbox" / "e2b-clients"
_KEY = re.compile(r"\be2b_[0-9a-f]{40}\b")


@dataclass
class GatewayStack:
    """What the scenario needs to reach the running stack."""

    url: str
    api_key: str
    other_tenant_key: str
    namespace: str
    workdir: Path
    gateway: ManagedProcess
    supervisor: ProcessSupervisor
    envd_port: int

    def fresh_sandboxd(self) -> None:
        """Restart the local sandboxd, so the next sandbox's ``/init`` meets a new daemon.

        Every kwok sandbox shares this one daemon (the address override), but a daemon takes
        ``/init`` without a token only once, as envd does; a real pod has its own.
        """
        self.supervisor.restart("sandboxd")
        port = self.envd_port
        wait_until(lambda: _accepts(port), timeout=30, what="sandboxd after a restart")

    def logs(self) -> str:
        """The tails of the local processes' logs (for failure messages)."""
        processes = [self.gateway, *self.supervisor.processes]
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(40)}" for p in processes)


def _accepts(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _ready(obj: dict[str, Any]) -> bool:
    return int((obj.get("status") or {}).get("readyReplicas") or 0) >= 1


def _template_objects(namespace: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for name in TEMPLATES:
        pod = {"spec": {"containers": [{"name": "sandbox", "image": f"e2b-{name}:test"}]}}
        objects.append(
            {
                "apiVersion": c.EXTENSIONS_API_VERSION,
                "kind": c.KIND_SANDBOX_TEMPLATE,
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"podTemplate": pod},
            }
        )
        objects.append(
            {
                "apiVersion": c.EXTENSIONS_API_VERSION,
                "kind": c.KIND_SANDBOX_WARM_POOL,
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"replicas": 1, "sandboxTemplateRef": {"name": name}},
            }
        )
    return objects


def _start_controller(runner: ControllerRunner, namespace: str) -> ManagedProcess:
    identity = runner.identity(
        "agent-sandbox-controller",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller", "agent-sandbox-controller-extensions"],
        rbac=[
            *load_manifests(RBAC / "role.generated.yaml"),
            *load_manifests(RBAC / "extensions" / "role.generated.yaml"),
        ],
    )
    health = free_port()
    argv = [
        sys.executable,
        "-m",
        "kube_agent_sandbox.controller",
        "--kubeconfig={kubeconfig}",
        "--extensions",
        "--leader-elect=false",
        "--enable-webhook=false",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{health}",
    ]
    process = runner.start_command(argv, identity=identity, name="controller")
    wait_until(
        lambda: _status(f"http://127.0.0.1:{health}/readyz") == 200,
        timeout=90,
        what="controller /readyz",
        process=process,
    )
    return process


def _start_daemons(supervisor: ProcessSupervisor, workdir: Path) -> tuple[int, int]:
    envd_port, interpreter_port = free_port(), free_port()
    sandboxd = supervisor.start(
        "sandboxd",
        [sys.executable, "-m", "kube_agent_sandbox.sandboxd", "--port", str(envd_port)],
        cwd=workdir,
    )
    module = "kube_agent_sandbox.sandboxd.interpreter"
    if importlib.util.find_spec(f"{module}.__main__") is None:
        module += ".cli"
    interpreter = supervisor.start(
        "interpreter",
        [sys.executable, "-m", module, "--port", str(interpreter_port)],
        cwd=workdir,
    )
    for process, port in ((sandboxd, envd_port), (interpreter, interpreter_port)):
        wait_until(lambda p=port: _accepts(p), timeout=60, what=process.name, process=process)
    return envd_port, interpreter_port


def _start_gateway(
    runner: ControllerRunner,
    *,
    namespace: str,
    workdir: Path,
    port_map: dict[int, int],
) -> tuple[ManagedProcess, str]:
    role = yaml.safe_load(rbacgen.render(rbacgen.gateway_rules()).split("---\n", 1)[1])
    identity = runner.identity(
        "agent-sandbox-gateway",
        namespace=namespace,
        cluster_roles=[rbacgen.GATEWAY_ROLE],
        rbac=[role],
    )
    secret_file = workdir / "hmac-key"
    secret_file.write_text(secrets.token_hex(32))
    port = free_port()
    argv = [
        str(BIN / "agent-sandbox-gateway"),
        "serve",
        f"--listen=127.0.0.1:{port}",
        "--kubeconfig={kubeconfig}",
        # All namespaces, as deployed (manifests/components/gateway): tenants are told apart
        # by their keys, which the cross-tenant test relies on.
        f"--hmac-secret-file={secret_file}",
        "--pod-address-override=127.0.0.1",
        "--pod-port-map=" + ",".join(f"{k}={v}" for k, v in sorted(port_map.items())),
    ]
    process = runner.start_command(argv, identity=identity, name="gateway")
    url = f"http://127.0.0.1:{port}"
    wait_until(
        lambda: _status(f"{url}/health") == 200,
        timeout=60,
        what="gateway /health (caches synced)",
        process=process,
    )
    # An unauthenticated control-plane call is refused.
    assert _status(f"{url}/v2/sandboxes") == 401
    return process, url


def _create_key(cluster: ClusterAccess, namespace: str) -> str:
    result = subprocess.run(
        [
            str(BIN / "agent-sandbox-gateway"),
            "keys",
            "create",
            f"--namespace={namespace}",
            f"--kubeconfig={cluster.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found = _KEY.findall(result.stdout)
    assert len(found) == 1, f"expected one key in the output: {result.stdout!r}"
    # The key is shown once and never logged.
    assert found[0] not in result.stderr
    return str(found[0])


@pytest.fixture(scope="module")
def gateway_stack(
    cluster: ClusterAccess,
    agent_sandbox_crds: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayStack]:
    """The controller, the daemons, the gateway, a tenant with a key and warm templates."""
    assert "sandboxwarmpools.extensions.agents.x-k8s.io" in agent_sandbox_crds
    if not (BIN / "agent-sandbox-gateway").is_file():
        unavailable(f"agent-sandbox-gateway is not installed in {BIN} (uv sync --all-packages)")
    workdir = tmp_path_factory.mktemp("gateway-acceptance")
    files = workdir / "sandbox-home"
    files.mkdir()
    namespace = namespace_name("gateway-acceptance")
    other = namespace_name("gateway-acceptance-other")
    runner = ControllerRunner(cluster, workdir / "runner")
    supervisor = ProcessSupervisor(workdir / "logs")
    try:
        _start_controller(runner, namespace)  # creates the namespace with the identity
        envd_port, interpreter_port = _start_daemons(supervisor, files)
        gateway, url = _start_gateway(
            runner,
            namespace=namespace,
            workdir=workdir,
            port_map={ENVD_PORT: envd_port, INTERPRETER_PORT: interpreter_port},
        )
        api_key = _create_key(cluster, namespace)
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
        other_key = _create_key(cluster, other)
        cluster.apply(_template_objects(namespace))
        api = cluster.api_client()
        for name in TEMPLATES:
            wait_for_object(
                api,
                ObjectRef(c.EXTENSIONS_API_VERSION, c.KIND_SANDBOX_WARM_POOL, name, namespace),
                _ready,
                timeout=90,
                what="a Ready warm member",
            )
        yield GatewayStack(
            url=url,
            api_key=api_key,
            other_tenant_key=other_key,
            namespace=namespace,
            workdir=files,
            gateway=gateway,
            supervisor=supervisor,
            envd_port=envd_port,
        )
    finally:
        supervisor.stop_all()
        runner.close()
        for name in (namespace, other):
            cluster.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


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
