"""Run the snapshot node agent in-process as its ServiceAccount, for the integration tests of
other packages (the gateway's E2B snapshots, the SDK's and CLI's snapshot verbs).

The agent is the DaemonSet's (informer, queue, status writes) bound only to its generated
ClusterRole; its committer is :class:`snapshot_support.FolderCommitter` (kwok runs no
containers). Not a test module: importers put this folder on ``sys.path``.
"""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

from snapshot_support import FolderCommitter

from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller import rbac
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ControllerBuilder,
    Manager,
    Obj,
    load_kubeconfig,
)
from kube_agent_sandbox.extensions.snapshot import rbacgen
from kube_agent_sandbox.extensions.snapshot.agent import SnapshotAgent
from kube_agent_sandbox.extensions.snapshot.registry import RegistryError
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.extensions.snapshot.status import split_image
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.nsapi import NamespaceApi
from kube_agent_sandbox.testing.registry import RunningRegistry

AGENT_ROLE = "agent-sandbox-snapshotter-test"


def registry_settings(registry: RunningRegistry, folder: Path) -> RegistrySettings:
    """The registry's settings, its credentials written as the kubelet mounts the Secret."""
    auth = base64.b64encode(f"{registry.username}:{registry.password or ''}".encode()).decode()
    auth_file = folder / "registry-auth.json"
    auth_file.write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
    return RegistrySettings(
        url=registry.url, auth_file=str(auth_file), ca_file=str(registry.ca_file or "")
    )


def snapshot_options(settings: RegistrySettings) -> ControllerOptions:
    """Controller options with the snapshot controller on (``--snapshot-registry``...)."""
    return ControllerOptions(
        extensions=True,
        snapshot_registry=settings.url,
        snapshot_registry_auth_file=settings.auth_file,
        snapshot_registry_ca=settings.ca_file,
    )


def start_agent(
    runner: ControllerRunner, namespace: str, node: str, settings: RegistrySettings, root: Path
) -> None:
    """The node agent of ``node``, watching ``namespace``, until the runner closes."""
    identity = runner.identity(
        "agent-sandbox-snapshotter",
        namespace=namespace,
        cluster_roles=[AGENT_ROLE],
        rbac=[
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": AGENT_ROLE},
                "rules": [r.to_dict() for r in rbac.normalize_rules(rbacgen.RBAC_RULES)],
            }
        ],
    )

    async def run(kubeconfig: Path) -> None:
        async with ApiClient(load_kubeconfig(str(kubeconfig))) as api:
            manager = Manager(
                api, metrics_bind_address="0", health_bind_address="0", namespace=namespace
            )
            agent = SnapshotAgent(
                manager.client,
                snapshots=manager.informer(SANDBOX_SNAPSHOTS),
                node_name=node,
                settings=settings,
                committer=FolderCommitter(root),
            )
            builder = ControllerBuilder(manager, "snapshotter").for_resource(SANDBOX_SNAPSHOTS)
            builder.with_workers(2).complete(agent)
            await manager.run()

    runner.start(run, identity=identity, name="snapshotter")


async def give_container_id(env: NamespaceApi, pod_name: str) -> str:
    """Report a containerd container ID on the running Pod, as a kubelet would; its node."""

    async def running() -> Obj | None:
        pod = await env.get(PODS, pod_name)
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        return pod if statuses and statuses[0].get("state", {}).get("running") else None

    pod = await env.until(running, f"the Pod {pod_name} running")
    statuses = pod["status"]["containerStatuses"]
    statuses[0]["containerID"] = f"containerd://{secrets.token_hex(32)}"
    await env.client.patch(
        PODS,
        env.namespace,
        pod_name,
        {"status": {"containerStatuses": statuses}},
        subresource="status",
    )
    return str(pod["spec"]["nodeName"])


async def manifest_status(settings: RegistrySettings, image: str) -> int:
    """The registry's answer for the image's manifest: 200, or the error status (404)."""
    _, repository, digest = split_image(image)
    async with await settings.client() as registry:
        try:
            await registry.get_manifest(repository, digest)
        except RegistryError as err:
            return err.status
    return 200
