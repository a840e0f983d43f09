"""Strict Sandbox-to-Pod mapping when several Pods are controlled by one Sandbox.

Upstream v0.5.6 (#1337): no Pod is chosen, created, deleted, adopted or patched in
either mode; Ready is False/MultiplePods with only that text; PodScheduled Unknown; Finished
removed; the Service step is skipped (status.service and serviceFQDN keep their values); PVCs
are still reconciled; the error is not returned (no retry); one Warning event per episode.
"""

from __future__ import annotations

import pytest
from sandbox_fakes import (
    FakeCluster,
    FakeRecorder,
    conditions_by_type,
    hash_label,
    make_pod,
    make_sandbox,
    make_service,
    request,
    sandbox_ref,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, PVCS, SERVICES
from kube_agent_sandbox.controller.runtime import ApiError, Obj, Result
from kube_agent_sandbox.controller.sandbox.errors import SandboxReconcileError
from kube_agent_sandbox.controller.sandbox.setup import EVENT_REPORTER

TEXT_2 = "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod"
TEXT_3 = "multiple Pods (3) are controlled by this Sandbox; refusing to choose or create a Pod"
SELECTOR = f"{c.LABEL_SANDBOX_NAME_HASH}={name_hash('sandbox-name')}"
VCT = {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}


def _with_owned_pods(cluster: FakeCluster, sandbox: Obj, *names: str) -> None:
    for name in names:
        pod = make_pod(name, labels=hash_label(), owner=sandbox_ref(sandbox), phase="Running")
        pod["status"]["podIPs"] = [{"ip": "10.0.0.9"}]
        pod["spec"]["nodeName"] = "node-1"
        cluster.add(PODS, pod)


def _stored(cluster: FakeCluster) -> Obj:
    sandbox = cluster.obj(SANDBOXES, "sandbox-name")
    assert sandbox is not None
    return sandbox


class TestFailClosed:
    async def test_running_mode_status_and_no_pod_writes(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(vcts=[VCT]))
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        assert await cluster.reconciler().reconcile(request()) == Result()
        assert cluster.writes(PODS) == []
        assert cluster.obj(PVCS, "data-sandbox-name") is not None  # PVCs still reconciled
        stored = _stored(cluster)
        status = stored["status"]
        assert "podIPs" not in status
        assert "nodeName" not in status
        by_type = conditions_by_type(stored)
        assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == ("False", "MultiplePods")
        assert by_type["Ready"]["message"] == TEXT_2
        assert by_type["Suspended"]["reason"] == "NotSuspended"
        assert by_type["PodScheduled"]["status"] == "Unknown"
        assert "Finished" not in by_type

    async def test_suspended_mode_deletes_nothing_and_cannot_confirm(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(mode="Suspended"))
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        assert await cluster.reconciler().reconcile(request()) == Result()
        assert cluster.writes(PODS) == []
        assert cluster.obj(PODS, "extra") is not None
        suspended = conditions_by_type(_stored(cluster))["Suspended"]
        assert (suspended["status"], suspended["reason"], suspended["message"]) == (
            "Unknown",
            "PodStateUnknown",
            "Pod state is unknown. Sandbox suspension cannot be confirmed",
        )
        assert conditions_by_type(_stored(cluster))["Ready"]["reason"] == "MultiplePods"

    async def test_service_is_left_alone_and_its_status_kept(self) -> None:
        cluster = FakeCluster()
        status = {
            "service": "sandbox-name",
            "serviceFQDN": "sandbox-name.default.svc.cluster.local",
            "selector": SELECTOR,
        }
        sandbox = cluster.add(SANDBOXES, make_sandbox(service=False, status=status))
        cluster.add(
            SERVICES,
            make_service("sandbox-name", labels={"drifted": "yes"}, owner=sandbox_ref(sandbox)),
        )
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        await cluster.reconciler().reconcile(request())
        assert cluster.writes(SERVICES) == []  # not deleted although service is false
        stored = _stored(cluster)["status"]
        assert {k: stored[k] for k in status} == status

    async def test_finished_is_removed(self) -> None:
        cluster = FakeCluster()
        finished = {
            "type": "Finished",
            "status": "True",
            "reason": "PodSucceeded",
            "message": "Pod completed successfully",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        sandbox = cluster.add(SANDBOXES, make_sandbox(status={"conditions": [finished]}))
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        await cluster.reconciler().reconcile(request())
        assert "Finished" not in conditions_by_type(_stored(cluster))

    async def test_multiple_pods_text_wins_over_other_errors(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(vcts=[VCT]))
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        cluster.fail("create", "persistentvolumeclaims", ApiError(422, "Invalid", "bad pvc"))
        result = await cluster.reconciler().reconcile(request())
        assert result == Result(requeue_after=60.0)  # from the PVC error, not MultiplePods
        ready = conditions_by_type(_stored(cluster))["Ready"]
        assert (ready["reason"], ready["message"]) == ("MultiplePods", TEXT_2)

    async def test_other_transient_errors_are_still_retried(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(vcts=[VCT]))
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        cluster.fail("create", "persistentvolumeclaims", ApiError(500, "InternalError", "etcd"))
        with pytest.raises(SandboxReconcileError, match="etcd") as caught:
            await cluster.reconciler().reconcile(request())
        assert "multiple Pods" not in str(caught.value)

    async def test_shutdown_timer_is_kept(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(shutdown_time="2026-01-02T04:04:05Z"))
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        assert await cluster.reconciler().reconcile(request()) == Result(requeue_after=3600.0)

    async def test_label_finds_candidates_but_owner_uid_decides(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        _with_owned_pods(cluster, sandbox, "sandbox-name")
        other = {"apiVersion": "v1", "kind": "Sandbox", "name": "x", "uid": "other-uid"}
        cluster.add(PODS, make_pod("lookalike", labels=hash_label(), owner=other))
        await cluster.reconciler().reconcile(request())
        assert conditions_by_type(_stored(cluster))["Ready"]["reason"] != "MultiplePods"

    async def test_recovers_when_the_extra_pod_is_deleted(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        rec = cluster.reconciler()
        await rec.reconcile(request())
        del cluster.store[PODS.plural][("default", "extra")]
        await rec.reconcile(request())
        ready = conditions_by_type(_stored(cluster))["Ready"]
        assert ready["reason"] == "DependenciesNotReady"
        assert _stored(cluster)["status"]["podIPs"] == ["10.0.0.9"]


class TestWarningEvent:
    async def test_event_fields(self) -> None:
        cluster = FakeCluster()
        recorder = FakeRecorder()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        await cluster.reconciler(recorder=recorder).reconcile(request())
        assert recorder.events == [
            {
                "object": "sandbox-name",
                "type": "Warning",
                "reason": "MultiplePods",
                "action": "Reconciling",
                "note": TEXT_2,
            }
        ]
        assert EVENT_REPORTER == "sandbox-controller"

    async def test_once_per_episode_even_when_the_count_changes(self) -> None:
        cluster = FakeCluster()
        recorder = FakeRecorder()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        rec = cluster.reconciler(recorder=recorder)
        await rec.reconcile(request())
        _with_owned_pods(cluster, sandbox, "third")
        await rec.reconcile(request())
        assert conditions_by_type(_stored(cluster))["Ready"]["message"] == TEXT_3
        assert len(recorder.events) == 1

    async def test_not_repeated_by_a_fresh_reconciler_reading_the_status(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        await cluster.reconciler().reconcile(request())
        recorder = FakeRecorder()  # a restarted controller: only the stored status knows
        _with_owned_pods(cluster, sandbox, "third")
        await cluster.reconciler(recorder=recorder).reconcile(request())
        assert recorder.events == []

    async def test_a_new_episode_emits_again(self) -> None:
        cluster = FakeCluster()
        recorder = FakeRecorder()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        _with_owned_pods(cluster, sandbox, "sandbox-name", "extra")
        rec = cluster.reconciler(recorder=recorder)
        await rec.reconcile(request())
        del cluster.store[PODS.plural][("default", "extra")]
        await rec.reconcile(request())
        _with_owned_pods(cluster, sandbox, "extra-2")
        await rec.reconcile(request())
        assert [e["reason"] for e in recorder.events] == ["MultiplePods", "MultiplePods"]
