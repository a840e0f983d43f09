"""A Sandbox (not a claim) created from a snapshot, against a real kube-apiserver (kwok nodes)
and the real registry: the core Sandbox controller and the snapshot resolver run as in
``--extensions --snapshot-registry`` (one process, generated RBAC), the node agent in-process
with the committer of ``snapshot_support`` (kwok runs no containers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from snapshot_support import (
    FolderCommitter,
    SnapshotEnv,
    auth_file,
    running_agent,
    start_snapshot_controller,
)

from kube_agent_sandbox.api import fromsnapshot as f
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.fromsnapshot import (
    REASON_SNAPSHOT_NOT_READY,
    REASON_SNAPSHOT_RESOLVED,
)
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.registry import RunningRegistry

pytestmark = pytest.mark.integration

PULL_SECRET = "snapshot-registry"


@pytest.fixture
def registry_settings(oci_registry: RunningRegistry, tmp_path: Path) -> RegistrySettings:
    return RegistrySettings(
        url=oci_registry.url,
        auth_file=auth_file(tmp_path / "auth.json", oci_registry, oci_registry.password or ""),
        ca_file=str(oci_registry.ca_file or ""),
    )


@pytest.fixture
async def env(cluster: Any, namespace: str) -> Any:
    async with SnapshotEnv.connect(cluster.kubeconfig, namespace) as e:
        yield e


@pytest.fixture
def controller(
    agent_sandbox_crds: list[str],
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    registry_settings: RegistrySettings,
) -> RegistrySettings:
    start_snapshot_controller(controller_runner, request, namespace, registry_settings)
    return registry_settings


async def _from_snapshot(env: SnapshotEnv, name: str) -> None:
    annotations = {f.ANNOTATION_SNAPSHOT: "snap", k.ANNOTATION_SNAPSHOT_PULL_SECRET: PULL_SECRET}
    pod_spec = {"containers": [{"name": "main", "image": "busybox"}]}
    await env.create(
        SANDBOXES,
        {
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"podTemplate": {"spec": pod_spec}},
        },
    )


async def _waiting(env: SnapshotEnv, name: str, text: str) -> Obj:
    async def probe() -> Obj | None:
        sandbox = await env.get(SANDBOXES, name)
        for cond in ((sandbox or {}).get("status") or {}).get("conditions") or []:
            if cond["type"] == "Ready" and cond["reason"] == f.REASON_WAITING_FOR_SNAPSHOT:
                return dict(cond) if text in cond["message"] else None
        return None

    return await env.until(probe, f"Sandbox {name} WaitingForSnapshot with {text!r}")


async def _event(env: SnapshotEnv, name: str, reason: str, text: str) -> Obj:
    async def probe() -> Obj | None:
        events = await env.events_regarding("Sandbox", name)
        return next(
            (e for e in events if e.get("reason") == reason and text in (e.get("note") or "")),
            None,
        )

    return await env.until(probe, f"a {reason} Event on Sandbox {name}")


async def _pod(env: SnapshotEnv, name: str) -> Obj:
    async def probe() -> Obj | None:
        return await env.get(PODS, name)

    return await env.until(probe, f"the Pod of {name}")


async def test_no_pod_until_the_snapshot_is_ready_then_it_runs_the_snapshots_image(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    # Missing: a Warning Event, the condition says why, no Pod (nothing crashes).
    await _from_snapshot(env, "fork")
    await _waiting(env, "fork", "SandboxSnapshot snap not found")
    event = await _event(env, "fork", REASON_SNAPSHOT_NOT_READY, "not found")
    assert event["type"] == "Warning"
    assert await env.get(PODS, "fork") is None

    # Not Ready yet: the agent that would commit it is not running, so it stays Committing.
    await env.running_sandbox("box")
    await env.snapshot("snap", "box")
    committing = await env.until_phase("snap", s.COMMITTING)
    await _waiting(env, "fork", "SandboxSnapshot snap is Committing, not Ready")
    assert await env.get(PODS, "fork") is None

    async with running_agent(
        cluster, namespace, committing["status"]["node"], controller, FolderCommitter(tmp_path)
    ):
        ready = await env.until_phase("snap", s.READY)
    image = ready["status"]["image"]
    pod = await _pod(env, "fork")
    assert pod["spec"]["containers"][0]["image"] == image
    assert {"name": PULL_SECRET} in pod["spec"]["imagePullSecrets"]
    await _event(env, "fork", REASON_SNAPSHOT_RESOLVED, image)
    sandbox = await env.get(SANDBOXES, "fork")
    assert sandbox is not None
    # The user's template is unchanged; the wait message is gone.
    assert sandbox["spec"]["podTemplate"]["spec"]["containers"][0]["image"] == "busybox"
    assert f.ANNOTATION_SNAPSHOT_WAIT not in sandbox["metadata"]["annotations"]

    # A Sandbox created once the snapshot is Ready gets its Pod from the pinned image at once.
    await _from_snapshot(env, "fork2")
    assert (await _pod(env, "fork2"))["spec"]["containers"][0]["image"] == image

    # Once the Pod exists, a changed annotation does nothing.
    await env.patch(SANDBOXES, "fork", {"metadata": {"annotations": {f.ANNOTATION_SNAPSHOT: "x"}}})
    await env.until(lambda: _not_waiting(env, "fork"), "fork's next status")
    live = await env.get(PODS, "fork")
    assert live is not None
    assert live["metadata"]["uid"] == pod["metadata"]["uid"]
    assert live["spec"]["containers"][0]["image"] == image


async def _not_waiting(env: SnapshotEnv, name: str) -> bool:
    sandbox = await env.get(SANDBOXES, name) or {}
    conds = (sandbox.get("status") or {}).get("conditions") or []
    return bool(conds) and all(c["reason"] != f.REASON_WAITING_FOR_SNAPSHOT for c in conds)


async def test_a_failed_snapshot_is_named_with_its_reason_and_makes_no_pod(
    env: SnapshotEnv,
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    registry_settings: RegistrySettings,
    agent_sandbox_crds: list[str],
) -> None:
    # No node agent runs, so the commit times out: a Failed snapshot without an image.
    start_snapshot_controller(
        controller_runner, request, namespace, registry_settings, commit_timeout=3.0
    )
    await env.running_sandbox("box")
    await env.snapshot("snap", "box")
    await env.until_phase("snap", s.FAILED)
    await _from_snapshot(env, "fork")
    cond = await _waiting(env, "fork", "SandboxSnapshot snap failed")
    assert s.REASON_TIMED_OUT in cond["message"]
    event = await _event(env, "fork", REASON_SNAPSHOT_NOT_READY, "failed")
    assert event["type"] == "Warning"
    assert await env.get(PODS, "fork") is None
