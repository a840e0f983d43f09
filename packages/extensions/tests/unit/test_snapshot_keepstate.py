"""The state keeper's names, its snapshot-to-Sandbox mapping and its fallback from a Memory save
the node cannot do (the rest runs against a real kube-apiserver in
tests/integration/test_snapshot_keepstate.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import FakeApi, Obj, Request
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.keepstate import (
    ANNOTATION_SAVED_ON_SUSPEND,
    REASON_INVALID_MODE,
    StateKeeper,
    snapshot_name,
    snapshot_to_sandbox,
)

# An OCI tag (the snapshot's default tag is its name) and a DNS subdomain.
TAG = re.compile(r"^[a-z0-9][a-z0-9.-]{0,127}$")


def test_the_name_is_the_sandbox_and_the_generation() -> None:
    assert snapshot_name("box", 7) == "box-suspend-7"
    assert snapshot_name("box", 7) == snapshot_name("box", 7)
    assert snapshot_name("box", 8) != snapshot_name("box", 7)


def test_a_long_sandbox_name_is_cut_and_hashed_and_stays_a_valid_tag() -> None:
    long_a = "a" * 200
    long_b = "a" * 199 + "b"
    name_a, name_b = snapshot_name(long_a, 3), snapshot_name(long_b, 3)
    assert name_a != name_b
    for name in (name_a, name_b):
        assert len(name) <= 100
        assert TAG.match(name)
        assert name.endswith("-suspend-3")


def test_only_the_keepers_snapshots_wake_their_sandbox() -> None:
    mine = {
        "metadata": {
            "namespace": "ns",
            "name": "box-suspend-2",
            "annotations": {ANNOTATION_SAVED_ON_SUSPEND: "uid"},
        },
        "spec": {"sandboxName": "box"},
    }
    assert snapshot_to_sandbox(mine) == [Request("ns", "box")]
    explicit = {"metadata": {"namespace": "ns", "name": "fork"}, "spec": {"sandboxName": "box"}}
    assert snapshot_to_sandbox(explicit) == []


# -- the fallback of a Memory save the node cannot do (FakeApi: the paths the integration test
# -- cannot reach without a node agent in each state) --------------------------------------

NS = "ns"
MEMORY_WITH_FALLBACK = {
    k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_MEMORY,
    k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK: k.MODE_FILESYSTEM,
}
NO_CRIU = "node n1 cannot checkpoint: the kubelet's ContainerCheckpoint API needs CRIU"


class FakeRecorder:
    """Collects (type, reason, note) of each Event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((type_, reason, note))


