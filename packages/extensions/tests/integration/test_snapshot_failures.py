"""Snapshots that fail for want of space or of their node lose nothing (issue 20).

Against a real kube-apiserver with kwok nodes, the real registry and the node agent in-process
(its committer writes a folder's layer: kwok runs no containers; ``snapshot_support``). "Disk
full" is real: the agent's work folder, or the registry's storage, is a 1 MiB tmpfs (mounting
needs root, as CI runs). "Node lost" is a kwok node of the test's own that stops heartbeating
(kwok, its kubelet, lets go of it) or is deleted, while its agent hangs mid-commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from snapshot_agent_runner import registry_settings as settings_for
from snapshot_support import FolderCommitter, SnapshotEnv, running_agent
from snapshot_support import start_snapshot_controller as _start_controller

from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.api.rest import NODES, PODS
from kube_agent_sandbox.controller.runtime import ApiError, Obj, format_time
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.registry import RegistryError
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.kwok import KWOK_NODE_ANNOTATION, kwok_node
from kube_agent_sandbox.testing.processes import ProcessSupervisor
from kube_agent_sandbox.testing.registry import RegistryOptions, RunningRegistry, start_registry
from kube_agent_sandbox.testing.tmpfs import resize_tmpfs, tmpfs_or_skip

pytestmark = pytest.mark.integration

PAYLOAD = 3 << 20
"""Random bytes the sandbox wrote: three times what the 1 MiB filesystems hold."""


@pytest.fixture
async def env(cluster: Any, namespace: str) -> AsyncIterator[SnapshotEnv]:
    async with SnapshotEnv.connect(cluster.kubeconfig, namespace) as e:
        yield e


@pytest.fixture
def controller(
    agent_sandbox_crds: list[str],
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    oci_registry: RunningRegistry,
    tmp_path: Path,
) -> RegistrySettings:
    """The snapshot controller on the cluster's registry; its settings (the agents' too)."""
    settings = settings_for(oci_registry, tmp_path)
    _start_controller(controller_runner, request, namespace, settings)
    return settings


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs_or_skip(tmp_path / "small") as folder:
        yield folder


async def _snapshot_again(
    cluster: Any, env: SnapshotEnv, node: str, settings: RegistrySettings, tmp_path: Path
) -> None:
    """A new snapshot of ``box`` on ``node``, taken by a fresh agent there, becomes Ready."""
    await env.snapshot("again", "box")
    again = await env.until_phase("again", s.COMMITTING)
    assert again["status"]["node"] == node
    async with running_agent(cluster, env.namespace, node, settings, FolderCommitter(tmp_path)):
        await env.until_phase("again", s.READY)


def _files_under(root: Path, name: str) -> list[Path]:
    """The files inside folders called ``name`` below ``root``."""
    return [p for p in root.rglob(f"{name}/**/*") if p.is_file()]


async def _event(env: SnapshotEnv, name: str, reason: str) -> Obj:
    async def probe() -> Obj | None:
        events = await env.events_regarding("SandboxSnapshot", name)
        return next((e for e in events if e.get("reason") == reason), None)

    return await env.until(probe, f"a {reason} Event on snapshot {name}")


async def _failed_with(env: SnapshotEnv, name: str, reason: str) -> tuple[Obj, str]:
    """The Failed snapshot and its message, after checking the reason, the Event and that it
    references no image."""
    failed = await env.until_phase(name, s.FAILED)
    (ready,) = failed["status"]["conditions"]
    assert ready["reason"] == reason, ready
    assert "image" not in failed["status"]
    await _event(env, name, reason)
    return failed, str(ready["message"])


async def _still_running(env: SnapshotEnv, pod_name: str) -> Obj:
    pod = await env.get(PODS, pod_name)
    assert pod is not None
    assert not pod["metadata"].get("deletionTimestamp")
    assert pod["status"]["containerStatuses"][0]["state"].get("running")
    return pod


# -- disk full -------------------------------------------------------------------------------


async def test_a_full_work_folder_fails_node_disk_full_and_leaves_no_partial_file(
    cluster: Any,
    env: SnapshotEnv,
    controller: RegistrySettings,
    namespace: str,
    tmp_path: Path,
    small_disk: Path,
) -> None:
    pod = await env.running_sandbox("box")
    await env.snapshot("snap", "box")
    node = (await env.until_phase("snap", s.COMMITTING))["status"]["node"]
    committer = FolderCommitter(tmp_path, workdir=small_disk, payload=PAYLOAD)
    async with running_agent(cluster, namespace, node, controller, committer, workdir=small_disk):
        _, message = await _failed_with(env, "snap", s.REASON_NODE_DISK_FULL)
    assert f"node agent on node {node} ran out of space in {small_disk}" in message
    assert "free of 1.0 MiB" in message
    assert "--workdir" in message
    assert await asyncio.to_thread(os.listdir, small_disk) == []  # the partial layer went
    await _still_running(env, pod["metadata"]["name"])

    # With room again, a new snapshot of the same sandbox succeeds.
    await _snapshot_again(cluster, env, node, controller, tmp_path)


async def test_a_suspend_whose_node_disk_is_full_keeps_the_pod_and_says_why(
    cluster: Any,
    env: SnapshotEnv,
    controller: RegistrySettings,
    namespace: str,
    tmp_path: Path,
    small_disk: Path,
) -> None:
    pod = await env.running_sandbox("box", {k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_FILESYSTEM})
    await env.patch(SANDBOXES, "box", {"spec": {"operatingMode": "Suspended"}})
    snap = "box-suspend-2"  # the Sandbox's generation once suspended
    node = (await env.until_phase(snap, s.COMMITTING))["status"]["node"]
    committer = FolderCommitter(tmp_path, workdir=small_disk, payload=PAYLOAD)
    async with running_agent(cluster, namespace, node, controller, committer, workdir=small_disk):
        await _failed_with(env, snap, s.REASON_NODE_DISK_FULL)

    async def not_saved() -> Obj | None:
        sandbox = await env.get(SANDBOXES, "box")
        conditions = ((sandbox or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["reason"] == k.REASON_STATE_NOT_SAVED), None)

    cond = await env.until(not_saved, "the Sandbox's StateNotSaved condition")
    assert s.REASON_NODE_DISK_FULL in cond["message"]
    assert str(small_disk) in cond["message"]
    kept = await _still_running(env, "box")
    assert kept["metadata"]["uid"] == pod["metadata"]["uid"]


async def test_a_full_registry_fails_registry_storage_full_and_a_retry_with_room_works(
    cluster: Any,
    agent_sandbox_crds: list[str],
    env: SnapshotEnv,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    supervisor = ProcessSupervisor(tmp_path / "logs")
    workdir = tmp_path / "registry"
    # The registry's storage folder, mounted before it starts: 1 MiB for a 3 MiB layer.
    with tmpfs_or_skip(workdir / "storage") as storage:
        try:
            registry, _ = start_registry(
                RegistryOptions(tls=False, auth=False),
                supervisor=supervisor,
                workdir=workdir,
                ca=None,
            )
            settings = RegistrySettings(url=registry.url)
            _start_controller(controller_runner, request, env.namespace, settings)
            pod = await env.running_sandbox("box")
            await env.snapshot("snap", "box")
            node = (await env.until_phase("snap", s.COMMITTING))["status"]["node"]
            committer = FolderCommitter(tmp_path, payload=PAYLOAD)
            async with running_agent(cluster, env.namespace, node, settings, committer):
                _, message = await _failed_with(env, "snap", s.REASON_REGISTRY_STORAGE_FULL)
            assert registry.url in message
            assert "no space left on device" in message
            assert "uploading 3" in message  # the blob's size: what the registry lacked
            # The cancelled upload's data went (distribution may keep its folders and a hash
            # state of a few bytes, which its upload purge removes).
            left = await asyncio.to_thread(_files_under, storage, "_uploads")
            assert not [p for p in left if p.name == "data"]
            assert sum(p.stat().st_size for p in left) < 4096
            await _still_running(env, pod["metadata"]["name"])

            # The registry gets room: a new snapshot succeeds.
            await asyncio.to_thread(resize_tmpfs, storage, "16m")
            await _snapshot_again(cluster, env, node, settings, tmp_path)
        finally:
            supervisor.stop_all()


# -- node lost -------------------------------------------------------------------------------


@pytest.fixture
async def own_nodes(env: SnapshotEnv) -> AsyncIterator[list[str]]:
    """The kwok nodes this test creates (the first one, ``lost-<namespace>``, made here, the
    Sandbox's pool), deleted after it."""
    names: list[str] = []
    await _add_node(env, names, f"lost-{env.namespace}")
    yield names
    for name in names:
        try:
            await env.client.delete(NODES, "", name)
        except ApiError as exc:
            if not exc.not_found:
                raise


def _pool(namespace: str) -> dict[str, str]:
    """The label that pins the test's Sandbox to the test's own nodes."""
    return {"snapshot-failures.test/namespace": namespace}


async def _ready(env: SnapshotEnv, name: str) -> None:
    async def probe() -> bool:
        node = await env.client.get(NODES, "", name)
        conditions = (node.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    await env.until(probe, f"node {name} Ready")


async def _add_node(env: SnapshotEnv, own: list[str], name: str) -> None:
    body = kwok_node(name)
    body["metadata"]["labels"].update(_pool(env.namespace))
    await env.client.create(NODES, "", body)
    own.append(name)
    await _ready(env, name)


async def _stop_heartbeats(env: SnapshotEnv, name: str, since: dt.datetime) -> None:
    """The node's kubelet goes silent: kwok lets go of it and its Ready turns Unknown, as the
    node lifecycle controller writes it, ``since`` then."""
    await env.client.patch(
        NODES, "", name, {"metadata": {"annotations": {KWOK_NODE_ANNOTATION: None}}}
    )
    node = await env.client.get(NODES, "", name)
    conditions = [c for c in node["status"]["conditions"] if c["type"] != "Ready"]
    conditions.append(
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": format_time(since),
            "lastTransitionTime": format_time(since),
        }
    )
    await env.client.patch(
        NODES, "", name, {"status": {"conditions": conditions}}, subresource="status"
    )


async def _manifest_gone(settings: RegistrySettings, target: str) -> bool:
    repository, _, tag = target.partition("/")[2].rpartition(":")
    async with await settings.client() as registry:
        try:
            await registry.get_manifest(repository, tag)
        except RegistryError as err:
            return err.status == 404
    return False


@contextlib.asynccontextmanager
async def _agent_hung_mid_commit(
    cluster: Any, env: SnapshotEnv, node: str, settings: RegistrySettings, tmp_path: Path
) -> AsyncIterator[asyncio.Event]:
    """Sandbox ``box`` on ``node``, its snapshot ``snap`` Committing, and the node's agent
    hung after its push until the yielded gate is set; leaving kills the agent."""
    pod = await env.running_sandbox("box", node_selector=_pool(env.namespace))
    assert pod["spec"]["nodeName"] == node
    await env.snapshot("snap", "box")
    await env.until_phase("snap", s.COMMITTING)
    gate = asyncio.Event()
    committer = FolderCommitter(tmp_path, gate=gate)
    async with running_agent(cluster, env.namespace, node, settings, committer):
        await env.until(lambda: asyncio.sleep(0, result=bool(committer.running)), "a commit")
        yield gate


async def test_a_node_not_ready_past_the_grace_fails_node_lost_and_a_late_answer_changes_nothing(
    cluster: Any,
    env: SnapshotEnv,
    controller: RegistrySettings,
    own_nodes: list[str],
    tmp_path: Path,
) -> None:
    (node,) = own_nodes
    async with _agent_hung_mid_commit(cluster, env, node, controller, tmp_path) as gate:
        # Not Ready for two minutes: past the controller's 60 s grace.
        await _stop_heartbeats(env, node, dt.datetime.now(dt.UTC) - dt.timedelta(minutes=2))
        failed, message = await _failed_with(env, "snap", s.REASON_NODE_LOST)
        assert f"node {node} has not been Ready for " in message
        assert "Ready=Unknown, NodeStatusUnknown" in message
        # The agent was only cut off: its late "pushed" loses, and it deletes what it pushed.
        gate.set()
        await env.until(
            lambda: _manifest_gone(controller, failed["status"]["target"]), "the late push deleted"
        )
    after = await env.get(SANDBOX_SNAPSHOTS, "snap")
    assert after is not None
    assert after["status"]["phase"] == s.FAILED
    assert "image" not in after["status"]
    await _still_running(env, "box")

    # The node is back (kwok takes it again): a new snapshot with a fresh agent succeeds.
    await env.client.patch(
        NODES, "", node, {"metadata": {"annotations": {KWOK_NODE_ANNOTATION: "fake"}}}
    )
    await _ready(env, node)
    await _snapshot_again(cluster, env, node, controller, tmp_path)


async def test_a_deleted_node_fails_node_lost_at_once_and_the_sandbox_snapshots_elsewhere(
    cluster: Any,
    env: SnapshotEnv,
    controller: RegistrySettings,
    own_nodes: list[str],
    tmp_path: Path,
) -> None:
    (lost,) = own_nodes
    spare = f"spare-{env.namespace}"
    async with _agent_hung_mid_commit(cluster, env, lost, controller, tmp_path):
        pass
    # The agent was killed mid-commit (its task cancelled); then its node goes.
    await env.client.delete(NODES, "", lost)
    _, message = await _failed_with(env, "snap", s.REASON_NODE_LOST)
    assert f"node {lost} was deleted during the commit" in message

    # The Sandbox's Pod goes as pod GC would (force, no kubelet to confirm) and comes back on
    # the spare node; a fresh agent there snapshots it.
    await env.client.delete(PODS, env.namespace, "box", grace_period_seconds=0)
    await _add_node(env, own_nodes, spare)

    async def moved() -> Obj | None:
        pod = await env.get(PODS, "box")
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        running = statuses and statuses[0].get("state", {}).get("running")
        return pod if running and pod and pod["spec"].get("nodeName") == spare else None

    await env.report_container(await env.until(moved, f"the Pod of box running on {spare}"))
    await _snapshot_again(cluster, env, spare, controller, tmp_path)
