"""Condition interpretation for waits: status (not presence), terminal reasons, bound names."""

from __future__ import annotations

from typing import Any

import pytest

from kube_agent_sandbox.sdk import (
    TERMINAL_CLAIM_READY_REASONS,
    SandboxClaimFailedError,
    SandboxFailedError,
    SandboxTemplateNotFoundError,
    SandboxWarmPoolNotFoundError,
    readiness,
)


def obj(status: str | None, reason: str = "", message: str = "", **extra: Any) -> dict[str, Any]:
    conditions = []
    if status is not None:
        conditions.append({"type": "Ready", "status": status, "reason": reason, "message": message})
    return {"metadata": {"name": "x"}, "status": {"conditions": conditions, **extra}}


def test_terminal_claim_reasons_are_upstreams_set() -> None:
    assert (
        frozenset(
            {
                "InvalidMetadata",
                "EnvVarsInjectionRejected",
                "VolumeClaimTemplatesError",
                "ClaimExpired",
                "SandboxExpired",
            }
        )
        == TERMINAL_CLAIM_READY_REASONS
    )


def test_sandbox_ready_reads_status_not_presence() -> None:
    assert readiness.sandbox_readiness(obj("True", "DependenciesReady")).ready
    state = readiness.sandbox_readiness(obj("False", "DependenciesNotReady", "pod pending"))
    assert not state.ready
    assert state.failure is None
    assert (state.status, state.reason, state.message) == (
        "False",
        "DependenciesNotReady",
        "pod pending",
    )
    assert not readiness.sandbox_readiness(obj("Unknown")).ready
    assert not readiness.sandbox_readiness({"metadata": {"name": "x"}}).ready


@pytest.mark.parametrize("reason", ["PodSucceeded", "PodFailed", "SandboxExpired"])
def test_sandbox_terminal_reasons_fail(reason: str) -> None:
    state = readiness.sandbox_readiness(obj("False", reason, "gone"))
    assert isinstance(state.failure, SandboxFailedError)
    assert state.failure.reason == reason
    assert state.failure.condition_message == "gone"


@pytest.mark.parametrize("reason", ["SandboxSuspended", "MultiplePods", "ReconcilerError"])
def test_sandbox_transient_reasons_keep_waiting(reason: str) -> None:
    assert readiness.sandbox_readiness(obj("False", reason)).failure is None


def test_claim_ready_needs_a_bound_sandbox() -> None:
    assert not readiness.claim_readiness(obj("True", "DependenciesReady")).ready
    bound = obj("True", "DependenciesReady", sandbox={"name": "pool-abcde"})
    assert readiness.claim_readiness(bound).ready
    assert readiness.bound_sandbox_name(bound) == "pool-abcde"
    assert readiness.bound_sandbox_name(obj(None, sandbox={"Name": "legacy"})) == "legacy"
    assert readiness.bound_sandbox_name(obj(None)) is None


@pytest.mark.parametrize(
    ("reason", "error"),
    [
        ("TemplateNotFound", SandboxTemplateNotFoundError),
        ("WarmPoolNotFound", SandboxWarmPoolNotFoundError),
        *[(r, SandboxClaimFailedError) for r in sorted(TERMINAL_CLAIM_READY_REASONS)],
    ],
)
def test_claim_failures(reason: str, error: type[Exception]) -> None:
    state = readiness.claim_readiness(obj("False", reason, "why"))
    assert type(state.failure) is error
    assert "why" in str(state.failure)


@pytest.mark.parametrize(
    "reason",
    [
        "SandboxNotReady",
        "SandboxMissing",
        "SandboxCreatePending",
        "MultiplePods",
        "ReconcilerError",
    ],
)
def test_claim_transient_reasons(reason: str) -> None:
    state = readiness.claim_readiness(obj("False", reason))
    assert state.failure is None
    assert not state.ready


def test_suspended_and_pod_name() -> None:
    suspended = {"status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    assert readiness.is_suspended(suspended)
    assert not readiness.is_suspended(
        {"status": {"conditions": [{"type": "Suspended", "status": "False"}]}}
    )
    assert readiness.pod_name({"metadata": {"name": "s"}}) == "s"
    annotated = {"metadata": {"name": "s", "annotations": {"agents.x-k8s.io/pod-name": "p"}}}
    assert readiness.pod_name(annotated) == "p"
