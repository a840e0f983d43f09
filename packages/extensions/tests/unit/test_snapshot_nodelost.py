"""A commit whose node is lost fails ``NodeLost``: at once when the Node is deleted, after the
grace when it stays not Ready, never while it is Ready or only briefly not Ready. An agent that
answers late never writes its result on a snapshot made again under the same name. The cluster
case (a kwok node, an agent hung mid-commit) is ``test_snapshot_failures.py``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kube_agent_sandbox.api.resources import SANDBOX_SNAPSHOTS, SANDBOXES
from kube_agent_sandbox.api.rest import NODES, PODS
from kube_agent_sandbox.controller.runtime import FakeApi, Obj, Request, format_time
from kube_agent_sandbox.extensions.snapshot import status as s
from kube_agent_sandbox.extensions.snapshot.agent import SnapshotAgent
from kube_agent_sandbox.extensions.snapshot.commit import CommitResult, CommitTarget
from kube_agent_sandbox.extensions.snapshot.layer import LayerInfo
from kube_agent_sandbox.extensions.snapshot.reconciler import NODE_LOST_GRACE, SnapshotReconciler
from kube_agent_sandbox.extensions.snapshot.registry import RegistryClient
from kube_agent_sandbox.extensions.snapshot.settings import RegistrySettings

NS = "team"
NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
CONTAINER = "a" * 64


def _api(node_ready: Obj | None) -> FakeApi:
    api = FakeApi(default_namespace=NS)
    api.add(SANDBOXES, {"metadata": {"name": "box"}, "spec": {}})
    api.add(
        PODS,
        {
            "metadata": {"name": "box"},
            "spec": {"nodeName": "node-a"},
            "status": {
                "containerStatuses": [{"name": "main", "containerID": f"containerd://{CONTAINER}"}]
            },
        },
    )
    if node_ready is not None:
        api.add(NODES, {"metadata": {"name": "node-a"}, "status": {"conditions": [node_ready]}})
    status = {
        "phase": s.COMMITTING,
        "node": "node-a",
        "sourcePod": "box",
        "containerID": CONTAINER,
        "startTime": format_time(NOW - dt.timedelta(seconds=10)),
    }
    api.add(
        SANDBOX_SNAPSHOTS,
        {
            "metadata": {"name": "snap", "finalizers": [s.FINALIZER]},
            "spec": {"sandboxName": "box"},
            "status": status,
        },
    )
    return api


def _ready(status: str, seconds_ago: float) -> Obj:
    since = format_time(NOW - dt.timedelta(seconds=seconds_ago))
    return {
        "type": "Ready",
        "status": status,
        "reason": "NodeStatusUnknown",
        "lastTransitionTime": since,
    }


async def _reconcile(api: FakeApi) -> Obj:
    reconciler = SnapshotReconciler(
        api,
        snapshots=api.reader(SANDBOX_SNAPSHOTS),
        sandboxes=api.reader(SANDBOXES),
        settings=RegistrySettings(url="https://registry.example"),
        clock=lambda: NOW,
    )
    await reconciler.reconcile(Request(NS, "snap"))
    snapshot = api.obj(SANDBOX_SNAPSHOTS, "snap")
    assert snapshot is not None
    return snapshot


def _reason(snapshot: Obj) -> Any:
    return snapshot["status"].get("conditions", [{}])[0].get("reason")


async def test_a_deleted_node_fails_the_commit_at_once() -> None:
    snapshot = await _reconcile(_api(None))
    assert s.phase_of(snapshot) == s.FAILED
    assert _reason(snapshot) == s.REASON_NODE_LOST
    assert (
        "node node-a was deleted during the commit"
        in snapshot["status"]["conditions"][0]["message"]
    )


@pytest.mark.parametrize(
    ("ready", "seconds", "lost"),
    [
        ("True", 3600, False),
        ("Unknown", NODE_LOST_GRACE - 5, False),
        ("False", NODE_LOST_GRACE - 5, False),
        ("Unknown", NODE_LOST_GRACE + 5, True),
        ("False", 3600, True),
    ],
)
async def test_a_node_not_ready_fails_the_commit_only_past_the_grace(
    ready: str, seconds: float, lost: bool
) -> None:
    snapshot = await _reconcile(_api(_ready(ready, seconds)))
    if not lost:
        assert s.phase_of(snapshot) == s.COMMITTING
        return
    assert _reason(snapshot) == s.REASON_NODE_LOST
    message = snapshot["status"]["conditions"][0]["message"]
    assert f"node node-a has not been Ready for {int(seconds)}s" in message
    assert f"Ready={ready}, NodeStatusUnknown" in message


async def test_a_late_result_never_lands_on_a_snapshot_made_again_under_the_same_name() -> None:
    api = _api(_ready("True", 3600))
    digest = "sha256:" + "b" * 64
    old = api.obj(SANDBOX_SNAPSHOTS, "snap")
    assert old is not None

    async def hung_then_answers(
        container_id: str, target: CommitTarget, registry: RegistryClient, *, comment: str
    ) -> CommitResult:
        # While this commit hung, the snapshot failed (NodeLost) and was deleted and made again
        # under its name, Committing on this node again.
        again = api.obj(SANDBOX_SNAPSHOTS, "snap")
        assert again is not None
        del again["metadata"]["uid"]
        api.add(SANDBOX_SNAPSHOTS, again)
        layer = LayerInfo(digest=digest, diff_id=digest, size=10, entries=1)
        return CommitResult(target.reference(digest), digest, layer, "busybox", 0.0)

    agent = SnapshotAgent(
        api,
        snapshots=api.reader(SANDBOX_SNAPSHOTS),
        node_name="node-a",
        # Nothing listens there: the agent's delete of what it pushed fails, and is let go.
        settings=RegistrySettings(url="http://127.0.0.1:9"),
        committer=hung_then_answers,
    )
    api.mutate(
        SANDBOX_SNAPSHOTS,
        "snap",
        lambda obj: obj["status"].update(target="registry.example/snaps/box:snap"),
    )
    await agent.reconcile(Request(NS, "snap"))

    made_again = api.obj(SANDBOX_SNAPSHOTS, "snap")
    assert made_again is not None
    assert made_again["metadata"]["uid"] != old["metadata"]["uid"]
    assert s.phase_of(made_again) == s.COMMITTING
    assert "image" not in made_again["status"]
