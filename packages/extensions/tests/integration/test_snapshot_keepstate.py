"""A suspend that keeps the filesystem, against a real kube-apiserver (kwok nodes) and the real
registry: the core Sandbox controller and the state keeper run as in ``--extensions
--snapshot-registry`` (one process, generated RBAC), the node agent in-process with the
committer of ``snapshot_support`` (kwok runs no containers)."""

from __future__ import annotations

import dataclasses
import json
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

from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_SNAPSHOTS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.keepstate import REASON_STATE_SAVED
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.registry import RunningRegistry

pytestmark = pytest.mark.integration

OPT_IN = {k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_FILESYSTEM}
SNAP = "box-suspend-2"  # the Sandbox's generation is 2 once suspended


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


async def _set_mode(env: SnapshotEnv, mode: str) -> None:
    await env.patch(SANDBOXES, "box", {"spec": {"operatingMode": mode}})


async def _condition(env: SnapshotEnv, type_: str, reason: str) -> Obj:
    async def probe() -> Obj | None:
        sandbox = await env.get(SANDBOXES, "box")
        for cond in ((sandbox or {}).get("status") or {}).get("conditions") or []:
            if cond["type"] == type_ and cond["reason"] == reason:
                return dict(cond)
        return None

    return await env.until(probe, f"Sandbox box {type_}={reason}")


async def _event(env: SnapshotEnv, reason: str) -> Obj:
    async def probe() -> Obj | None:
        events = await env.events_regarding("Sandbox", "box")
        return next((e for e in events if e.get("reason") == reason), None)

    return await env.until(probe, f"a {reason} Event on Sandbox box")


async def _live_pod(env: SnapshotEnv) -> Obj:
    pod = await env.get(PODS, "box")
    assert pod is not None, "the Pod was deleted"
    assert not pod["metadata"].get("deletionTimestamp"), "the Pod is being deleted"
    return pod


async def _resumed_pod(env: SnapshotEnv) -> Obj:
    async def resumed() -> Obj | None:
        pod = await env.get(PODS, "box")
        return pod if pod and not pod["metadata"].get("deletionTimestamp") else None

    return await env.until(resumed, "the Pod of the resume")


def _annotation(sandbox: Obj | None, key: str) -> str | None:
    return ((sandbox or {}).get("metadata", {}).get("annotations") or {}).get(key)


async def _suspended_while_committing(env: SnapshotEnv, annotations: dict[str, str]) -> Obj:
    """An opted-in running Sandbox, suspended: its snapshot is Committing, its Pod kept."""
    pod = await env.running_sandbox("box", annotations)
    await _set_mode(env, "Suspended")
    committing = await env.until_phase(SNAP, s.COMMITTING)
    assert (await _live_pod(env))["metadata"]["uid"] == pod["metadata"]["uid"]
    return committing


