"""E2B snapshots through the gateway, driven by the real ``e2b`` SDK, against a real
kube-apiserver (kwok) and the local cluster's real OCI registry (``--cluster-registry=tls``).

The gateway, the Sandbox, claim and SandboxSnapshot controllers and the snapshot node agent
run in-process, each as its ServiceAccount with its generated RBAC. Only the agent's committer
differs from a node's: kwok runs no containers, so it pushes a layer made from a folder (the
extensions' ``FolderCommitter``). Covered: ``create_snapshot`` (Ready, pushed), the memory mode
failing on a kwok node (no checkpoint API) with what is missing and leaving nothing behind,
the web console's Snapshot action, ``list_snapshots``,
``Sandbox.create(<snapshot id>)`` (a cold Sandbox running the snapshot's image),
``fork``, ``delete_snapshot`` (the image leaves the registry), another tenant that sees
and uses none of it, and ``pause`` keeping the files (the state keeper's snapshot; the resumed
Pod runs its image); and with ``--pause-keeps-memory``, ``pause`` asking for the memory on
that node that cannot checkpoint, which keeps the files instead and says why.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b import AsyncSandbox
from e2b.exceptions import SandboxException
from gateway_stack import EXTENSIONS, GatewayStack, start_controllers, start_gateway

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.gateway import tenants
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import kwok_template_spec, warm_template
from kube_agent_sandbox.testing.nsapi import NamespaceApi
from kube_agent_sandbox.testing.registry import RunningRegistry

# The snapshot agent's runner and kwok committer live with the extensions' integration tests.
_EXTENSIONS_TESTS = Path(__file__).parents[3] / "extensions" / "tests" / "integration"
if str(_EXTENSIONS_TESTS) not in sys.path:
    sys.path.append(str(_EXTENSIONS_TESTS))
from snapshot_agent_runner import (  # noqa: E402
    give_container_id,
    manifest_status,
    registry_settings,
    snapshot_options,
    start_agent,
)

pytestmark = pytest.mark.integration


@dataclass
class Scene:
    """The stack of one test: the gateway, two tenants' keys, a running sandbox of ``key``'s
    tenant whose node agent runs, and the namespace's API."""

    stack: GatewayStack
    env: NamespaceApi
    settings: RegistrySettings
    key: str
    other_key: str
    sbx: AsyncSandbox
    sandbox_name: str