@dataclass
class Keeper:
    api: FakeApi
    recorder: FakeRecorder
    keeper: StateKeeper

    async def run(self) -> None:
        await self.keeper.reconcile(Request(NS, "box"))

    def progress(self) -> k.SuspendProgress:
        sandbox = self.api.obj(SANDBOXES, "box", NS)
        assert sandbox is not None
        found = k.SuspendProgress.parse(
            sandbox["metadata"]["annotations"].get(k.ANNOTATION_SUSPEND_SNAPSHOT)
        )
        assert found is not None
        return found

    def snapshot(self, name: str) -> Obj:
        found = self.api.obj(SANDBOX_SNAPSHOTS, name, NS)
        assert found is not None, f"no SandboxSnapshot {name}"
        return found

    def finish(self, name: str, phase: str, reason: str, message: str, **fields: Any) -> None:
        def done(obj: Obj) -> None:
            obj.update(
                s.with_status(obj, phase=phase, reason=reason, message=message, now=NOW, **fields)
            )

        self.api.mutate(SANDBOX_SNAPSHOTS, name, done, NS)


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _keeper(annotations: dict[str, str]) -> Keeper:
    api = FakeApi(default_namespace=NS)
    sandbox = api.add(
        SANDBOXES,
        {
            "metadata": {"name": "box", "generation": 2, "annotations": dict(annotations)},
            "spec": {
                "operatingMode": c.OPERATING_MODE_SUSPENDED,
                "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
            },
        },
    )
    api.add(
        PODS,
        {
            "metadata": {
                "name": "box",
                "ownerReferences": [
                    {
                        "apiVersion": SANDBOXES.api_version,
                        "kind": SANDBOXES.kind,
                        "name": "box",
                        "uid": sandbox["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "status": {"containerStatuses": [{"name": "main", "containerID": "containerd://c1"}]},
        },
    )
    recorder = FakeRecorder()
    keeper = StateKeeper(
        api,
        sandboxes=api.reader(SANDBOXES),
        snapshots=api.reader(SANDBOX_SNAPSHOTS),
        recorder=recorder,
    )
    return Keeper(api, recorder, keeper)


async def test_a_memory_save_the_node_cannot_do_goes_on_as_a_filesystem_snapshot() -> None:
    env = _keeper(MEMORY_WITH_FALLBACK)
    await env.run()
    assert env.snapshot("box-suspend-2")["spec"]["mode"] == k.MODE_MEMORY
    assert env.progress().mode == k.MODE_MEMORY

    env.finish("box-suspend-2", s.FAILED, s.REASON_MEMORY_UNSUPPORTED, NO_CRIU)
    await env.run()
    fallback = env.snapshot("box-suspend-2-filesystem")
    assert fallback["spec"] == {"sandboxName": "box", "mode": k.MODE_FILESYSTEM}
    assert fallback["metadata"]["annotations"][ANNOTATION_SAVED_ON_SUSPEND]
    progress = env.progress()
    assert (progress.snapshot, progress.phase, progress.mode) == (
        "box-suspend-2-filesystem",
        k.PHASE_SAVING,
        k.MODE_FILESYSTEM,
    )
    [(type_, reason, note)] = env.recorder.events
    assert (type_, reason) == ("Warning", k.REASON_MEMORY_NOT_KEPT)
    assert NO_CRIU in note  # what the node lacks
    assert "box-suspend-2-filesystem" in note

    await env.run()  # again: the fallback is not made twice, the Event not repeated
    assert len(env.api.objects(SANDBOX_SNAPSHOTS)) == 2
    assert len(env.recorder.events) == 1

    image = "registry/snapshots/ns@sha256:" + "a" * 64
    env.finish(
        "box-suspend-2-filesystem",
        s.READY,
        s.REASON_PUSHED,
        "pushed",
        image=image,
        containerID="c1",
    )
    await env.run()
    progress = env.progress()
    assert (progress.phase, progress.mode) == (k.PHASE_SAVED, k.MODE_FILESYSTEM)
    assert k.REASON_MEMORY_NOT_KEPT in progress.message
    sandbox = env.api.obj(SANDBOXES, "box", NS)
    assert sandbox is not None
    saved = k.ResumeFrom.parse(sandbox["metadata"]["annotations"][k.ANNOTATION_RESUME_FROM])
    assert saved is not None
    assert (saved.image, saved.container, saved.snapshot) == (
        image,
        "main",
        "box-suspend-2-filesystem",
    )
    assert "the filesystem of Pod box" in env.recorder.events[-1][2]


async def test_a_deleted_fallback_snapshot_is_made_again_as_filesystem() -> None:
    env = _keeper(MEMORY_WITH_FALLBACK)
    await env.run()
    env.finish("box-suspend-2", s.FAILED, s.REASON_MEMORY_UNSUPPORTED, NO_CRIU)
    await env.run()
    await env.api.delete(SANDBOX_SNAPSHOTS, NS, "box-suspend-2-filesystem")
    await env.run()
    assert env.snapshot("box-suspend-2-filesystem")["spec"]["mode"] == k.MODE_FILESYSTEM


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        # no fallback asked for: the Memory save fails and the Pod is kept
        ({k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_MEMORY}, s.REASON_MEMORY_UNSUPPORTED),
        # a failure other than the node's: the files would fail alike; no fallback
        (MEMORY_WITH_FALLBACK, s.REASON_PUSH_FAILED),
    ],
)
async def test_no_fallback_without_the_opt_in_or_for_another_failure(
    annotations: dict[str, str], reason: str
) -> None:
    env = _keeper(annotations)
    await env.run()
    env.finish("box-suspend-2", s.FAILED, reason, "it failed")
    await env.run()
    assert [x["metadata"]["name"] for x in env.api.objects(SANDBOX_SNAPSHOTS)] == ["box-suspend-2"]
    progress = env.progress()
    assert (progress.phase, progress.reason, progress.mode) == (
        k.PHASE_FAILED,
        reason,
        k.MODE_MEMORY,
    )
    assert [e[1] for e in env.recorder.events] == [k.REASON_STATE_NOT_SAVED]


async def test_a_fallback_other_than_filesystem_is_refused_by_name() -> None:
    env = _keeper({**MEMORY_WITH_FALLBACK, k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK: "None"})
    await env.run()
    assert env.api.objects(SANDBOX_SNAPSHOTS) == []
    progress = env.progress()
    assert (progress.phase, progress.reason) == (k.PHASE_FAILED, REASON_INVALID_MODE)
    assert k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK in progress.message
    assert "'None'" in progress.message


def test_the_fallback_name_is_cut_like_the_first_and_stays_a_valid_tag() -> None:
    assert snapshot_name("box", 2, fallback=True) == "box-suspend-2-filesystem"
    name = snapshot_name("a" * 200, 2, fallback=True)
    assert len(name) <= 100
    assert TAG.match(name)
    assert name.endswith("-suspend-2-filesystem")
