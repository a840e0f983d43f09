"""Sandbox conditions: SetStatusCondition semantics and the Suspended/Finished/Ready rules."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sandbox_fakes import NOW, NOW_TEXT, make_pod, make_sandbox, owner_ref

from kube_agent_sandbox.controller.runtime import format_time, new_condition, set_status_condition
from kube_agent_sandbox.controller.sandbox.conditions import (
    apply_conditions,
    compute_finished,
    compute_ready,
    compute_suspended,
)

LATER = NOW + dt.timedelta(minutes=5)
LATER_TEXT = "2026-01-02T03:09:05Z"


def _sandbox(**kwargs: Any) -> dict[str, Any]:
    sandbox = make_sandbox(**kwargs)
    sandbox["metadata"]["uid"] = "sandbox-uid"
    return sandbox


def _owned_pod(
    *, phase: str = "Running", ready: bool = False, ips: bool = True, terminating: bool = False
) -> dict[str, Any]:
    pod = make_pod("sandbox-name", owner=owner_ref("Sandbox", "sandbox-name", "sandbox-uid"))
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    if ips:
        status["podIPs"] = [{"ip": "10.0.0.7"}]
    pod["status"] = status
    if terminating:
        pod["metadata"]["deletionTimestamp"] = NOW_TEXT
    return pod


def _foreign_pod(phase: str = "Running") -> dict[str, Any]:
    pod = make_pod(
        "sandbox-name", owner=owner_ref("ReplicaSet", "rs", "rs-uid", api_version="apps/v1")
    )
    pod["status"] = {"phase": phase}
    return pod


def _cond(type_: str, status: str, reason: str, message: str, gen: int = 1) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "observedGeneration": gen,
        "reason": reason,
        "message": message,
    }


def _apply(sandbox: dict[str, Any], **kwargs: Any) -> dict[str, dict[str, Any]]:
    kwargs.setdefault("pod", None)
    kwargs.setdefault("pod_failed", False)
    kwargs.setdefault("service", None)
    kwargs.setdefault("error_text", None)
    kwargs.setdefault("multiple_pods_text", None)
    apply_conditions(sandbox, now=kwargs.pop("now", NOW), **kwargs)
    return {
        c["type"]: {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in sandbox["status"]["conditions"]
    }


class TestBoundedMessage:
    def test_message_at_the_limit_is_kept_whole(self) -> None:
        cond = new_condition("A", "False", "R", "m" * 32768, observed_generation=0)
        assert cond["message"] == "m" * 32768

    def test_message_over_the_limit_is_cut_and_marked(self) -> None:
        cond = new_condition("A", "False", "R", "m" * 32769, observed_generation=0)
        assert cond["message"] == "m" * 32765 + "..."

    def test_multibyte_message_is_cut_on_a_character_boundary_within_the_bytes(self) -> None:
        # 3-byte characters: the byte limit, not the character count, decides.
        cond = new_condition("A", "False", "R", "\u20ac" * 20000, observed_generation=0)
        encoded = cond["message"].encode()
        assert len(encoded) <= 32768
        assert cond["message"] == "\u20ac" * ((32768 - 3) // 3) + "..."


class TestSetStatusCondition:
    def test_new_type_is_appended_with_now(self) -> None:
        conditions: list[dict[str, Any]] = [
            {"type": "A", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "x"}
        ]
        changed = set_status_condition(
            conditions, new_condition("B", "False", "R2", "m", observed_generation=3), now=NOW
        )
        assert changed
        assert [c["type"] for c in conditions] == ["A", "B"]
        assert conditions[1]["lastTransitionTime"] == NOW_TEXT
        assert conditions[1]["observedGeneration"] == 3

    def test_given_ltt_is_kept_when_appending(self) -> None:
        conditions: list[dict[str, Any]] = []
        new = new_condition("A", "True", "R", "m", observed_generation=1)
        new["lastTransitionTime"] = "2020-01-01T00:00:00Z"
        set_status_condition(conditions, new, now=NOW)
        assert conditions[0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"

    def test_ltt_moves_only_when_status_changes(self) -> None:
        conditions: list[dict[str, Any]] = []
        set_status_condition(
            conditions, new_condition("A", "False", "R1", "m1", observed_generation=1), now=NOW
        )
        changed = set_status_condition(
            conditions, new_condition("A", "False", "R2", "m2", observed_generation=2), now=LATER
        )
        assert changed
        assert conditions[0] == {
            "type": "A",
            "status": "False",
            "observedGeneration": 2,
            "reason": "R2",
            "message": "m2",
            "lastTransitionTime": NOW_TEXT,
        }
        set_status_condition(
            conditions, new_condition("A", "True", "R2", "m2", observed_generation=2), now=LATER
        )
        assert conditions[0]["lastTransitionTime"] == LATER_TEXT

    def test_identical_condition_is_no_change(self) -> None:
        conditions: list[dict[str, Any]] = []
        set_status_condition(
            conditions, new_condition("A", "True", "R", "m", observed_generation=1), now=NOW
        )
        before = [dict(c) for c in conditions]
        assert not set_status_condition(
            conditions, new_condition("A", "True", "R", "m", observed_generation=1), now=LATER
        )
        assert conditions == before

    def test_updated_in_place_keeps_order(self) -> None:
        conditions: list[dict[str, Any]] = []
        for t in ("A", "B", "C"):
            set_status_condition(
                conditions, new_condition(t, "True", "R", "", observed_generation=1), now=NOW
            )
        set_status_condition(
            conditions, new_condition("A", "False", "X", "", observed_generation=1), now=NOW
        )
        assert [c["type"] for c in conditions] == ["A", "B", "C"]

    def test_format_time_is_utc_seconds(self) -> None:
        moment = dt.datetime(2026, 5, 6, 7, 8, 9, 987654, tzinfo=dt.timezone(dt.timedelta(hours=2)))
        assert format_time(moment) == "2026-05-06T05:08:09Z"


class TestComputeConditions:
    def test_1_no_pod_no_service(self) -> None:
        conds = _apply(_sandbox())
        assert conds["Ready"] == _cond(
            "Ready", "False", "DependenciesNotReady", "Pod does not exist"
        )
        assert conds["Suspended"] == _cond(
            "Suspended", "False", "NotSuspended", "Sandbox is not suspended"
        )
        assert "Finished" not in conds

    def test_2_service_but_no_pod(self) -> None:
        conds = _apply(_sandbox(), service={"metadata": {"name": "sandbox-name"}})
        assert conds["Ready"] == _cond(
            "Ready", "False", "DependenciesNotReady", "Pod does not exist; Service Exists"
        )

    def test_2b_service_required_but_missing(self) -> None:
        pod = _owned_pod(ready=True)
        conds = _apply(_sandbox(service=True), pod=pod)
        assert conds["Ready"] == _cond(
            "Ready", "False", "DependenciesNotReady", "Pod is Ready; Service does not exist"
        )

    def test_3_pending(self) -> None:
        conds = _apply(_sandbox(), pod=_owned_pod(phase="Pending", ips=False))
        assert conds["Ready"] == _cond(
            "Ready", "False", "DependenciesNotReady", "Pod exists with phase: Pending"
        )

    def test_3b_fresh_pod_without_phase(self) -> None:
        pod = _owned_pod()
        pod["status"] = {}
        conds = _apply(_sandbox(), pod=pod)
        assert conds["Ready"]["message"] == "Pod exists with phase: "

    def test_4_running_not_ready(self) -> None:
        conds = _apply(_sandbox(), pod=_owned_pod(ready=False))
        assert conds["Ready"] == _cond(
            "Ready", "False", "DependenciesNotReady", "Pod is Running but not Ready"
        )

    def test_5_ready_without_ips(self) -> None:
        conds = _apply(_sandbox(), pod=_owned_pod(ready=True, ips=False))
        assert conds["Ready"] == _cond(
            "Ready", "False", "DependenciesNotReady", "Pod is Ready but has no podIPs yet"
        )

    def test_ready(self) -> None:
        conds = _apply(_sandbox(), pod=_owned_pod(ready=True))
        assert conds["Ready"] == _cond("Ready", "True", "DependenciesReady", "Pod is Ready")

    def test_ready_with_service(self) -> None:
        conds = _apply(_sandbox(service=True), pod=_owned_pod(ready=True), service={"metadata": {}})
        assert conds["Ready"] == _cond(
            "Ready", "True", "DependenciesReady", "Pod is Ready; Service Exists"
        )

    def test_6_suspended_owned_pod_terminating(self) -> None:
        conds = _apply(_sandbox(mode="Suspended"), pod=_owned_pod(terminating=True))
        assert conds["Suspended"] == _cond(
            "Suspended", "False", "PodTerminating", "Pod is terminating. Sandbox is suspending"
        )
        assert conds["Ready"] == _cond(
            "Ready", "False", "SandboxSuspended", "Sandbox is suspending"
        )

    def test_6b_suspended_foreign_pod(self) -> None:
        conds = _apply(_sandbox(mode="Suspended"), pod=_foreign_pod())
        assert conds["Suspended"] == _cond(
            "Suspended",
            "False",
            "PodNotOwned",
            "Refused to delete pod because it is not owned by this sandbox",
        )
        assert conds["Ready"]["reason"] == "SandboxSuspended"

    def test_6c_delete_failed(self) -> None:
        conds = _apply(
            _sandbox(mode="Suspended"),
            pod=_owned_pod(),
            pod_failed=True,
            error_text="failed to delete pod: boom",
        )
        assert conds["Suspended"]["reason"] == "PodTerminating"
        assert conds["Ready"] == _cond(
            "Ready", "False", "ReconcilerError", "Error seen: failed to delete pod: boom"
        )

    def test_7_suspended_no_pod(self) -> None:
        conds = _apply(_sandbox(mode="Suspended"))
        assert conds["Suspended"] == _cond(
            "Suspended", "True", "PodTerminated", "Pod has been terminated. Sandbox is suspended"
        )
        assert conds["Ready"] == _cond("Ready", "False", "SandboxSuspended", "Sandbox is suspended")

    def test_7b_pod_lookup_failed(self) -> None:
        conds = _apply(_sandbox(mode="Suspended"), pod_failed=True, error_text="pod get failed: x")
        assert conds["Suspended"] == _cond(
            "Suspended",
            "Unknown",
            "PodStateUnknown",
            "Pod state is unknown. Sandbox suspension cannot be confirmed",
        )

    def test_8_resuming_pod_missing(self) -> None:
        sandbox = _sandbox(mode="Running")
        conds = _apply(sandbox)
        assert conds["Suspended"]["reason"] == "NotSuspended"
        assert conds["Ready"]["message"] == "Pod does not exist"

    def test_9_pod_phase_unknown(self) -> None:
        conds = _apply(_sandbox(), pod=_owned_pod(phase="Unknown"))
        assert conds["Ready"] == _cond(
            "Ready", "False", "DependenciesNotReady", "Pod exists with phase: Unknown"
        )

    def test_10_failed(self) -> None:
        conds = _apply(_sandbox(), pod=_owned_pod(phase="Failed"))
        assert conds["Ready"] == _cond("Ready", "False", "PodFailed", "Pod failed")
        assert conds["Finished"] == _cond("Finished", "True", "PodFailed", "Pod failed")

    def test_11_succeeded(self) -> None:
        conds = _apply(_sandbox(), pod=_owned_pod(phase="Succeeded"))
        assert conds["Ready"] == _cond(
            "Ready", "False", "PodSucceeded", "Pod completed successfully"
        )
        assert conds["Finished"] == _cond(
            "Finished", "True", "PodSucceeded", "Pod completed successfully"
        )

    def test_11b_foreign_terminal_pod_has_no_finished(self) -> None:
        sandbox = _sandbox(mode="Suspended")
        assert compute_finished(sandbox, _foreign_pod("Succeeded")) is None
        conds = _apply(sandbox, pod=_foreign_pod("Failed"))
        assert "Finished" not in conds

    def test_12_reconciler_error_wins(self) -> None:
        conds = _apply(_sandbox(), pod=_owned_pod(ready=True), error_text="a\nb")
        assert conds["Ready"] == _cond("Ready", "False", "ReconcilerError", "Error seen: a\nb")

    def test_multiple_pods_wins_over_other_errors(self) -> None:
        ready = compute_ready(
            _sandbox(), pod=None, service=None, error_text="x", multiple_pods_text="many"
        )
        assert (ready["reason"], ready["message"]) == ("MultiplePods", "many")

    def test_observed_generation_follows_the_sandbox(self) -> None:
        conds = _apply(_sandbox(generation=7))
        assert conds["Ready"]["observedGeneration"] == 7
        assert (
            compute_suspended(_sandbox(generation=7), None, pod_failed=False)["observedGeneration"]
            == 7
        )


class TestConditionOrderAndTransitions:
    def test_fresh_sandbox_gets_suspended_then_ready(self) -> None:
        sandbox = _sandbox()
        _apply(sandbox)
        assert [c["type"] for c in sandbox["status"]["conditions"]] == ["Suspended", "Ready"]

    def test_finished_is_appended_after_ready_and_removed_later(self) -> None:
        sandbox = _sandbox()
        _apply(sandbox, pod=_owned_pod(ready=True))
        _apply(sandbox, pod=_owned_pod(phase="Succeeded"))
        assert [c["type"] for c in sandbox["status"]["conditions"]] == [
            "Suspended",
            "PodScheduled",
            "Ready",
            "Finished",
        ]
        _apply(sandbox, pod=None)
        assert [c["type"] for c in sandbox["status"]["conditions"]] == ["Suspended", "Ready"]

    def test_conditions_do_not_accumulate(self) -> None:
        sandbox = _sandbox()
        for _ in range(5):
            _apply(sandbox, pod=_owned_pod(ready=True))
            _apply(sandbox, pod=None, error_text="boom")
        assert len(sandbox["status"]["conditions"]) == 2

    def test_suspended_ltt_kept_across_false_reasons_and_moves_on_flip(self) -> None:
        sandbox = _sandbox()
        _apply(sandbox, pod=_owned_pod(ready=True), now=NOW)
        sandbox["spec"]["operatingMode"] = "Suspended"
        _apply(sandbox, pod=_owned_pod(terminating=True), now=LATER)
        suspended = sandbox["status"]["conditions"][0]
        assert (suspended["reason"], suspended["lastTransitionTime"]) == (
            "PodTerminating",
            NOW_TEXT,
        )
        _apply(sandbox, pod=None, now=LATER)
        suspended = sandbox["status"]["conditions"][0]
        assert (suspended["status"], suspended["lastTransitionTime"]) == ("True", LATER_TEXT)

    @pytest.mark.parametrize("status", [None, {}, {"conditions": None}])
    def test_missing_or_null_conditions(self, status: Any) -> None:
        sandbox = _sandbox()
        if status is not None:
            sandbox["status"] = status
        _apply(sandbox)
        assert len(sandbox["status"]["conditions"]) == 2