@contextlib.asynccontextmanager
async def _scene(
    cluster: ClusterAccess,
    namespace: str,
    other_namespace: str,
    controller_runner: ControllerRunner,
    oci_registry: RunningRegistry,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    pause_keeps_memory: bool = False,
) -> AsyncIterator[Scene]:
    settings = registry_settings(oci_registry, tmp_path)
    start_controllers(
        controller_runner,
        rootpath=request.config.rootpath,
        namespace=namespace,
        options=snapshot_options(settings),
        extensions=(*EXTENSIONS, "snapshot"),
    )
    secret_file = tmp_path / "hmac"
    secret_file.write_text(secrets.token_hex(32))
    stack = start_gateway(
        controller_runner,
        namespace=namespace,
        secret_file=secret_file,
        pause_keeps_memory=pause_keeps_memory,
    )
    monkeypatch.setenv("E2B_API_URL", stack.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", stack.url)
    for name in ("E2B_API_KEY", "E2B_DEBUG", "E2B_DOMAIN"):
        monkeypatch.delenv(name, raising=False)
    try:
        cluster.apply(
            warm_template(
                "base",
                template_spec=kwok_template_spec("e2b-base:test"),
                replicas=1,
                namespace=namespace,
            )
        )
        key, other_key = tenants.generate_key(), tenants.generate_key()
        # both keys live in the gateway's namespace (here the first tenant's)
        cluster.apply(tenants.key_secret(namespace, key, gateway_namespace=namespace))
        cluster.apply(tenants.key_secret(other_namespace, other_key, gateway_namespace=namespace))
        async with NamespaceApi.connect(cluster.kubeconfig, namespace) as env:

            async def keys_seen() -> bool:
                return stack.state.tenants.authenticate(other_key) is not None

            await env.until(keys_seen, "the gateway sees the API keys")
            sbx = await AsyncSandbox.create("base", timeout=120, api_key=key)
            claim = await env.get(SANDBOX_CLAIMS, sbx.sandbox_id)
            assert claim is not None
            sandbox_name = claim["status"]["sandbox"]["name"]
            node = await give_container_id(env, sandbox_name)
            start_agent(controller_runner, namespace, node, settings, tmp_path)
            yield Scene(stack, env, settings, key, other_key, sbx, sandbox_name)
    finally:
        stack.stop()


async def _saved_on_pause(scene: Scene) -> keepstate.ResumeFrom:
    """The state the pause's snapshot saved, once the Pod has gone."""

    async def saved_state() -> keepstate.ResumeFrom | None:
        box = await scene.env.get(SANDBOXES, scene.sandbox_name)
        annotations = (box or {}).get("metadata", {}).get("annotations") or {}
        return keepstate.ResumeFrom.parse(annotations.get(keepstate.ANNOTATION_RESUME_FROM))

    kept = await scene.env.until(saved_state, "the pause's snapshot to be saved")
    suspend_snapshot = await scene.env.get(SANDBOX_SNAPSHOTS, kept.snapshot)
    assert suspend_snapshot is not None
    assert suspend_snapshot["status"]["phase"] == "Ready"
    assert kept.image == suspend_snapshot["status"]["image"]
    await scene.env.until_gone(PODS, scene.sandbox_name)
    return kept


async def _connect_runs(scene: Scene, image: str) -> AsyncSandbox:
    """``Sandbox.connect``: the resumed Pod runs ``image``."""
    resumed = await AsyncSandbox.connect(scene.sbx.sandbox_id, api_key=scene.key)

    async def resumed_pod() -> dict[str, Any] | None:
        return await scene.env.get(PODS, scene.sandbox_name)

    pod = await scene.env.until(resumed_pod, "the resumed Pod")
    assert pod["spec"]["containers"][0]["image"] == image
    return resumed


@pytest.fixture
def open_scene(
    cluster: ClusterAccess,
    namespace: str,
    other_namespace: str,
    agent_sandbox_crds: list[str],
    controller_runner: ControllerRunner,
    oci_registry: RunningRegistry,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., contextlib.AbstractAsyncContextManager[Scene]]:
    """:func:`_scene` with this test's fixtures; keyword options left to the test."""
    assert "sandboxsnapshots.extensions.agents.x-k8s.io" in agent_sandbox_crds
    return functools.partial(
        _scene,
        cluster,
        namespace,
        other_namespace,
        controller_runner,
        oci_registry,
        request,
        tmp_path,
        monkeypatch,
    )


async def test_e2b_sdk_snapshot_verbs(
    open_scene: Callable[..., contextlib.AbstractAsyncContextManager[Scene]],
) -> None:
    async with open_scene() as scene:
        env, settings, sbx, sandbox_name = scene.env, scene.settings, scene.sbx, scene.sandbox_name
        key, other_key, stack = scene.key, scene.other_key, scene.stack
        # -- create_snapshot: Ready, pushed, recording the pool ----------------------
        info = await sbx.create_snapshot(name="saved", mode="filesystem")
        assert info.snapshot_id == "saved"
        assert info.names == ["saved"]
        saved = await env.get(SANDBOX_SNAPSHOTS, "saved")
        assert saved is not None
        assert saved["status"]["phase"] == "Ready"
        assert saved["spec"]["sandboxName"] == sandbox_name
        assert saved["metadata"]["annotations"][c.ANNOTATION_SNAPSHOT_WARM_POOL] == "base"
        image = saved["status"]["image"]
        assert await manifest_status(settings, image) == 200
        assert await sbx.is_running()  # the sandbox keeps running

        # -- the web console's Snapshot action: the same, answered with the image ------
        async with httpx.AsyncClient(base_url=stack.url, timeout=120) as http:
            console = f"/console/api/sandboxes/{sbx.sandbox_id}/snapshot"
            taken = await http.post(console, headers={"X-API-KEY": key})
            assert taken.status_code == 201, taken.text
            shot = taken.json()
            assert shot["image"].split("@")[1].startswith("sha256:")
            theirs = await http.post(console, headers={"X-API-KEY": other_key})
            assert theirs.status_code == 404
        assert await AsyncSandbox.delete_snapshot(shot["snapshotID"], api_key=key) is True
        await env.until_gone(SANDBOX_SNAPSHOTS, shot["snapshotID"])

        # -- memory mode: tried; the kwok node cannot checkpoint, so the controller's ----
        # -- MemorySnapshotUnsupported reaches the SDK and the SandboxSnapshot goes ----
        with pytest.raises(SandboxException) as refused:
            await sbx.create_snapshot(name="live", mode="full")
        assert "400" in str(refused.value)
        assert "--kubelet-checkpoints-dir" in str(refused.value)
        await env.until_gone(SANDBOX_SNAPSHOTS, "live")

        # -- list_snapshots ----------------------------------------------------------
        listed = await AsyncSandbox.list_snapshots(api_key=key).next_items()
        assert [s.snapshot_id for s in listed] == ["saved"]
        by_box = AsyncSandbox.list_snapshots(sandbox_id=sbx.sandbox_id, api_key=key)
        assert [s.snapshot_id for s in await by_box.next_items()] == ["saved"]

        # -- another tenant sees and uses none of it ---------------------------------
        assert await AsyncSandbox.list_snapshots(api_key=other_key).next_items() == []
        assert await AsyncSandbox.delete_snapshot("saved", api_key=other_key) is False
        with pytest.raises(SandboxException) as not_theirs:
            await AsyncSandbox.create("saved", api_key=other_key)
        assert "404" in str(not_theirs.value) or "not found" in str(not_theirs.value)

        # -- Sandbox.create(<snapshot id>): a cold Sandbox running the snapshot's image
        fork = await AsyncSandbox.create("saved", timeout=120, api_key=key)
        fork_claim = await env.get(SANDBOX_CLAIMS, fork.sandbox_id)
        assert fork_claim is not None
        assert fork_claim["metadata"]["annotations"][c.ANNOTATION_SNAPSHOT] == "saved"
        fork_box = await env.get(SANDBOXES, fork_claim["status"]["sandbox"]["name"])
        assert fork_box is not None
        pod_spec = fork_box["spec"]["podTemplate"]["spec"]
        assert pod_spec["containers"][0]["image"] == image
        await fork.kill()

        # -- fork: one snapshot, each fork a Sandbox running its image ----------------
        (forked,) = await sbx.fork(count=1, timeout=60)
        assert isinstance(forked, AsyncSandbox), forked
        assert await forked.is_running()
        forked_claim = await env.get(SANDBOX_CLAIMS, forked.sandbox_id)
        assert forked_claim is not None
        fork_snapshot = forked_claim["metadata"]["annotations"][c.ANNOTATION_SNAPSHOT]
        assert fork_snapshot.startswith(f"{sbx.sandbox_id}-")
        await forked.kill()
        assert await AsyncSandbox.delete_snapshot(fork_snapshot, api_key=key) is True
        await env.until_gone(SANDBOX_SNAPSHOTS, fork_snapshot)

        # -- delete_snapshot: the object goes, and its image with it ----------------
        assert await AsyncSandbox.delete_snapshot("saved", api_key=key) is True
        await env.until_gone(SANDBOX_SNAPSHOTS, "saved")
        assert await manifest_status(settings, image) == 404
        assert await AsyncSandbox.list_snapshots(api_key=key).next_items() == []

        # -- pause keeps the files: the state keeper saves the Pod, connect resumes it
        # from the saved image (--pause-keeps-filesystem, on by default) ---------------
        await sbx.pause()
        kept = await _saved_on_pause(scene)
        resumed = await _connect_runs(scene, kept.image)
        await resumed.kill()
        assert await AsyncSandbox.delete_snapshot(kept.snapshot, api_key=key) is True


async def test_pause_keeps_memory_on_a_node_that_cannot_keeps_the_files_and_says_so(
    open_scene: Callable[..., contextlib.AbstractAsyncContextManager[Scene]],
) -> None:
    # --pause-keeps-memory; the unmodified SDK's pause() sends no memory field (E2B: a full
    # snapshot); the kwok node's agent cannot checkpoint, so the files are kept instead.
    async with open_scene(pause_keeps_memory=True) as scene:
        claim = await scene.env.get(SANDBOX_CLAIMS, scene.sbx.sandbox_id)
        assert claim is not None
        annotations = claim["metadata"]["annotations"]
        assert annotations[keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND] == keepstate.MODE_MEMORY
        await scene.sbx.pause()
        kept = await _saved_on_pause(scene)
        box = await scene.env.get(SANDBOXES, scene.sandbox_name)
        assert box is not None
        progress = keepstate.SuspendProgress.parse(
            box["metadata"]["annotations"][keepstate.ANNOTATION_SUSPEND_SNAPSHOT]
        )
        assert progress is not None
        assert (progress.snapshot, progress.mode) == (kept.snapshot, keepstate.MODE_FILESYSTEM)
        assert kept.snapshot.endswith("-filesystem")
        failed = await scene.env.get(SANDBOX_SNAPSHOTS, kept.snapshot.removesuffix("-filesystem"))
        assert failed is not None
        assert failed["spec"]["mode"] == keepstate.MODE_MEMORY
        assert failed["status"]["phase"] == "Failed"

        async def memory_not_kept() -> dict[str, Any] | None:
            events = await scene.env.events_regarding("Sandbox", scene.sandbox_name)
            reason = keepstate.REASON_MEMORY_NOT_KEPT
            return next((e for e in events if e.get("reason") == reason), None)

        warning = await scene.env.until(memory_not_kept, "a MemoryNotKept Event")
        assert "--kubelet-checkpoints-dir" in warning["note"]  # what the node agent lacks
        resumed = await _connect_runs(scene, kept.image)
        await resumed.kill()
