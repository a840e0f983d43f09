"""A suspend that keeps the filesystem, core side: the Pod stays until the keeper reports the
state saved for this generation and Pod (only when this process runs the keeper), and the Pod of
a resume runs the saved image."""

from __future__ import annotations

from typing import Any

from sandbox_children_support import _pod, _reconcile
from sandbox_fakes import (
    FakeCluster,
    conditions_by_type,
    hash_label,
    make_pod,
    make_sandbox,
    sandbox_ref,
)

from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.sandbox.keepstate import apply_resume_from, kept_condition

SAVED_IMAGE = "registry.test/snap/ns/box@sha256:" + "a" * 64


def _progress(pod_uid: str, phase: str, *, generation: int = 1, **extra: str) -> str:
    return k.SuspendProgress(
        generation=generation, pod=pod_uid, snapshot="box-suspend-1", phase=phase, **extra
    ).to_annotation()


def _resume_from(pod_uid: str, *, base: str = "pause") -> str:
    return k.ResumeFrom(
        pod=pod_uid, container="main", image=SAVED_IMAGE, base=base, snapshot="box-suspend-1"
    ).to_annotation()


def _suspended_with_pod(annotations: dict[str, str]) -> tuple[FakeCluster, dict[str, Any]]:
    cluster = FakeCluster()
    sandbox = cluster.add(SANDBOXES, make_sandbox(mode="Suspended", annotations=annotations))
    pod = cluster.add(
        PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox))
    )
    return cluster, pod


def _suspended(cluster: FakeCluster) -> dict[str, Any]:
    return conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Suspended"]  # type: ignore[arg-type]


def _deleted(cluster: FakeCluster) -> bool:
    return [w.verb for w in cluster.writes(PODS)] == ["delete"] and cluster.obj(
        PODS, "sandbox-name"
    ) is None


OPT_IN = {k.ANNOTATION_SNAPSHOT_ON_SUSPEND: k.MODE_FILESYSTEM}


class TestGate:
    async def test_an_opted_in_pod_is_kept_while_the_keeper_saves(self) -> None:
        cluster, _ = _suspended_with_pod(dict(OPT_IN))
        await _reconcile(cluster, keep_state=True)
        assert not _pod(cluster)["metadata"].get("deletionTimestamp")
        assert not cluster.writes(PODS)
        cond = _suspended(cluster)
        assert (cond["status"], cond["reason"]) == ("False", k.REASON_SAVING_STATE)

    async def test_without_the_keeper_in_this_process_the_pod_goes_as_usual(self) -> None:
        # Nobody would ever report: waiting would hang the suspend forever.
        cluster, _ = _suspended_with_pod(dict(OPT_IN))
        await _reconcile(cluster)
        assert _deleted(cluster)
        assert _suspended(cluster)["reason"] == "PodTerminating"

    async def test_without_the_opt_in_the_pod_goes_as_usual(self) -> None:
        cluster, _ = _suspended_with_pod({})
        await _reconcile(cluster, keep_state=True)
        assert _deleted(cluster)

    async def test_saved_for_this_pod_and_generation_lets_the_pod_go(self) -> None:
        cluster, pod = _suspended_with_pod(dict(OPT_IN))
        uid = pod["metadata"]["uid"]
        cluster.mutate(
            SANDBOXES,
            "sandbox-name",
            lambda s: s["metadata"]["annotations"].update(
                {
                    k.ANNOTATION_SUSPEND_SNAPSHOT: _progress(uid, k.PHASE_SAVED),
                    k.ANNOTATION_RESUME_FROM: _resume_from(uid),
                }
            ),
        )
        await _reconcile(cluster, keep_state=True)
        assert _deleted(cluster)

    async def test_a_failed_save_keeps_the_pod_with_the_cause_in_the_condition(self) -> None:
        cluster, pod = _suspended_with_pod(dict(OPT_IN))
        failed = _progress(
            pod["metadata"]["uid"],
            k.PHASE_FAILED,
            reason="PushFailed",
            message="SandboxSnapshot box-suspend-1 failed (PushFailed): registry down",
        )
        cluster.mutate(
            SANDBOXES,
            "sandbox-name",
            lambda s: s["metadata"]["annotations"].update({k.ANNOTATION_SUSPEND_SNAPSHOT: failed}),
        )
        await _reconcile(cluster, keep_state=True)
        assert not _pod(cluster)["metadata"].get("deletionTimestamp")
        cond = _suspended(cluster)
        assert cond["reason"] == k.REASON_STATE_NOT_SAVED
        assert "PushFailed" in cond["message"]
        assert "registry down" in cond["message"]


