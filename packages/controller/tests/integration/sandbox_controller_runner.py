"""Start the Sandbox controller in-process under its generated RBAC, for integration tests.

The controller (Manager + ``sandbox.setup``) runs as a ServiceAccount bound to the generated
``agent-sandbox-controller`` ClusterRole, so its RBAC is exercised too. Its caches are scoped to
the test's namespace because the session cluster is shared. Not a test module: the tests of this
directory import it (``conftest.py`` puts the directory on ``sys.path``).
"""

from __future__ import annotations

import functools
from pathlib import Path

from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import ApiClient, Manager, load_kubeconfig
from kube_agent_sandbox.controller.sandbox.setup import setup
from kube_agent_sandbox.testing.controller_runner import ControllerRunner, RunningController


async def run_sandbox_controller(
    kubeconfig: Path, *, namespace: str, options: ControllerOptions
) -> None:
    """Run the Sandbox controller until cancelled, throttling its client as ``options`` ask.

    Args:
        kubeconfig: Who the controller runs as.
        namespace: The only namespace its caches watch.
        options: Controller flags (workers, client QPS and burst, cache selectors...).
    """
    config = load_kubeconfig(str(kubeconfig))
    async with ApiClient(config, qps=options.kube_api_qps, burst=options.kube_api_burst) as api:
        manager = Manager(
            api,
            metrics_bind_address="0",
            health_bind_address="0",
            sync_period=options.sync_period,
        )
        setup(manager, options, namespace=namespace)
        await manager.run()


def start_sandbox_controller(
    runner: ControllerRunner,
    *,
    rootpath: Path,
    namespace: str,
    options: ControllerOptions,
    name: str,
) -> RunningController:
    """Start the Sandbox controller as the ``sandbox-controller`` ServiceAccount of ``namespace``.

    Args:
        runner: The ``controller_runner`` fixture.
        rootpath: The repository root (holds ``manifests/rbac/role.generated.yaml``).
        namespace: The test's namespace (the ServiceAccount's and the caches').
        options: Controller flags.
        name: Name of the running controller, for messages.

    Returns:
        The running controller (the runner stops it at the end of the test).
    """
    identity = runner.identity(
        "sandbox-controller",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller"],
        rbac=rootpath / "manifests" / "rbac" / "role.generated.yaml",
    )
    return runner.start(
        functools.partial(run_sandbox_controller, namespace=namespace, options=options),
        identity=identity,
        name=name,
    )
