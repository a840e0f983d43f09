"""The SandboxSnapshot controller and node agent against a real kube-apiserver (kwok nodes) and
the real CNCF distribution registry of the local cluster (TLS, htpasswd credentials).

The controller runs as its ServiceAccount with the generated RBAC. The node agent runs
in-process with the real informer and status writes; only its committer differs from a node's
(kwok runs no containers, so it pushes a layer made from a folder; ``snapshot_support``). The
commit on a real node is e2e/test_e2e_realnode_snapshot.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from snapshot_support import (
    SECRET,
    FolderCommitter,
    SnapshotEnv,
    running_agent,
)
from snapshot_support import (
    auth_file as _auth_file,
)
from snapshot_support import (
    dockerconfig as _dockerconfig,
)
from snapshot_support import (
    start_snapshot_controller as _start_controller,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_SNAPSHOTS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import PODS, SECRETS
from kube_agent_sandbox.controller.runtime import (
    Obj,
)
from kube_agent_sandbox.extensions.claim.fromsnapshot import (
    ANNOTATION_SNAPSHOT,
    ANNOTATION_SNAPSHOT_PULL_SECRET,
)
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.agent import kubelet_committer
from kube_agent_sandbox.extensions.snapshot.checkpoint import KubeletCheckpointer
from kube_agent_sandbox.extensions.snapshot.registry import RegistryError
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.processes import ProcessSupervisor
from kube_agent_sandbox.testing.registry import RegistryOptions, RunningRegistry, start_registry

pytestmark = pytest.mark.integration


@pytest.fixture
def registry_settings(oci_registry: RunningRegistry, tmp_path: Path) -> RegistrySettings:
    return RegistrySettings(
        url=oci_registry.url,
        auth_file=_auth_file(
            tmp_path / "registry-auth.json", oci_registry, oci_registry.password or ""
        ),
        ca_file=str(oci_registry.ca_file or ""),
    )


@pytest.fixture
async def env(
    cluster: Any, namespace: str, oci_registry: RunningRegistry
) -> AsyncIterator[SnapshotEnv]:
    async with SnapshotEnv.connect(cluster.kubeconfig, namespace) as e:
        await e.create(SECRETS, _dockerconfig(oci_registry, oci_registry.password or ""))
        yield e


@pytest.fixture
def controller(
    agent_sandbox_crds: list[str],
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    registry_settings: RegistrySettings,
) -> RegistrySettings:
    _start_controller(controller_runner, request, namespace, registry_settings)
    return registry_settings


async def _manifest_status(settings: RegistrySettings, env: SnapshotEnv, image: str) -> int:
    _, repository, digest = s.split_image(image)
    async with await settings.client() as registry:
        try:
            await registry.get_manifest(repository, digest)
        except RegistryError as err:
            return err.status
    return 200


async def _memory_snapshot_committing(env: SnapshotEnv) -> Obj:
    pod = await env.running_sandbox("box")
    await env.snapshot("mem", "box", mode="Memory")
    committing = await env.until_phase("mem", s.COMMITTING)
    assert committing["status"]["container"] == "main"
    assert committing["status"]["sourcePod"] == pod["metadata"]["name"]
    assert "checkpointing container main" in committing["status"]["conditions"][0]["message"]
    return committing


async def test_memory_mode_on_an_agent_without_kubelet_access_fails_naming_what_is_missing(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    committing = await _memory_snapshot_committing(env)
    node = committing["status"]["node"]
    async with running_agent(cluster, namespace, node, controller, FolderCommitter(tmp_path)):
        failed = await env.until_phase("mem", s.FAILED)
    (ready,) = failed["status"]["conditions"]
    assert ready["reason"] == s.REASON_MEMORY_UNSUPPORTED
    assert f"node agent on node {node} cannot checkpoint memory" in ready["message"]
    assert "--kubelet-checkpoints-dir" in ready["message"]
    assert "CRIU" in ready["message"]
    assert "Filesystem" in ready["message"]
    assert await env.get(PODS, "box") is not None  # the sandbox stays usable


async def test_memory_mode_on_a_kubelet_without_the_checkpoint_api_fails_unsupported(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    # A kubelet whose ContainerCheckpoint gate is off answers 404 to /checkpoint/...: so does
    # this HTTP server with no routes, on loopback.
    app = web.Application()
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    token = tmp_path / "token"
    token.write_text("unused")
    try:
        committing = await _memory_snapshot_committing(env)
        node = committing["status"]["node"]
        checkpointer = KubeletCheckpointer(
            f"http://127.0.0.1:{runner.addresses[0][1]}", node=node, token_file=token
        )
        memory = kubelet_committer(checkpointer, tmp_path)
        async with running_agent(
            cluster, namespace, node, controller, FolderCommitter(tmp_path), memory
        ):
            failed = await env.until_phase("mem", s.FAILED)
    finally:
        await runner.cleanup()
    (ready,) = failed["status"]["conditions"]
    assert ready["reason"] == s.REASON_MEMORY_UNSUPPORTED
    assert f"the kubelet on node {node} has no checkpoint API (404)" in ready["message"]
    assert "image" not in failed["status"]


async def test_a_snapshot_of_a_missing_sandbox_fails(
    env: SnapshotEnv, controller: RegistrySettings
) -> None:
    await env.snapshot("lost", "nobody")
    failed = await env.until_phase("lost", s.FAILED)
    assert failed["status"]["conditions"][0]["reason"] == s.REASON_SANDBOX_NOT_FOUND
    # Nothing was pushed, so deleting it needs no registry.
    await env.delete(SANDBOX_SNAPSHOTS, "lost")
    await env.until_gone(SANDBOX_SNAPSHOTS, "lost")


async def test_ready_with_a_digest_survives_its_sandbox_and_deleting_it_removes_the_image(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    pod = await env.running_sandbox("box")
    await env.snapshot("snap", "box")
    committing = await env.until_phase("snap", s.COMMITTING)
    status = committing["status"]
    assert status["node"] == pod["spec"]["nodeName"]
    assert status["sourcePod"] == "box"
    assert status["target"].endswith(f"/agent-sandbox/snapshots/{namespace}/box:snap")
    assert s.FINALIZER in committing["metadata"]["finalizers"]
    async with running_agent(
        cluster, namespace, status["node"], controller, FolderCommitter(tmp_path)
    ):
        ready = await env.until_phase("snap", s.READY)
    image = ready["status"]["image"]
    assert ready["status"]["digest"].startswith("sha256:")
    assert image.endswith(ready["status"]["digest"])
    assert ready["status"]["size"] > 0
    assert ready["status"]["completionTime"]
    assert await _manifest_status(controller, env, image) == 200

    # No owner reference: the snapshot outlives its Sandbox.
    assert not ready["metadata"].get("ownerReferences")
    await env.delete(SANDBOXES, "box")
    await env.until_gone(SANDBOXES, "box")
    assert (await env.get(SANDBOX_SNAPSHOTS, "snap") or {})["status"]["phase"] == s.READY

    await env.delete(SANDBOX_SNAPSHOTS, "snap")
    await env.until_gone(SANDBOX_SNAPSHOTS, "snap")
    assert await _manifest_status(controller, env, image) == 404


async def test_two_snapshots_of_one_sandbox_at_once_both_succeed_in_turn(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    await env.running_sandbox("box")
    await env.snapshot("one", "box")
    await env.snapshot("two", "box")
    first = await env.until_phase("one", s.COMMITTING)
    await env.until_phase("two", s.COMMITTING)
    committer = FolderCommitter(tmp_path)
    async with running_agent(cluster, namespace, first["status"]["node"], controller, committer):
        one = await env.until_phase("one", s.READY)
        two = await env.until_phase("two", s.READY)
    assert not committer.overlapped
    assert one["status"]["digest"] != two["status"]["digest"]


async def test_sandbox_deleted_mid_commit_fails_and_keeps_nothing(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    await env.running_sandbox("box")
    await env.snapshot("snap", "box")
    committing = await env.until_phase("snap", s.COMMITTING)
    gate = asyncio.Event()
    committer = FolderCommitter(tmp_path, gate=gate)
    async with running_agent(
        cluster, namespace, committing["status"]["node"], controller, committer
    ):
        # The agent has pushed and waits at the gate; the Sandbox goes away.
        await env.until(
            lambda: asyncio.sleep(0, result=bool(committer.running)), "a commit running"
        )
        await env.delete(SANDBOXES, "box")
        failed = await env.until_phase("snap", s.FAILED)
        gate.set()
        # The agent's Ready write loses; it deletes what it pushed.
        target = failed["status"]["target"]
        repository, _, tag = target.partition("/")[2].rpartition(":")

        async def tag_gone() -> bool:
            async with await controller.client() as registry:
                try:
                    await registry.get_manifest(repository, tag)
                except RegistryError as err:
                    return err.status == 404
            return False

        await env.until(tag_gone, "the pushed manifest deleted")
    assert failed["status"]["conditions"][0]["reason"] == s.REASON_SOURCE_DELETED
    assert "image" not in failed["status"]
    events = await env.events_regarding("SandboxSnapshot", "snap")
    assert any(e.get("reason") == s.REASON_SOURCE_DELETED for e in events)


async def _committed_snapshot(
    cluster: Any, env: SnapshotEnv, namespace: str, settings: RegistrySettings, tmp_path: Path
) -> Obj:
    await env.running_sandbox("box")
    await env.snapshot("snap", "box")
    committing = await env.until_phase("snap", s.COMMITTING)
    node = committing["status"]["node"]
    async with running_agent(cluster, namespace, node, settings, FolderCommitter(tmp_path)):
        return await env.until_phase("snap", s.READY)


async def _kept_with(env: SnapshotEnv, reason: str) -> None:
    kept = await env.until_condition("snap", s.CONDITION_IMAGE_DELETED, reason)
    assert kept["metadata"]["deletionTimestamp"]

    async def warned() -> bool:
        events = await env.events_regarding("SandboxSnapshot", "snap")
        return any(e.get("reason") == reason for e in events)

    await env.until(warned, f"a {reason} Event")


async def test_wrong_credentials_keep_the_snapshot_until_the_secret_is_fixed(
    cluster: Any,
    env: SnapshotEnv,
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    registry_settings: RegistrySettings,
    agent_sandbox_crds: list[str],
    oci_registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    # The controller's mounted credentials have a wrong password; the agent pushes with the
    # right ones.
    mine = tmp_path / "controller-auth.json"
    _auth_file(mine, oci_registry, "not-the-password")
    controller_settings = dataclasses.replace(registry_settings, auth_file=str(mine))
    _start_controller(controller_runner, request, namespace, controller_settings)
    ready = await _committed_snapshot(cluster, env, namespace, registry_settings, tmp_path)
    await env.delete(SANDBOX_SNAPSHOTS, "snap")
    await _kept_with(env, s.REASON_CREDENTIALS_REFUSED)
    assert await _manifest_status(registry_settings, env, ready["status"]["image"]) == 200

    # Fixed credentials (the kubelet rewrites a mounted Secret) are read on the next retry;
    # the image goes, then the object.
    _auth_file(mine, oci_registry, oci_registry.password or "")
    await env.until_gone(SANDBOX_SNAPSHOTS, "snap")
    assert await _manifest_status(registry_settings, env, ready["status"]["image"]) == 404


async def test_registry_down_keeps_the_snapshot_until_it_is_back(
    cluster: Any,
    env: SnapshotEnv,
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    agent_sandbox_crds: list[str],
    tmp_path: Path,
) -> None:
    # A registry of this test's own (plain HTTP, no credentials), so it can be stopped.
    supervisor = ProcessSupervisor(tmp_path / "logs")
    try:
        registry, process = start_registry(
            RegistryOptions(tls=False, auth=False),
            supervisor=supervisor,
            workdir=tmp_path / "registry",
            ca=None,
        )
        settings = RegistrySettings(url=registry.url)
        _start_controller(controller_runner, request, namespace, settings)
        ready = await _committed_snapshot(cluster, env, namespace, settings, tmp_path)
        process.stop()
        await env.delete(SANDBOX_SNAPSHOTS, "snap")
        await _kept_with(env, s.REASON_REGISTRY_UNAVAILABLE)

        # Back on the same port and storage: the retry deletes the image, then the object goes.
        _restart(supervisor, tmp_path / "registry" / "registry.yaml")
        await env.until_gone(SANDBOX_SNAPSHOTS, "snap")
        assert await _manifest_status(settings, env, ready["status"]["image"]) == 404
    finally:
        supervisor.stop_all()


async def test_a_registry_refusing_deletes_is_named_and_keep_image_lets_it_go(
    cluster: Any,
    env: SnapshotEnv,
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    agent_sandbox_crds: list[str],
    tmp_path: Path,
) -> None:
    supervisor = ProcessSupervisor(tmp_path / "logs")
    try:
        registry, process = start_registry(
            RegistryOptions(tls=False, auth=False),
            supervisor=supervisor,
            workdir=tmp_path / "registry",
            ca=None,
        )
        settings = RegistrySettings(url=registry.url)
        _start_controller(controller_runner, request, namespace, settings)
        ready = await _committed_snapshot(cluster, env, namespace, settings, tmp_path)
        # The same registry, restarted with deletes disabled (distribution's default).
        process.stop()
        config = tmp_path / "registry" / "registry.yaml"
        document = yaml.safe_load(config.read_text())
        document["storage"]["delete"]["enabled"] = False
        config.write_text(yaml.safe_dump(document))
        _restart(supervisor, config)
        await env.delete(SANDBOX_SNAPSHOTS, "snap")
        kept = await env.until_condition("snap", s.CONDITION_IMAGE_DELETED, s.REASON_DELETE_REFUSED)
        message = next(
            c["message"] for c in kept["status"]["conditions"] if c["type"] == "ImageDeleted"
        )
        assert "405" in message
        assert s.ANNOTATION_KEEP_IMAGE in message
        await env.patch(
            SANDBOX_SNAPSHOTS,
            "snap",
            {"metadata": {"annotations": {s.ANNOTATION_KEEP_IMAGE: "true"}}},
        )
        await env.until_gone(SANDBOX_SNAPSHOTS, "snap")
        assert await _manifest_status(settings, env, ready["status"]["image"]) == 200
    finally:
        supervisor.stop_all()


def _restart(supervisor: ProcessSupervisor, config: Path) -> None:
    """Start the registry again from its configuration (same port and storage)."""
    argv = [str(versions.bin_dir() / "registry"), "serve", str(config)]
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none"}
    supervisor.start("registry-restarted", argv, env=env)


async def test_a_claim_from_a_snapshot_runs_its_image_and_never_adopts_a_warm_sandbox(
    cluster: Any,
    env: SnapshotEnv,
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    registry_settings: RegistrySettings,
    agent_sandbox_crds: list[str],
    tmp_path: Path,
) -> None:
    names = ("warmpool", "claim", "snapshot")
    _start_controller(controller_runner, request, namespace, registry_settings, names=names)
    pod = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    await env.create(SANDBOX_TEMPLATES, {"metadata": {"name": "tpl"}, "spec": {"podTemplate": pod}})
    pool_spec = {"replicas": 1, "sandboxTemplateRef": {"name": "tpl"}}
    await env.create(SANDBOX_WARM_POOLS, {"metadata": {"name": "pool"}, "spec": pool_spec})

    async def warm_member_ready() -> bool:
        obj = await env.get(SANDBOX_WARM_POOLS, "pool")
        return ((obj or {}).get("status") or {}).get("readyReplicas") == 1

    await env.until(warm_member_ready, "a ready warm Sandbox the claim could adopt")
    annotations = {ANNOTATION_SNAPSHOT: "snap", ANNOTATION_SNAPSHOT_PULL_SECRET: SECRET}
    claim = {"metadata": {"name": "fork", "annotations": annotations}}

    # Before the snapshot exists, the claim says why it waits.
    await env.create(SANDBOX_CLAIMS, {**claim, "spec": {"warmPoolRef": {"name": "pool"}}})

    async def waiting() -> bool:
        obj = await env.get(SANDBOX_CLAIMS, "fork")
        conds = ((obj or {}).get("status") or {}).get("conditions") or []
        return any(c.get("reason") == "SnapshotNotReady" for c in conds)

    await env.until(waiting, "the claim's SnapshotNotReady condition")
    ready = await _committed_snapshot(cluster, env, namespace, registry_settings, tmp_path)

    async def forked() -> Obj | None:
        return await env.get(SANDBOXES, "fork")

    sandbox = await env.until(forked, "the claim's Sandbox")
    pod_spec = sandbox["spec"]["podTemplate"]["spec"]
    assert pod_spec["containers"][0]["image"] == ready["status"]["image"]
    assert {"name": SECRET} in pod_spec["imagePullSecrets"]
    assert sandbox["metadata"]["labels"][c.LABEL_LAUNCH_TYPE] == c.LAUNCH_TYPE_COLD


async def test_a_commit_no_agent_finishes_times_out(
    env: SnapshotEnv,
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    registry_settings: RegistrySettings,
    agent_sandbox_crds: list[str],
) -> None:
    _start_controller(controller_runner, request, namespace, registry_settings, commit_timeout=3.0)
    await env.running_sandbox("box")
    await env.snapshot("snap", "box")
    failed = await env.until_phase("snap", s.FAILED)
    (ready,) = failed["status"]["conditions"]
    assert ready["reason"] == s.REASON_TIMED_OUT
    assert failed["status"]["node"]  # it was Committing on that node
    assert "agent-sandbox-snapshotter" in ready["message"]
    assert failed["status"]["completionTime"]
    # Nothing was pushed: it goes without asking the registry.
    await env.delete(SANDBOX_SNAPSHOTS, "snap")
    await env.until_gone(SANDBOX_SNAPSHOTS, "snap")
