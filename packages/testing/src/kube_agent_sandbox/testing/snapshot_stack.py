"""The controllers a suspend that keeps the state needs, in this process, while a body runs.

The core Sandbox controller must run in the same process as the state keeper (that is the rule
that keeps a suspend from waiting for nobody), so the e2e suite's keep-state tests and the
``pause-resume`` benchmark run the core controller, the SandboxSnapshot controller with its
keeper and the node agent in-process, as ``--extensions --snapshot-registry`` would, against a
real node's containerd (and its kubelet's checkpoints, for memory).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ControllerBuilder,
    Manager,
    load_kubeconfig,
)
from kube_agent_sandbox.controller.sandbox.setup import setup as sandbox_setup
from kube_agent_sandbox.extensions.plugin import setup as extensions_setup
from kube_agent_sandbox.extensions.snapshot import setup as snapshot_setup
from kube_agent_sandbox.extensions.snapshot.agent import (
    MemoryCommitter,
    SnapshotAgent,
    node_committer,
)
from kube_agent_sandbox.extensions.snapshot.containerd import ContainerdNode
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.testing.node.realnode import RealNode


async def run_snapshot_stack(
    kubeconfig: Path,
    node: RealNode,
    namespace: str,
    settings: RegistrySettings,
    workdir: Path,
    body: Callable[[], Awaitable[None]],
    *,
    memory: MemoryCommitter | None = None,
    claims: bool = False,
) -> None:
    """Run ``body`` while this process runs the controllers and the node agent.

    Args:
        kubeconfig: The cluster's admin kubeconfig.
        node: The real node (its containerd commits the filesystem snapshots).
        namespace: The core Sandbox controller's (and, without ``claims``, the snapshots')
            namespace.
        settings: The snapshot registry.
        workdir: Where the node agent builds layers.
        body: What runs meanwhile.
        memory: The node agent's memory committer (None: memory snapshots fail as on a node
            that cannot checkpoint).
        claims: Also templates, warm pools and claims (all namespaces), as deployed.
    """
    if node.containerd is None:
        raise RuntimeError("the real node has no containerd to commit snapshots with")
    options = ControllerOptions(
        extensions=True,
        snapshot_registry=settings.url,
        snapshot_registry_auth_file=settings.auth_file,
        snapshot_registry_ca=settings.ca_file,
    )
    async with ApiClient(load_kubeconfig(str(kubeconfig))) as api:
        manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
        sandbox_setup(manager, options, namespace=namespace)
        if claims:
            extensions_setup(manager, options)
        else:
            snapshot_setup.setup(manager, options, namespace=namespace)
        agent = SnapshotAgent(
            manager.client,
            # the extensions' setup watches all namespaces: share its informer
            snapshots=manager.informer(SANDBOX_SNAPSHOTS, namespace=None if claims else namespace),
            node_name=node.options.node_name,
            settings=settings,
            committer=node_committer(ContainerdNode(node.containerd.layout.socket), workdir),
            memory=memory,
        )
        ControllerBuilder(manager, "snapshotter").for_resource(SANDBOX_SNAPSHOTS).with_workers(
            2
        ).complete(agent)
        task = asyncio.create_task(manager.run())
        try:
            await body()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
