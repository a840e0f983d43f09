"""Which saves the state keeper deletes and which it keeps (the selection in suspendgc.py, and the
keeper deleting through FakeApi; the registry side runs in
tests/integration/test_snapshot_keepstate.py)."""

from __future__ import annotations

from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.controller.runtime import FakeApi, Obj, Request, name_of
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot import suspendgc as gc
from kube_agent_sandbox.extensions.snapshot.keepstate import (
    REASON_SNAPSHOTS_DELETED,
    StateKeeper,
    snapshot_name,
)

NS = "ns"


def _image(name: str) -> str:
    return f"registry/snapshots/{NS}@sha256:{name.encode().hex()[:64].ljust(64, '0')}"


def _snap(
    name: str,
    *,
    sandbox: str = "box",
    phase: str = s.READY,
    keeper: bool = True,
    annotations: dict[str, str] | None = None,
) -> Obj:
    notes = dict(annotations or {})
    if keeper:
        notes[gc.ANNOTATION_SAVED_ON_SUSPEND] = "pod-uid"
    return {
        "metadata": {"name": name, "namespace": NS, "annotations": notes},
        "spec": {"sandboxName": sandbox, "mode": k.MODE_FILESYSTEM},
        "status": {"phase": phase, "image": _image(name)},
    }


def _names(objs: list[Obj]) -> list[str]:
    return sorted(name_of(obj) for obj in objs)


def test_the_generation_is_read_from_the_end_of_the_name() -> None:
    assert gc.generation_of("box-suspend-4") == 4
    assert gc.generation_of("box-suspend-4-filesystem") == 4
    assert gc.generation_of(snapshot_name("a" * 200, 9)) == 9
    assert gc.generation_of("fork") is None
    assert gc.generation_of("box-suspend-x") is None


def test_saves_of_older_generations_are_candidates_and_the_current_ones_are_not() -> None:
    snapshots = [
        _snap("box-suspend-2"),
        _snap("box-suspend-4", phase=s.FAILED),  # the failed Memory record of the fallback
        _snap("box-suspend-4-filesystem"),
        _snap("box-suspend-6"),  # the save resumed from
        _snap("box-suspend-8", phase=s.FAILED),  # newer than it: a later save's, not superseded
    ]
    found = gc.candidates("box", snapshots, before=6)
    assert _names(found) == ["box-suspend-2", "box-suspend-4", "box-suspend-4-filesystem"]


def test_the_failed_memory_record_stays_with_its_save() -> None:
    snapshots = [_snap("box-suspend-4", phase=s.FAILED), _snap("box-suspend-4-filesystem")]
    assert gc.candidates("box", snapshots, before=4) == []


def test_explicit_snapshots_other_sandboxes_and_unfinished_saves_are_never_candidates() -> None:
    terminating = _snap("box-suspend-1")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    snapshots = [
        _snap("box-suspend-2", keeper=False),  # made by a user under a look-alike name
        _snap("other-suspend-2", sandbox="other"),
        _snap("box-suspend-3", phase=s.COMMITTING),
        _snap("box-suspend-5", phase=s.PENDING),
        terminating,
        _snap("box-suspend-7", annotations={k.ANNOTATION_KEEP: "true"}),
        _snap("box-suspend-9", annotations={s.ANNOTATION_KEEP_IMAGE: "true"}),  # not "keep"
    ]
    assert _names(gc.candidates("box", snapshots, before=10)) == ["box-suspend-9"]
    # the Sandbox gone: the same exceptions hold
    assert _names(gc.candidates("box", snapshots, before=None)) == ["box-suspend-9"]


def test_a_snapshot_named_or_run_by_a_claim_or_sandbox_is_kept() -> None:
    snapshots = [_snap(f"box-suspend-{g}") for g in (1, 2, 3, 4, 5, 6)]
    references = gc.References()
    references.add_claims(
        [
            {"metadata": {"annotations": {c.ANNOTATION_SNAPSHOT: "box-suspend-1"}}},
            {"metadata": {"annotations": {}}},
        ]
    )
    resume = k.ResumeFrom(
        pod="p", container="main", image=_image("box-suspend-2"), base="b", snapshot="box-suspend-2"
    )
    progress = k.SuspendProgress(7, "p", "box-suspend-3", k.PHASE_SAVING)
    references.add_sandboxes(
        [
            {
                "metadata": {
                    "annotations": {
                        k.ANNOTATION_RESUME_FROM: resume.to_annotation(),
                        k.ANNOTATION_SUSPEND_SNAPSHOT: progress.to_annotation(),
                    }
                }
            },
            {"metadata": {"annotations": {c.ANNOTATION_SNAPSHOT: "box-suspend-4"}}},
            {  # a Sandbox made from a claim (gone since) runs the snapshot's image
                "metadata": {},
                "spec": {
                    "podTemplate": {"spec": {"containers": [{"image": _image("box-suspend-5")}]}}
                },
            },
        ]
    )
    assert _names(gc.unreferenced(snapshots, references)) == ["box-suspend-6"]


