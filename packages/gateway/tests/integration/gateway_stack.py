"""Start the controllers, a local sandboxd and the gateway in-process, for integration tests.

* The Sandbox controller and the extension controllers (template, warm pool, claim) run on
  their own thread as the ``agent-sandbox-controller`` ServiceAccount, with caches scoped to
  the test's namespace (the session cluster is shared), as the extensions tests run them.
* ``sandboxd`` runs under uvicorn on a free local port: kwok pods run nothing, so every pod
  address is rewritten to 127.0.0.1 and port 49983 mapped to it (``pod_address_override``).
* The gateway runs under uvicorn on a free port as a ServiceAccount bound only to its generated
  roles (``kube_agent_sandbox.testing.gateway``), so a missing permission fails; its API keys
  are Secrets of the ServiceAccount's namespace (``gateway_namespace``).

Not a test module: ``conftest.py`` imports it.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
import yaml

from kube_agent_sandbox.controller import rbac
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import ApiClient, Manager, load_kubeconfig
from kube_agent_sandbox.controller.sandbox.setup import setup as sandbox_setup
from kube_agent_sandbox.gateway.app import build_app
from kube_agent_sandbox.gateway.config import GatewayOptions
from kube_agent_sandbox.gateway.state import GatewayState
from kube_agent_sandbox.testing.controller_runner import ControllerRunner, RunningController
from kube_agent_sandbox.testing.gateway import ENVD_PORT, gateway_identity
from kube_agent_sandbox.testing.probes import free_port

EXTENSIONS = ("template", "warmpool", "claim")
EXTENSIONS_ROLE = "agent-sandbox-controller-extensions"


def _cluster_role(name: str, rules: Sequence[rbac.PolicyRule]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [r.to_dict() for r in rbac.normalize_rules(rules)],
    }


def start_controllers(
    runner: ControllerRunner,
    *,
    rootpath: Path,
    namespace: str,
    name: str = "controllers",
    options: ControllerOptions | None = None,
    extensions: Sequence[str] = EXTENSIONS,
) -> RunningController:
    """The Sandbox and extension controllers, scoped to ``namespace``, as their own identity
    (``name``: the runner's process name, unique per runner; ``extensions``: which extension
    controllers, run with ``options``)."""
    declared: list[rbac.PolicyRule] = []
    for ext in extensions:
        declared.extend(
            importlib.import_module(f"kube_agent_sandbox.extensions.{ext}.setup").RBAC_RULES
        )
    core = rootpath / "manifests" / "rbac" / "role.generated.yaml"
    identity = runner.identity(
        "agent-sandbox-controller",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller", EXTENSIONS_ROLE],
        rbac=[
            *[d for d in yaml.safe_load_all(core.read_text()) if d],
            _cluster_role(EXTENSIONS_ROLE, declared),
        ],
    )
    options = options or ControllerOptions(extensions=True)

    async def run(kubeconfig: Path) -> None:
        config = load_kubeconfig(str(kubeconfig))
        async with ApiClient(config, qps=options.kube_api_qps, burst=options.kube_api_burst) as api:
            manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
            sandbox_setup(manager, options, namespace=namespace)
            for ext in extensions:
                module = importlib.import_module(f"kube_agent_sandbox.extensions.{ext}.setup")
                result = module.setup(manager, options, namespace=namespace)
                if hasattr(result, "__await__"):
                    await result
            await manager.run()

    return runner.start(run, identity=identity, name=name)


class ServerThread:
    """An ASGI app served by uvicorn on 127.0.0.1 in a daemon thread."""

    def __init__(self, app: Any, *, name: str) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=name, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 90
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError(f"{name} exited while starting")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not start within 90 s")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Shut the server down and wait for its thread."""
        self.server.should_exit = True
        self.thread.join(timeout=30)


@dataclass
class GatewayStack:
    """The running gateway (and its local daemon)."""

    gateway: ServerThread
    sandboxd: ServerThread
    state: GatewayState

    @property
    def url(self) -> str:
        """The gateway's base URL (control plane and data plane)."""
        return self.gateway.url

    def stop(self) -> None:
        """Stop the gateway, then the daemon."""
        self.gateway.stop()
        self.sandboxd.stop()


def start_gateway(
    runner: ControllerRunner,
    *,
    namespace: str,
    secret_file: Path,
    tenants: Sequence[str] | None = None,
    domain: str | None = None,
    pause_keeps_memory: bool = False,
) -> GatewayStack:
    """The gateway (all namespaces) as its own ServiceAccount, plus a local sandboxd.

    The ServiceAccount and the API keys are in ``namespace``; its tenant role is bound in
    ``tenants`` (``namespace`` if None), as ``keys create`` does.
    """
    from kube_agent_sandbox.sandboxd.app import build_app as build_daemon

    sandboxd = ServerThread(build_daemon(), name="sandboxd")
    identity = gateway_identity(runner, namespace=namespace, tenants=tenants)
    options = GatewayOptions(
        domain=domain,
        listen="127.0.0.1:0",
        kubeconfig=str(identity.kubeconfig),
        gateway_namespace=namespace,
        hmac_secret_file=str(secret_file),
        pod_address_override="127.0.0.1",
        pod_port_map={ENVD_PORT: sandboxd.port},
        create_timeout_seconds=30,
        pause_keeps_memory=pause_keeps_memory,
    )
    state = GatewayState(options)
    try:
        gateway = ServerThread(build_app(state), name="gateway")
    except BaseException:
        sandboxd.stop()
        raise
    return GatewayStack(gateway=gateway, sandboxd=sandboxd, state=state)