class TestKeptCondition:
    def _sandbox(self, generation: int, **annotations: str) -> dict[str, Any]:
        return make_sandbox(
            mode="Suspended", generation=generation, annotations={**OPT_IN, **annotations}
        )

    def _pod(self, uid: str = "pod-1") -> dict[str, Any]:
        return {"metadata": {"name": "sandbox-name", "uid": uid}}

    def test_a_save_of_an_earlier_generation_is_stale(self) -> None:
        # Saved, then resumed before the Pod went (the Pod kept running and writing), then
        # suspended again: the old save must not let the Pod go.
        sandbox = self._sandbox(
            3,
            **{
                k.ANNOTATION_SUSPEND_SNAPSHOT: _progress("pod-1", k.PHASE_SAVED, generation=1),
                k.ANNOTATION_RESUME_FROM: _resume_from("pod-1"),
            },
        )
        cond = kept_condition(sandbox, self._pod(), keeper=True)
        assert cond is not None
        assert cond["reason"] == k.REASON_SAVING_STATE

    def test_a_save_of_another_pod_does_not_count(self) -> None:
        sandbox = self._sandbox(
            1,
            **{
                k.ANNOTATION_SUSPEND_SNAPSHOT: _progress("pod-0", k.PHASE_SAVED),
                k.ANNOTATION_RESUME_FROM: _resume_from("pod-0"),
            },
        )
        assert kept_condition(sandbox, self._pod(), keeper=True) is not None

    def test_saved_without_the_image_written_does_not_count(self) -> None:
        sandbox = self._sandbox(
            1, **{k.ANNOTATION_SUSPEND_SNAPSHOT: _progress("pod-1", k.PHASE_SAVED)}
        )
        assert kept_condition(sandbox, self._pod(), keeper=True) is not None

    def test_garbage_in_the_annotations_keeps_the_pod(self) -> None:
        sandbox = self._sandbox(1, **{k.ANNOTATION_SUSPEND_SNAPSHOT: "{not json"})
        cond = kept_condition(sandbox, self._pod(), keeper=True)
        assert cond is not None
        assert cond["reason"] == k.REASON_SAVING_STATE

    def test_the_saving_message_names_the_snapshot(self) -> None:
        sandbox = self._sandbox(
            1, **{k.ANNOTATION_SUSPEND_SNAPSHOT: _progress("pod-1", k.PHASE_SAVING)}
        )
        cond = kept_condition(sandbox, self._pod(), keeper=True)
        assert cond is not None
        assert "SandboxSnapshot box-suspend-1" in cond["message"]


class TestResume:
    async def test_the_resumed_pod_runs_the_saved_image_with_its_pull_secret(self) -> None:
        cluster = FakeCluster()
        saved = k.ResumeFrom(
            pod="old",
            container="main",
            image=SAVED_IMAGE,
            base="pause",
            snapshot="box-suspend-1",
            pull_secret="snapshot-registry",
        ).to_annotation()
        cluster.add(SANDBOXES, make_sandbox(annotations={k.ANNOTATION_RESUME_FROM: saved}))
        await _reconcile(cluster)
        spec = _pod(cluster)["spec"]
        assert spec["containers"][0]["image"] == SAVED_IMAGE
        assert spec["imagePullSecrets"] == [{"name": "snapshot-registry"}]
        # The Sandbox's own template is unchanged (upstream's schema, the user's spec).
        stored = cluster.obj(SANDBOXES, "sandbox-name")
        assert stored["spec"]["podTemplate"]["spec"]["containers"][0]["image"] == "pause"  # type: ignore[index]

    def test_a_template_changed_since_the_save_wins(self) -> None:
        sandbox = make_sandbox(
            containers=[{"name": "main", "image": "python:3.13"}],
            annotations={k.ANNOTATION_RESUME_FROM: _resume_from("old", base="python:3.12")},
        )
        spec = sandbox["spec"]["podTemplate"]["spec"]
        assert not apply_resume_from(sandbox, spec)
        assert spec["containers"][0]["image"] == "python:3.13"

    def test_only_the_saved_container_changes(self) -> None:
        sandbox = make_sandbox(
            containers=[{"name": "sidecar", "image": "pause"}, {"name": "main", "image": "pause"}],
            annotations={k.ANNOTATION_RESUME_FROM: _resume_from("old")},
        )
        spec = sandbox["spec"]["podTemplate"]["spec"]
        assert apply_resume_from(sandbox, spec)
        assert [c["image"] for c in spec["containers"]] == ["pause", SAVED_IMAGE]


class TestAnnotations:
    def test_progress_round_trips_and_rejects_what_is_not_one(self) -> None:
        progress = k.SuspendProgress(3, "uid", "snap", k.PHASE_FAILED, "PushFailed", "down")
        assert k.SuspendProgress.parse(progress.to_annotation()) == progress
        for bad in (None, "", "[]", "{}", '{"generation": "x", "pod": 1}', "nope"):
            assert k.SuspendProgress.parse(bad) is None

    def test_resume_from_round_trips_and_needs_an_image(self) -> None:
        saved = k.ResumeFrom("uid", "main", SAVED_IMAGE, "pause", "snap", "secret")
        assert k.ResumeFrom.parse(saved.to_annotation()) == saved
        empty = k.ResumeFrom("uid", "main", "", "pause", "snap").to_annotation()
        assert k.ResumeFrom.parse(empty) is None