# -- the keeper deleting (FakeApi) -------------------------------------------------------------


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((type_, reason, note))


class FakeMetrics:
    def __init__(self) -> None:
        self.deleted_: list[tuple[str, str]] = []

    def deleted(self, namespace: str, reason: str) -> None:
        self.deleted_.append((namespace, reason))


def _env(resume_from: str | None) -> tuple[FakeApi, StateKeeper, FakeRecorder, FakeMetrics]:
    api = FakeApi(default_namespace=NS)
    annotations: dict[str, Any] = {}
    if resume_from is not None:
        resume = k.ResumeFrom(
            pod="p", container="main", image=_image(resume_from), base="b", snapshot=resume_from
        )
        annotations[k.ANNOTATION_RESUME_FROM] = resume.to_annotation()
    api.add(
        SANDBOXES,
        {
            "metadata": {"name": "box", "generation": 7, "annotations": annotations},
            "spec": {
                "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
            },
        },
    )
    recorder, metrics = FakeRecorder(), FakeMetrics()
    keeper = StateKeeper(
        api,
        sandboxes=api.reader(SANDBOXES),
        snapshots=api.reader(SANDBOX_SNAPSHOTS),
        recorder=recorder,
        metrics=metrics,  # type: ignore[arg-type]
    )
    return api, keeper, recorder, metrics


def _left(api: FakeApi) -> list[str]:
    return _names(api.objects(SANDBOX_SNAPSHOTS))


async def test_a_newer_save_deletes_the_older_ones_and_says_so() -> None:
    api, keeper, recorder, metrics = _env("box-suspend-6")
    for name in ("box-suspend-2", "box-suspend-4", "box-suspend-4-filesystem", "box-suspend-6"):
        api.add(SANDBOX_SNAPSHOTS, _snap(name))
    api.add(SANDBOX_SNAPSHOTS, _snap("fork", keeper=False))
    api.add(
        SANDBOX_CLAIMS,
        {"metadata": {"name": "c", "annotations": {c.ANNOTATION_SNAPSHOT: "box-suspend-2"}}},
    )
    await keeper.reconcile(Request(NS, "box"))
    assert _left(api) == ["box-suspend-2", "box-suspend-6", "fork"]
    [(type_, reason, note)] = recorder.events
    assert (type_, reason) == ("Normal", REASON_SNAPSHOTS_DELETED)
    assert "box-suspend-4, box-suspend-4-filesystem" in note
    assert metrics.deleted_ == [(NS, "Superseded")] * 2

    await keeper.reconcile(Request(NS, "box"))  # nothing more to delete: no second Event
    assert len(recorder.events) == 1


async def test_without_a_save_to_resume_from_nothing_is_deleted() -> None:
    api, keeper, recorder, _ = _env(None)
    api.add(SANDBOX_SNAPSHOTS, _snap("box-suspend-2"))
    await keeper.reconcile(Request(NS, "box"))
    assert _left(api) == ["box-suspend-2"]
    assert recorder.events == []


async def test_the_sandbox_deleted_takes_its_saves_but_not_what_a_claim_uses() -> None:
    api, keeper, _, metrics = _env("box-suspend-6")
    for name in ("box-suspend-2", "box-suspend-6"):
        api.add(SANDBOX_SNAPSHOTS, _snap(name))
    api.add(SANDBOX_SNAPSHOTS, _snap("fork", keeper=False))
    api.add(
        SANDBOX_CLAIMS,
        {"metadata": {"name": "c", "annotations": {c.ANNOTATION_SNAPSHOT: "box-suspend-6"}}},
    )
    await api.delete(SANDBOXES, NS, "box")
    await keeper.reconcile(Request(NS, "box"))
    assert _left(api) == ["box-suspend-6", "fork"]
    assert metrics.deleted_ == [(NS, "SandboxDeleted")]
