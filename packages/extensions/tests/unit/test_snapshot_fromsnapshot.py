"""The snapshot resolver of a Sandbox created from a snapshot: what it writes on the Sandbox for
each state of the snapshot, its Events, and which Sandboxes a snapshot wakes (the rest runs
against a real kube-apiserver in tests/integration/test_snapshot_fromsnapshot.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from idle_harness import Recorder

from kube_agent_sandbox.api import fromsnapshot as f
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.controller.runtime import FakeApi, Obj, Request
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.fromsnapshot import (
    REASON_SNAPSHOT_NOT_READY,
    REASON_SNAPSHOT_RESOLVED,
    SnapshotResolver,
)

NS = "ns"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
IMAGE = "registry.test/snap/ns/snap@sha256:" + "c" * 64


@dataclass
class Env:
    api: FakeApi
    recorder: Recorder
    resolver: SnapshotResolver

    async def run(self) -> None:
        await self.resolver.reconcile(Request(NS, "box"))

    def events(self) -> list[tuple[str, str, str]]:
        return [(e["type"], e["reason"], e["note"]) for e in self.recorder.events]

    def annotations(self) -> dict[str, str]:
        sandbox = self.api.obj(SANDBOXES, "box", NS)
        assert sandbox is not None
        return dict(sandbox["metadata"].get("annotations") or {})

    def snapshot(self, phase: str | None, **fields: str) -> None:
        obj = self.api.add(
            SANDBOX_SNAPSHOTS, {"metadata": {"name": "snap"}, "spec": {"sandboxName": "src"}}
        )
        if phase is not None:
            done = s.with_status(
                obj, phase=phase, reason="Why", message="because", now=NOW, **fields
            )
            self.api.mutate(SANDBOX_SNAPSHOTS, "snap", lambda o: o.update(done), NS)


def _env(annotations: dict[str, str], containers: list[Obj] | None = None) -> Env:
    api = FakeApi(default_namespace=NS)
    pod_spec = {
        "containers": [{"name": "main", "image": "busybox"}] if containers is None else containers
    }
    api.add(
        SANDBOXES,
        {
            "metadata": {"name": "box", "annotations": dict(annotations)},
            "spec": {"podTemplate": {"spec": pod_spec}},
        },
    )
    recorder = Recorder()
    resolver = SnapshotResolver(
        api,
        sandboxes=api.reader(SANDBOXES),
        snapshots=api.reader(SANDBOX_SNAPSHOTS),
        recorder=recorder,
    )
    return Env(api, recorder, resolver)


FROM_SNAP = {f.ANNOTATION_SNAPSHOT: "snap"}


async def test_a_ready_snapshot_writes_resume_from_in_one_write() -> None:
    env = _env({**FROM_SNAP, k.ANNOTATION_SNAPSHOT_PULL_SECRET: "regcred"})
    env.snapshot(s.READY, image=IMAGE)
    await env.run()
    saved = k.ResumeFrom.parse(env.annotations().get(k.ANNOTATION_RESUME_FROM))
    assert saved == k.ResumeFrom(
        pod="",
        container="main",
        image=IMAGE,
        base="busybox",
        snapshot="snap",
        pull_secret="regcred",
    )
    assert f.ANNOTATION_SNAPSHOT_WAIT not in env.annotations()
    assert [e[:2] for e in env.events()] == [("Normal", REASON_SNAPSHOT_RESOLVED)]


async def test_a_missing_snapshot_says_so_once_with_a_warning() -> None:
    env = _env(dict(FROM_SNAP))
    await env.run()
    await env.run()  # nothing new to say: no second write, no second Event
    assert env.annotations()[f.ANNOTATION_SNAPSHOT_WAIT] == "SandboxSnapshot snap not found"
    assert k.ANNOTATION_RESUME_FROM not in env.annotations()
    assert env.events() == [
        ("Warning", REASON_SNAPSHOT_NOT_READY, "SandboxSnapshot snap not found")
    ]


async def test_a_snapshot_not_ready_yet_waits_then_resolves_when_ready() -> None:
    env = _env(dict(FROM_SNAP))
    env.snapshot(None)
    await env.run()
    assert (
        env.annotations()[f.ANNOTATION_SNAPSHOT_WAIT]
        == "SandboxSnapshot snap is Pending, not Ready"
    )
    assert env.events()[0][0] == "Normal"

    def ready(obj: Obj) -> None:
        obj.update(
            s.with_status(obj, phase=s.READY, reason="Ready", message="", now=NOW, image=IMAGE)
        )

    env.api.mutate(SANDBOX_SNAPSHOTS, "snap", ready, NS)
    await env.run()
    saved = k.ResumeFrom.parse(env.annotations().get(k.ANNOTATION_RESUME_FROM))
    assert saved is not None
    assert saved.image == IMAGE
    assert f.ANNOTATION_SNAPSHOT_WAIT not in env.annotations()


async def test_a_failed_snapshot_names_its_reason() -> None:
    env = _env(dict(FROM_SNAP))
    env.snapshot(s.FAILED)
    await env.run()
    wait = env.annotations()[f.ANNOTATION_SNAPSHOT_WAIT]
    assert wait == "SandboxSnapshot snap failed: Why: because"
    assert env.events() == [("Warning", REASON_SNAPSHOT_NOT_READY, wait)]


async def test_a_template_without_a_container_is_refused() -> None:
    env = _env(dict(FROM_SNAP), containers=[])
    env.snapshot(s.READY, image=IMAGE)
    await env.run()
    assert "no container" in env.annotations()[f.ANNOTATION_SNAPSHOT_WAIT]
    assert k.ANNOTATION_RESUME_FROM not in env.annotations()


async def test_once_resolved_a_changed_annotation_does_nothing() -> None:
    saved = k.ResumeFrom(pod="", container="main", image=IMAGE, base="busybox", snapshot="snap")
    env = _env({f.ANNOTATION_SNAPSHOT: "other", k.ANNOTATION_RESUME_FROM: saved.to_annotation()})
    await env.run()
    assert env.annotations()[k.ANNOTATION_RESUME_FROM] == saved.to_annotation()
    assert f.ANNOTATION_SNAPSHOT_WAIT not in env.annotations()
    assert env.events() == []


async def test_a_snapshot_wakes_only_the_sandboxes_still_waiting_for_it() -> None:
    env = _env(dict(FROM_SNAP))
    env.api.add(SANDBOXES, {"metadata": {"name": "other"}, "spec": {}})
    env.api.add(
        SANDBOXES, {"metadata": {"name": "another", "annotations": {f.ANNOTATION_SNAPSHOT: "x"}}}
    )
    snapshot = {"metadata": {"namespace": NS, "name": "snap"}}
    assert env.resolver.sandboxes_naming(snapshot) == [Request(NS, "box")]


async def test_a_sandbox_that_had_a_pod_is_left_alone() -> None:
    env = _env(dict(FROM_SNAP))
    env.api.mutate(SANDBOXES, "box", lambda o: o.update(status={"selector": "hash=abc"}), NS)
    env.snapshot(s.READY, image=IMAGE)
    await env.run()
    assert k.ANNOTATION_RESUME_FROM not in env.annotations()
    assert env.events() == []
