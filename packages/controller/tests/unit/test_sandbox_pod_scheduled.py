"""The PodScheduled condition mirrored from the Sandbox's Pod (upstream v0.5.6,
computePodScheduledCondition).

Every rule of the computation (error, no pod, foreign pod, verbatim copy, the two fallback
reasons, no pod condition yet), the list order, lastTransitionTime, removal, removal on expiry,
and the reconcile paths that change it (suspend/resume, expiry, MultiplePods, scheduling).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sandbox_fakes import (
    NOW,
    NOW_TEXT,
    Clock,
    FakeCluster,
    conditions_by_type,
    hash_label,
    make_pod,
    make_sandbox,
    owner_ref,
    request,
    sandbox_ref,
    strip_ltt,
)

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.sandbox.conditions import (
    apply_conditions,
    compute_pod_scheduled,
    set_expired,
)

LATER = NOW + dt.timedelta(minutes=5)
LATER_TEXT = "2026-01-02T03:09:05Z"
UNKNOWN_ERROR = {
    "type": "PodScheduled",
    "status": "Unknown",
    "observedGeneration": 3,
    "reason": "PodSchedulingUnknown",
    "message": "Pod state is unknown. Pod scheduling cannot be determined",
}
NOT_REPORTED = {
    "type": "PodScheduled",
    "status": "Unknown",
    "observedGeneration": 3,
    "reason": "PodSchedulingUnknown",
    "message": "Pod has not reported a PodScheduled condition yet",
}


def _sandbox(**kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("generation", 3)
    sandbox = make_sandbox(**kwargs)
    sandbox["metadata"]["uid"] = "sandbox-uid"
    return sandbox


def _pod(*conditions: dict[str, Any], owner_uid: str = "sandbox-uid") -> dict[str, Any]:
    kind = "Sandbox" if owner_uid == "sandbox-uid" else "ReplicaSet"
    pod = make_pod("sandbox-name", owner=owner_ref(kind, "x", owner_uid, api_version="v"))
    pod["status"] = {"phase": "Pending", "conditions": list(conditions)}
    return pod


def _scheduled(status: str, reason: str | None = None, message: str | None = None) -> dict:
    cond: dict[str, Any] = {"type": "PodScheduled", "status": status}
    if reason is not None:
        cond["reason"] = reason
    if message is not None:
        cond["message"] = message
    cond["lastTransitionTime"] = "2020-01-01T00:00:00Z"  # never copied
    return cond


def _apply(sandbox: dict[str, Any], *, now: dt.datetime = NOW, **kwargs: Any) -> list[dict]:
    kwargs.setdefault("pod", None)
    kwargs.setdefault("pod_failed", False)
    kwargs.setdefault("service", None)
    kwargs.setdefault("error_text", None)
    kwargs.setdefault("multiple_pods_text", None)
    apply_conditions(sandbox, now=now, **kwargs)
    conditions: list[dict] = sandbox["status"]["conditions"]
    return conditions


def _types(sandbox: dict[str, Any]) -> list[str]:
    return [cond["type"] for cond in sandbox["status"]["conditions"]]


class TestComputePodScheduled:
    def test_error_without_pod_is_unknown(self) -> None:
        assert compute_pod_scheduled(_sandbox(), None, pod_failed=True) == UNKNOWN_ERROR

    def test_no_pod_without_error_is_removed(self) -> None:
        assert compute_pod_scheduled(_sandbox(), None, pod_failed=False) is None

    def test_foreign_pod_is_never_mirrored(self) -> None:
        pod = _pod(_scheduled("False", "Unschedulable", "no nodes"), owner_uid="rs-uid")
        assert compute_pod_scheduled(_sandbox(), pod, pod_failed=False) is None

    def test_unowned_pod_is_never_mirrored(self) -> None:
        pod = _pod(_scheduled("True"))
        pod["metadata"].pop("ownerReferences")
        assert compute_pod_scheduled(_sandbox(), pod, pod_failed=False) is None

    def test_scheduled_without_reason_gets_the_podscheduled_reason(self) -> None:
        cond = compute_pod_scheduled(_sandbox(), _pod(_scheduled("True")), pod_failed=False)
        assert cond == {
            "type": "PodScheduled",
            "status": "True",
            "observedGeneration": 3,
            "reason": "PodScheduled",
            "message": "",
        }

    @pytest.mark.parametrize(
        ("status", "reason", "message"),
        [
            ("False", "Unschedulable", "0/3 nodes are available: 3 node(s) didn't match selector."),
            ("False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"),
            ("True", "SomeFutureReason", "scheduled with a note"),
            ("Unknown", "Whatever", ""),
        ],
    )
    def test_status_reason_and_message_are_copied_verbatim(
        self, status: str, reason: str, message: str
    ) -> None:
        pod = _pod(_scheduled(status, reason, message))
        cond = compute_pod_scheduled(_sandbox(), pod, pod_failed=False)
        assert cond == {
            "type": "PodScheduled",
            "status": status,
            "observedGeneration": 3,
            "reason": reason,
            "message": message,
        }

    @pytest.mark.parametrize("status", ["False", "Unknown"])
    def test_not_true_without_reason_gets_scheduling_unknown(self, status: str) -> None:
        pod = _pod(_scheduled(status, "", "waiting"))
        cond = compute_pod_scheduled(_sandbox(), pod, pod_failed=False)
        assert cond is not None
        assert (cond["status"], cond["reason"], cond["message"]) == (
            status,
            "PodSchedulingUnknown",
            "waiting",
        )

    def test_owned_pod_without_the_condition_has_not_reported(self) -> None:
        pod = _pod({"type": "Ready", "status": "False"})
        assert compute_pod_scheduled(_sandbox(), pod, pod_failed=False) == NOT_REPORTED

    def test_pod_without_status_has_not_reported(self) -> None:
        pod = _pod()
        del pod["status"]
        assert compute_pod_scheduled(_sandbox(), pod, pod_failed=False) == NOT_REPORTED

    def test_existing_pod_is_mirrored_even_when_the_pass_had_an_error(self) -> None:
        pod = _pod(_scheduled("True"))
        cond = compute_pod_scheduled(_sandbox(), pod, pod_failed=True)
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("True", "PodScheduled")

    def test_observed_generation_is_the_sandbox_generation(self) -> None:
        cond = compute_pod_scheduled(_sandbox(generation=9), _pod(), pod_failed=False)
        assert cond is not None
        assert cond["observedGeneration"] == 9


class TestValuesTheCrdWouldRefuse:
    """Pod conditions are not validated like metav1.Condition; the Sandbox CRD is."""

    @pytest.mark.parametrize("status", ["", "Yes", None])
    def test_status_outside_the_enum_becomes_unknown(self, status: str | None) -> None:
        pod = _pod({"type": "PodScheduled", "status": status, "reason": "Odd"})
        cond = compute_pod_scheduled(_sandbox(), pod, pod_failed=False)
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("Unknown", "Odd")

    @pytest.mark.parametrize("reason", ["has space", "1starts-with-digit", "x" * 1025, "ends,"])
    def test_reason_the_crd_refuses_gets_the_fallback(self, reason: str) -> None:
        cond = compute_pod_scheduled(
            _sandbox(), _pod(_scheduled("False", reason, "m")), pod_failed=False
        )
        assert cond is not None
        assert (cond["reason"], cond["message"]) == ("PodSchedulingUnknown", "m")
        cond = compute_pod_scheduled(_sandbox(), _pod(_scheduled("True", reason)), pod_failed=False)
        assert cond is not None
        assert cond["reason"] == "PodScheduled"

    def test_long_message_is_cut_to_the_crd_limit(self) -> None:
        pod = _pod(_scheduled("False", "Unschedulable", "m" * 40000))
        cond = compute_pod_scheduled(_sandbox(), pod, pod_failed=False)
        assert cond is not None
        assert len(cond["message"].encode()) == 32768
        assert cond["message"].endswith("...")


class TestOrderRemovalAndTransitions:
    def test_fresh_sandbox_gets_suspended_podscheduled_ready(self) -> None:
        sandbox = _sandbox()
        _apply(sandbox, pod=_pod())
        assert _types(sandbox) == ["Suspended", "PodScheduled", "Ready"]

    def test_sandbox_from_v054_gets_it_appended_after_ready(self) -> None:
        sandbox = _sandbox()
        _apply(sandbox)  # [Suspended, Ready], as v0.5.4 wrote it
        _apply(sandbox, pod=_pod(_scheduled("True")))
        assert _types(sandbox) == ["Suspended", "Ready", "PodScheduled"]

    def test_removed_when_the_pod_is_gone_and_reappended_later(self) -> None:
        sandbox = _sandbox()
        _apply(sandbox, pod=_pod(_scheduled("True")))
        _apply(sandbox)
        assert _types(sandbox) == ["Suspended", "Ready"]
        _apply(sandbox, pod=_pod())
        assert _types(sandbox) == ["Suspended", "Ready", "PodScheduled"]

    def test_removed_for_a_foreign_pod(self) -> None:
        sandbox = _sandbox(mode="Suspended")
        _apply(sandbox, pod=_pod(_scheduled("True")))
        assert "PodScheduled" in _types(sandbox)
        _apply(sandbox, pod=_pod(_scheduled("True"), owner_uid="rs-uid"))
        assert "PodScheduled" not in _types(sandbox)

    def test_multiple_pods_make_it_unknown(self) -> None:
        sandbox = _sandbox()
        _apply(sandbox, pod=_pod(_scheduled("True")))
        conditions = _apply(sandbox, pod_failed=True, multiple_pods_text="multiple Pods (2) ...")
        by_type = {cond["type"]: cond for cond in strip_ltt(conditions)}
        assert by_type["PodScheduled"] == UNKNOWN_ERROR
        assert by_type["Ready"]["reason"] == "MultiplePods"

    def test_ltt_is_not_copied_and_moves_only_on_a_status_flip(self) -> None:
        sandbox = _sandbox()
        _apply(sandbox, pod=_pod(), now=NOW)
        scheduled = next(c for c in sandbox["status"]["conditions"] if c["type"] == "PodScheduled")
        assert scheduled["lastTransitionTime"] == NOW_TEXT
        _apply(sandbox, pod=_pod(_scheduled("Unknown", "Other")), now=LATER)
        assert scheduled["lastTransitionTime"] == NOW_TEXT  # same status, new reason
        _apply(sandbox, pod=_pod(_scheduled("True")), now=LATER)
        assert (scheduled["status"], scheduled["lastTransitionTime"]) == ("True", LATER_TEXT)

    def test_set_expired_removes_it_and_keeps_finished(self) -> None:
        sandbox = _sandbox()
        pod = _pod(_scheduled("True"))
        pod["status"]["phase"] = "Succeeded"
        conditions = _apply(sandbox, pod=pod)
        assert _types(sandbox) == ["Suspended", "Finished", "PodScheduled", "Ready"]
        set_expired(conditions, sandbox, now=LATER)
        assert _types(sandbox) == ["Suspended", "Finished", "Ready"]
        assert conditions[-1]["reason"] == "SandboxExpired"


class TestReconcile:
    """The condition through whole reconciles against the in-memory cluster."""

    @staticmethod
    def _scheduled_status(cluster: FakeCluster) -> dict[str, Any] | None:
        sandbox = cluster.obj(SANDBOXES, "sandbox-name")
        assert sandbox is not None
        return conditions_by_type(sandbox).get("PodScheduled")

    async def test_scheduling_writes_status_with_the_node_name(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        rec = cluster.reconciler()
        await rec.reconcile(request())
        assert self._scheduled_status(cluster)["status"] == "Unknown"  # type: ignore[index]

        def schedule(pod: dict[str, Any]) -> None:
            pod["spec"]["nodeName"] = "node-a"
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]

        cluster.mutate(PODS, "sandbox-name", schedule)
        cluster.clear_calls()
        await rec.reconcile(request())
        [write] = [w for w in cluster.writes(SANDBOXES) if w.subresource == "status"]
        assert write.body["status"]["nodeName"] == "node-a"  # no longer rides along
        assert self._scheduled_status(cluster)["reason"] == "PodScheduled"  # type: ignore[index]

    async def test_unschedulable_pod_is_mirrored(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        rec = cluster.reconciler()
        await rec.reconcile(request())
        message = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."

        def unschedulable(pod: dict[str, Any]) -> None:
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ]

        cluster.mutate(PODS, "sandbox-name", unschedulable)
        cluster.clear_calls()
        await rec.reconcile(request())
        assert len(cluster.writes(SANDBOXES)) == 1
        cond = self._scheduled_status(cluster)
        assert cond is not None
        assert (cond["status"], cond["reason"], cond["message"]) == (
            "False",
            "Unschedulable",
            message,
        )

    async def test_suspend_keeps_it_while_terminating_removes_it_when_gone(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        # A finalizer keeps the pod terminating after the controller deletes it.
        cluster.mutate(PODS, "sandbox-name", lambda p: p["metadata"].update(finalizers=["x/y"]))
        cluster.mutate(
            SANDBOXES, "sandbox-name", lambda s: s["spec"].update(operatingMode="Suspended")
        )
        await rec.reconcile(request())
        by_type = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert by_type["Suspended"]["reason"] == "PodTerminating"
        assert (by_type["PodScheduled"]["status"], by_type["PodScheduled"]["reason"]) == (
            "True",
            "PodScheduled",
        )
        del cluster.store[PODS.plural][("default", "sandbox-name")]  # the finalizer let go
        await rec.reconcile(request())
        assert self._scheduled_status(cluster) is None
        # Resume: a new pod; the condition comes back at the end of the list.
        cluster.mutate(
            SANDBOXES, "sandbox-name", lambda s: s["spec"].update(operatingMode="Running")
        )
        await rec.reconcile(request())
        stored = cluster.obj(SANDBOXES, "sandbox-name")
        assert stored is not None
        assert [c["type"] for c in stored["status"]["conditions"]] == [
            "Suspended",
            "Ready",
            "PodScheduled",
        ]
        assert sandbox["metadata"]["uid"]  # the same Sandbox throughout

    async def test_expiry_marking_pass_removes_it(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(shutdown_time="2026-01-02T03:30:00Z"))
        clock = Clock()
        rec = cluster.reconciler(clock=clock)
        await rec.reconcile(request())
        cluster.set_pod_status("sandbox-name")
        await rec.reconcile(request())
        assert self._scheduled_status(cluster) is not None
        clock.advance(3600)
        await rec.reconcile(request())  # pass 1 marks
        assert self._scheduled_status(cluster) is None
        await rec.reconcile(request())  # pass 2 cleans up (Retain)
        stored = cluster.obj(SANDBOXES, "sandbox-name")
        assert stored is not None
        assert [c["type"] for c in stored["status"]["conditions"]] == ["Suspended", "Ready"]

    async def test_expiring_during_the_pass_removes_it(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(shutdown_time="2026-01-02T03:04:06Z"))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label()))
        clock = Clock()
        ticks = iter([NOW, NOW + dt.timedelta(seconds=2)])
        rec = cluster.reconciler(clock=lambda: next(ticks, clock.now))
        await rec.reconcile(request())
        stored = cluster.obj(SANDBOXES, "sandbox-name")
        assert stored is not None
        by_type = conditions_by_type(stored)
        assert by_type["Ready"]["reason"] == "SandboxExpired"
        assert "PodScheduled" not in by_type

    async def test_multiple_owned_pods_make_it_unknown(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        for name in ("sandbox-name", "extra"):
            cluster.add(PODS, make_pod(name, labels=hash_label(), owner=sandbox_ref(sandbox)))
        await cluster.reconciler().reconcile(request())
        cond = self._scheduled_status(cluster)
        assert cond is not None
        assert {k: v for k, v in cond.items() if k != "lastTransitionTime"} == {
            **UNKNOWN_ERROR,
            "observedGeneration": 1,
        }

    async def test_foreign_pod_error_makes_it_unknown(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.add(
            PODS,
            make_pod(
                "sandbox-name",
                labels=hash_label(),
                owner=owner_ref("ReplicaSet", "rs", "rs-uid", api_version="apps/v1"),
            ),
        )
        await cluster.reconciler().reconcile(request())
        cond = self._scheduled_status(cluster)
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("Unknown", "PodSchedulingUnknown")
