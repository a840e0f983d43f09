"""A Sandbox created from a snapshot, core side: no Pod until the resolver wrote the snapshot's
image (only when this process runs it), a Ready condition that says why, then the Pod runs that
image; a Pod that exists already is left alone."""

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

from kube_agent_sandbox.api import fromsnapshot as f
from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS

SNAP_IMAGE = "registry.test/snap/ns/snap@sha256:" + "b" * 64
FROM_SNAP = {f.ANNOTATION_SNAPSHOT: "snap"}


def _resolved() -> str:
    return k.ResumeFrom(
        pod="", container="main", image=SNAP_IMAGE, base="pause", snapshot="snap"
    ).to_annotation()


def _ready(cluster: FakeCluster) -> dict[str, Any]:
    return conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))["Ready"]  # type: ignore[arg-type]


async def test_no_pod_until_the_snapshot_is_resolved_and_ready_says_why() -> None:
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox(annotations=dict(FROM_SNAP)))
    await _reconcile(cluster, keep_state=True)
    assert cluster.obj(PODS, "sandbox-name") is None
    assert not cluster.writes(PODS)
    ready = _ready(cluster)
    assert (ready["status"], ready["reason"]) == ("False", f.REASON_WAITING_FOR_SNAPSHOT)
    assert ready["message"] == "the Pod waits for SandboxSnapshot snap"


async def test_the_resolvers_message_is_in_the_condition() -> None:
    cluster = FakeCluster()
    wait = {**FROM_SNAP, f.ANNOTATION_SNAPSHOT_WAIT: "SandboxSnapshot snap not found"}
    cluster.add(SANDBOXES, make_sandbox(annotations=wait))
    await _reconcile(cluster, keep_state=True)
    assert cluster.obj(PODS, "sandbox-name") is None
    assert _ready(cluster)["message"] == (
        "the Pod waits for SandboxSnapshot snap: SandboxSnapshot snap not found"
    )


async def test_once_resolved_the_pod_runs_the_snapshots_image() -> None:
    cluster = FakeCluster()
    annotations = {**FROM_SNAP, k.ANNOTATION_RESUME_FROM: _resolved()}
    cluster.add(SANDBOXES, make_sandbox(annotations=annotations))
    await _reconcile(cluster, keep_state=True)
    assert _pod(cluster)["spec"]["containers"][0]["image"] == SNAP_IMAGE
    assert _ready(cluster)["reason"] != f.REASON_WAITING_FOR_SNAPSHOT


async def test_without_the_resolver_in_this_process_the_template_pod_is_made() -> None:
    # Nobody would ever resolve it: waiting would never end.
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox(annotations=dict(FROM_SNAP)))
    await _reconcile(cluster)
    assert _pod(cluster)["spec"]["containers"][0]["image"] == "pause"


async def test_a_pod_that_exists_is_kept_whatever_the_annotation_says() -> None:
    cluster = FakeCluster()
    sandbox = cluster.add(SANDBOXES, make_sandbox(annotations=dict(FROM_SNAP)))
    cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
    await _reconcile(cluster, keep_state=True)
    assert cluster.obj(PODS, "sandbox-name") is not None
    assert [w.verb for w in cluster.writes(PODS)] != ["delete"]
    assert _ready(cluster)["reason"] != f.REASON_WAITING_FOR_SNAPSHOT


async def test_a_suspended_sandbox_says_suspended_not_waiting() -> None:
    cluster = FakeCluster()
    cluster.add(SANDBOXES, make_sandbox(mode="Suspended", annotations=dict(FROM_SNAP)))
    await _reconcile(cluster, keep_state=True)
    assert _ready(cluster)["reason"] == "SandboxSuspended"


async def test_a_sandbox_that_had_a_pod_does_not_wait_when_it_comes_back() -> None:
    # The annotation was added while the Pod ran (the resolver ignores it then): a resume after
    # a suspend that kept nothing makes the template's Pod again rather than wait forever.
    cluster = FakeCluster()
    sandbox = make_sandbox(annotations=dict(FROM_SNAP))
    sandbox["status"] = {"selector": "agents.x-k8s.io/sandbox-name-hash=abc"}
    cluster.add(SANDBOXES, sandbox)
    await _reconcile(cluster, keep_state=True)
    assert _pod(cluster)["spec"]["containers"][0]["image"] == "pause"
