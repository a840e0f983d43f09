"""Start the Sandbox controller plus chosen extension controllers in-process, for integration tests.

Like ``agent-sandbox-controller --extensions``, every controller shares one Manager; the
process runs as a ServiceAccount bound to the generated core ClusterRole and to the
``agent-sandbox-controller-extensions`` ClusterRole built from the ``RBAC_RULES`` that the
chosen controllers declare, so a missing permission fails the test as it would fail in a
cluster. Caches are scoped to the test's namespace because the session cluster is shared.
Not a test module: ``conftest.py`` imports it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kube_agent_sandbox.controller import rbac
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import ApiClient, Manager, load_kubeconfig
from kube_agent_sandbox.controller.sandbox.setup import setup as sandbox_setup
from kube_agent_sandbox.testing.controller_runner import ControllerRunner, RunningController

EXTENSIONS_ROLE = "agent-sandbox-controller-extensions"
ALL_EXTENSIONS = ("template", "warmpool", "claim")


def _setup_module(name: str) -> Any:
    return importlib.import_module(f"kube_agent_sandbox.extensions.{name}.setup")


def extensions_role(names: Sequence[str]) -> dict[str, Any]:
    """The extensions ClusterRole for the chosen controllers, from what they declare."""
    declared: list[rbac.PolicyRule] = []
    for name in names:
        declared.extend(_setup_module(name).RBAC_RULES)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": EXTENSIONS_ROLE},
        "rules": [r.to_dict() for r in rbac.normalize_rules(declared)],
    }


async def run_extensions_controller(
    kubeconfig: Path,
    *,
    namespace: str,
    options: ControllerOptions,
    names: Sequence[str],
    started: list[Any],
) -> None:
    """Run the Sandbox controller and the named extension controllers until cancelled.

    ``started`` receives the Manager and then what each ``setup`` returned (tests may inspect
    a reconciler, e.g. its expectations).
    """
    config = load_kubeconfig(str(kubeconfig))
    async with ApiClient(config, qps=options.kube_api_qps, burst=options.kube_api_burst) as api:
        manager = Manager(
            api,
            metrics_bind_address="0",
            health_bind_address="0",
            sync_period=options.sync_period,
        )
        started.append(manager)
        sandbox_setup(manager, options, namespace=namespace)
        for name in names:
            result = _setup_module(name).setup(manager, options, namespace=namespace)
            if hasattr(result, "__await__"):
                result = await result
            started.append(result)
        await manager.run()


def start_extensions_controller(
    runner: ControllerRunner,
    *,
    rootpath: Path,
    namespace: str,
    options: ControllerOptions,
    names: Sequence[str] = ALL_EXTENSIONS,
    started: list[Any] | None = None,
) -> RunningController:
    """Start the controllers as the ``agent-sandbox-controller`` ServiceAccount of ``namespace``.

    Args:
        runner: The ``controller_runner`` fixture.
        rootpath: The repository root (holds ``manifests/rbac/role.generated.yaml``).
        namespace: The test's namespace (the ServiceAccount's and the caches').
        options: Controller flags.
        names: Which extension controllers to run (``template``, ``warmpool``, ``claim``).
        started: Filled with the Manager and each setup's return value once running.

    Returns:
        The running controller (the runner stops it at the end of the test).
    """
    core = rootpath / "manifests" / "rbac" / "role.generated.yaml"
    identity = runner.identity(
        "agent-sandbox-controller",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller", EXTENSIONS_ROLE],
        rbac=[*_load(core), extensions_role(names)],
    )
    return runner.start(
        functools.partial(
            run_extensions_controller,
            namespace=namespace,
            options=options,
            names=tuple(names),
            started=started if started is not None else [],
        ),
        identity=identity,
        name="extensions",
    )


def _load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