async def test_the_pod_stays_until_the_snapshot_is_ready_and_the_resume_runs_its_image(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    committing = await _suspended_while_committing(env, OPT_IN)
    assert committing["metadata"]["annotations"]["extensions.agents.x-k8s.io/saved-on-suspend"]
    assert not committing["metadata"].get("ownerReferences")  # outlives the Sandbox
    saving = await _condition(env, "Suspended", k.REASON_SAVING_STATE)
    assert SNAP in saving["message"]

    async with running_agent(
        cluster, namespace, committing["status"]["node"], controller, FolderCommitter(tmp_path)
    ):
        ready = await env.until_phase(SNAP, s.READY)
        await env.until_gone(PODS, "box")
    await _condition(env, "Suspended", "PodTerminated")
    sandbox = await env.get(SANDBOXES, "box")
    saved = k.ResumeFrom.parse(_annotation(sandbox, k.ANNOTATION_RESUME_FROM))
    assert saved is not None
    assert (saved.image, saved.container, saved.base) == (
        ready["status"]["image"],
        "main",
        "busybox",
    )
    event = await _event(env, REASON_STATE_SAVED)
    assert SNAP in event["note"]

    await _set_mode(env, "Running")
    pod = await _resumed_pod(env)
    assert pod["spec"]["containers"][0]["image"] == ready["status"]["image"]
    # The user's template is unchanged.
    sandbox = await env.get(SANDBOXES, "box")
    assert sandbox is not None
    assert sandbox["spec"]["podTemplate"]["spec"]["containers"][0]["image"] == "busybox"


async def test_a_failed_push_keeps_the_pod_names_the_cause_and_deleting_the_snapshot_retries(
    cluster: Any,
    env: SnapshotEnv,
    controller: RegistrySettings,
    namespace: str,
    oci_registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    committing = await _suspended_while_committing(env, OPT_IN)
    node = committing["status"]["node"]
    wrong = dataclasses.replace(
        controller, auth_file=auth_file(tmp_path / "wrong.json", oci_registry, "not-the-password")
    )
    async with running_agent(cluster, namespace, node, wrong, FolderCommitter(tmp_path)):
        await env.until_phase(SNAP, s.FAILED)
        cond = await _condition(env, "Suspended", k.REASON_STATE_NOT_SAVED)
    assert s.REASON_PUSH_FAILED in cond["message"]
    assert f"delete SandboxSnapshot {SNAP}" in cond["message"]
    event = await _event(env, k.REASON_STATE_NOT_SAVED)
    assert s.REASON_PUSH_FAILED in event["note"]
    assert event["type"] == "Warning"
    pod = await _live_pod(env)  # the sandbox stays usable

    # The retry: delete the failed snapshot; the keeper makes it again and this time it works.
    first = await env.get(SANDBOX_SNAPSHOTS, SNAP)
    assert first is not None
    await env.delete(SANDBOX_SNAPSHOTS, SNAP)

    async def made_again() -> Obj | None:
        again = await env.get(SANDBOX_SNAPSHOTS, SNAP)
        fresh = again and again["metadata"]["uid"] != first["metadata"]["uid"]
        return again if fresh and s.phase_of(again) == s.COMMITTING else None

    await env.until(made_again, f"SandboxSnapshot {SNAP} made again and Committing")
    await _condition(env, "Suspended", k.REASON_SAVING_STATE)
    async with running_agent(cluster, namespace, node, controller, FolderCommitter(tmp_path)):
        await env.until_phase(SNAP, s.READY)
        await env.until_gone(PODS, "box")
    saved = k.ResumeFrom.parse(
        _annotation(await env.get(SANDBOXES, "box"), k.ANNOTATION_RESUME_FROM)
    )
    assert saved is not None
    assert saved.pod == pod["metadata"]["uid"]


async def test_a_failed_save_then_resume_makes_the_sandbox_ready_again(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    # Memory is asked for on a node agent that cannot checkpoint: it fails with its wording.
    committing = await _suspended_while_committing(
        env, {k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_MEMORY}
    )
    node = committing["status"]["node"]
    async with running_agent(cluster, namespace, node, controller, FolderCommitter(tmp_path)):
        failed = await env.until_phase(SNAP, s.FAILED)
    assert failed["status"]["conditions"][0]["reason"] == s.REASON_MEMORY_UNSUPPORTED
    cond = await _condition(env, "Suspended", k.REASON_STATE_NOT_SAVED)
    assert s.REASON_MEMORY_UNSUPPORTED in cond["message"]
    assert "CRIU" in cond["message"]
    pod = await _live_pod(env)
    await _set_mode(env, "Running")
    await _condition(env, "Ready", "DependenciesReady")
    assert (await _live_pod(env))["metadata"]["uid"] == pod["metadata"]["uid"]


async def test_memory_with_a_fallback_on_a_node_that_cannot_keeps_the_files_and_resumes_them(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    # The same agent that cannot checkpoint; the Sandbox accepts the files alone.
    committing = await _suspended_while_committing(
        env,
        {
            k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_MEMORY,
            k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK: k.MODE_FILESYSTEM,
        },
    )
    fallback = f"{SNAP}-filesystem"
    async with running_agent(
        cluster, namespace, committing["status"]["node"], controller, FolderCommitter(tmp_path)
    ):
        failed = await env.until_phase(SNAP, s.FAILED)
        ready = await env.until_phase(fallback, s.READY)
        await env.until_gone(PODS, "box")
    assert failed["status"]["conditions"][0]["reason"] == s.REASON_MEMORY_UNSUPPORTED
    assert ready["spec"]["mode"] == k.MODE_FILESYSTEM
    warning = await _event(env, k.REASON_MEMORY_NOT_KEPT)
    assert warning["type"] == "Warning"
    assert "CRIU" in warning["note"]  # names what the node lacks
    sandbox = await env.get(SANDBOXES, "box")
    progress = k.SuspendProgress.parse(_annotation(sandbox, k.ANNOTATION_SUSPEND_SNAPSHOT))
    assert progress is not None
    assert (progress.snapshot, progress.phase, progress.mode) == (
        fallback,
        k.PHASE_SAVED,
        k.MODE_FILESYSTEM,
    )

    await _set_mode(env, "Running")
    pod = await _resumed_pod(env)
    assert pod["spec"]["containers"][0]["image"] == ready["status"]["image"]


async def test_an_unknown_mode_keeps_the_pod_and_says_which_values_work(
    env: SnapshotEnv, controller: RegistrySettings
) -> None:
    await env.running_sandbox("box", {k.ANNOTATION_SNAPSHOT_ON_SUSPEND: "Disk"})
    await _set_mode(env, "Suspended")
    cond = await _condition(env, "Suspended", k.REASON_STATE_NOT_SAVED)
    assert "'Disk'" in cond["message"]
    assert "Filesystem, Memory" in cond["message"]
    await _live_pod(env)
    assert await env.get(SANDBOX_SNAPSHOTS, SNAP) is None


async def test_resumed_while_committing_keeps_the_same_pod_and_reports_no_save(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    committing = await _suspended_while_committing(env, OPT_IN)
    pod = await _live_pod(env)
    await _set_mode(env, "Running")
    await _condition(env, "Ready", "DependenciesReady")
    async with running_agent(
        cluster, namespace, committing["status"]["node"], controller, FolderCommitter(tmp_path)
    ):
        await env.until_phase(SNAP, s.READY)
    # The Pod ran on after the commit: the snapshot is an ordinary one, not the Sandbox's state.
    sandbox = await env.get(SANDBOXES, "box")
    assert _annotation(sandbox, k.ANNOTATION_RESUME_FROM) is None
    assert (await _live_pod(env))["metadata"]["uid"] == pod["metadata"]["uid"]

    # Suspended again: a new snapshot (new generation), not the stale one.
    await _set_mode(env, "Suspended")
    await env.until_phase("box-suspend-4", s.COMMITTING)
    await _live_pod(env)


async def test_two_suspends_in_a_row_make_one_snapshot(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings, namespace: str, tmp_path: Path
) -> None:
    committing = await _suspended_while_committing(env, OPT_IN)
    await _set_mode(env, "Suspended")  # again: nothing changes, no second snapshot
    await env.patch(SANDBOXES, "box", {"metadata": {"labels": {"poke": "1"}}})
    async with running_agent(
        cluster, namespace, committing["status"]["node"], controller, FolderCommitter(tmp_path)
    ):
        await env.until_phase(SNAP, s.READY)
        await env.until_gone(PODS, "box")
    # The keeper wrote Saved after both suspends reached it: one snapshot, the first one.
    snapshots = await env.list(SANDBOX_SNAPSHOTS)
    assert [x["metadata"]["name"] for x in snapshots] == [SNAP]
    assert snapshots[0]["metadata"]["uid"] == committing["metadata"]["uid"]
    progress = k.SuspendProgress.parse(
        _annotation(await env.get(SANDBOXES, "box"), k.ANNOTATION_SUSPEND_SNAPSHOT)
    )
    assert progress is not None
    assert (progress.snapshot, progress.phase) == (SNAP, k.PHASE_SAVED)


async def test_the_sandbox_deleted_mid_snapshot_leaves_a_failed_snapshot(
    cluster: Any, env: SnapshotEnv, controller: RegistrySettings
) -> None:
    await _suspended_while_committing(env, OPT_IN)
    await env.delete(SANDBOXES, "box")
    await env.until_gone(SANDBOXES, "box")
    failed = await env.until_phase(SNAP, s.FAILED)
    assert failed["status"]["conditions"][0]["reason"] == s.REASON_SOURCE_DELETED


async def test_without_the_keeper_the_opt_in_is_ignored_and_the_pod_goes(
    agent_sandbox_crds: list[str],
    env: SnapshotEnv,
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
) -> None:
    # --extensions without --snapshot-registry: nobody would save, so nothing waits.
    from extensions_runner import start_extensions_controller

    from kube_agent_sandbox.controller.config import ControllerOptions

    start_extensions_controller(
        controller_runner,
        rootpath=request.config.rootpath,
        namespace=namespace,
        options=ControllerOptions(extensions=True),
        names=(),
    )
    await env.running_sandbox("box", OPT_IN)
    await _set_mode(env, "Suspended")
    await env.until_gone(PODS, "box")
    assert await env.list(SANDBOX_SNAPSHOTS) == []
    assert json.dumps(await env.get(SANDBOXES, "box")).count(k.ANNOTATION_SUSPEND_SNAPSHOT) == 0


async def test_a_templates_opt_in_reaches_the_adopted_warm_sandbox_whose_suspend_keeps_the_pod(
    env: SnapshotEnv,
    namespace: str,
    controller_runner: ControllerRunner,
    request: pytest.FixtureRequest,
    registry_settings: RegistrySettings,
    agent_sandbox_crds: list[str],
) -> None:
    names = ("warmpool", "claim", "snapshot")
    start_snapshot_controller(controller_runner, request, namespace, registry_settings, names=names)
    pod_template = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    await env.create(
        SANDBOX_TEMPLATES,
        {"metadata": {"name": "tpl", "annotations": OPT_IN}, "spec": {"podTemplate": pod_template}},
    )
    pool_spec = {"replicas": 1, "sandboxTemplateRef": {"name": "tpl"}}
    await env.create(SANDBOX_WARM_POOLS, {"metadata": {"name": "pool"}, "spec": pool_spec})

    async def warm_member_ready() -> bool:
        obj = await env.get(SANDBOX_WARM_POOLS, "pool")
        return ((obj or {}).get("status") or {}).get("readyReplicas") == 1

    await env.until(warm_member_ready, "a ready warm Sandbox")
    await env.create(
        SANDBOX_CLAIMS, {"metadata": {"name": "claim"}, "spec": {"warmPoolRef": {"name": "pool"}}}
    )

    async def adopted() -> Obj | None:
        claim = await env.get(SANDBOX_CLAIMS, "claim")
        name = ((claim or {}).get("status") or {}).get("sandbox", {}).get("name")
        sandbox = await env.get(SANDBOXES, name) if name else None
        return sandbox if _annotation(sandbox, k.ANNOTATION_SNAPSHOT_ON_SUSPEND) else None

    sandbox = await env.until(adopted, "the adopted Sandbox carrying the template's opt-in")
    name = sandbox["metadata"]["name"]
    assert name.startswith("pool-")  # warm, not cold
    pod = await env.get(PODS, name)
    assert pod is not None
    await env.report_container(pod)
    await env.patch(SANDBOXES, name, {"spec": {"operatingMode": "Suspended"}})

    async def committing() -> Obj | None:
        for snap in await env.list(SANDBOX_SNAPSHOTS):
            if snap["spec"]["sandboxName"] == name and s.phase_of(snap) == s.COMMITTING:
                return dict(snap)
        return None

    await env.until(committing, f"a Committing snapshot of {name}")
    kept = await env.get(PODS, name)
    assert kept is not None
    assert not kept["metadata"].get("deletionTimestamp")
