"""The claim status table (upstream's computeReadyCondition) and the status write rules."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.extensions.claim.errors import (
    AdoptionConflictError,
    ClaimError,
    EnvInjectionRejectedError,
    InvalidMetadataError,
    ReconcilerError,
    SandboxCreatePendingError,
    SandboxNotOwnedError,
    TemplateNotFoundError,
    VolumeClaimTemplatesError,
    WarmPoolNotFoundError,
    conflict_detail,
)
from kube_agent_sandbox.extensions.claim.status import apply_status, compute_ready, status_write

NOW = dt.datetime(2026, 8, 1, 12, 0, tzinfo=dt.UTC)
CLAIM: Obj = {"metadata": {"name": "c", "generation": 4}, "status": {}}


def _sandbox(**ready: Any) -> Obj:
    cond = {
        "type": "Ready",
        "status": "True",
        "reason": "DependenciesReady",
        "message": "Pod is Ready",
        "observedGeneration": 9,
        "lastTransitionTime": "2026-08-01T11:00:00Z",
    }
    cond.update(ready)
    return {"metadata": {"name": "sb"}, "status": {"conditions": [cond], "podIPs": ["10.1.1.1"]}}


@pytest.mark.parametrize(
    ("error", "reason", "message"),
    [
        (
            TemplateNotFoundError("t", prefix="x: "),
            "TemplateNotFound",
            'SandboxTemplate "t" not found',
        ),
        (WarmPoolNotFoundError("p"), "WarmPoolNotFound", 'SandboxWarmPool "p" not found'),
        (
            AdoptionConflictError("busy"),
            "AdoptionConflict",
            "busy; the next pass retries from a converged view",
        ),
        (
            InvalidMetadataError('failed to validate label "k": bad'),
            "InvalidMetadata",
            'invalid additionalPodMetadata: failed to validate label "k": bad',
        ),
        (EnvInjectionRejectedError("no env"), "EnvVarsInjectionRejected", "no env"),
        (
            SandboxNotOwnedError("sb", "c"),
            "ClaimExpired",
            'Claim expired. sandbox not owned by this claim: sandbox "sb" is not owned by '
            'claim "c"; deletion skipped.',
        ),
        (VolumeClaimTemplatesError("vct"), "VolumeClaimTemplatesError", "vct"),
        (ReconcilerError("boom"), "ReconcilerError", "Error seen: boom"),
        (
            SandboxCreatePendingError(),
            "SandboxCreatePending",
            "Sandbox already created; waiting for cache to converge",
        ),
    ],
)
def test_error_rows(error: ClaimError, reason: str, message: str) -> None:
    ready = compute_ready(CLAIM, sandbox=_sandbox(), error=error, expired=False)
    assert ready == {
        "type": "Ready",
        "status": "False",
        "observedGeneration": 4,
        "reason": reason,
        "message": message,
    }


def test_error_quoting_an_oversized_field_still_fits_the_condition() -> None:
    # A 422 about a 300 kB annotation quotes the annotation; the Ready write must still pass.
    error = ReconcilerError("422 Invalid: metadata.annotations: Too long: " + "a" * 300_000)
    ready = compute_ready(CLAIM, sandbox=_sandbox(), error=error, expired=False)
    assert ready["message"].startswith("Error seen: 422 Invalid: metadata.annotations")
    assert ready["message"].endswith("...")
    assert len(ready["message"].encode()) == 32768


def test_expired_missing_expired_sandbox_forwarded_and_not_ready_rows() -> None:
    expired = compute_ready(CLAIM, sandbox=_sandbox(), error=None, expired=True)
    assert (expired["reason"], expired["message"]) == (
        "ClaimExpired",
        "Claim expired. Sandbox cleanup initiated.",
    )
    missing = compute_ready(CLAIM, sandbox=None, error=None, expired=False)
    assert (missing["reason"], missing["message"]) == ("SandboxMissing", "Sandbox does not exist")
    gone = compute_ready(
        CLAIM, sandbox=_sandbox(reason="SandboxExpired", status="False"), error=None, expired=False
    )
    assert gone["reason"] == "SandboxExpired"
    assert gone["message"] == "Underlying Sandbox resource has expired independently of the Claim."
    forwarded = compute_ready(CLAIM, sandbox=_sandbox(), error=None, expired=False)
    assert forwarded == {
        "type": "Ready",
        "status": "True",
        "observedGeneration": 4,  # the claim's, not the Sandbox's 9
        "reason": "DependenciesReady",
        "message": "Pod is Ready",
        "lastTransitionTime": "2026-08-01T11:00:00Z",
    }
    bare = {"metadata": {"name": "sb"}, "status": {}}
    assert compute_ready(CLAIM, sandbox=bare, error=None, expired=False)["reason"] == (
        c.REASON_SANDBOX_NOT_READY
    )


def test_finished_copied_with_sandbox_generation_and_binding_rules() -> None:
    sandbox = _sandbox()
    finished = {
        "type": "Finished",
        "status": "True",
        "reason": "PodSucceeded",
        "message": "Pod completed successfully",
        "observedGeneration": 9,
        "lastTransitionTime": "2026-08-01T11:30:00Z",
    }
    sandbox["status"]["conditions"].append(finished)
    status = apply_status(CLAIM, sandbox=sandbox, error=None, expired=False, now=NOW)
    assert {k["type"]: k for k in status["conditions"]}["Finished"] == finished
    assert status["sandbox"] == {"name": "sb", "podIPs": ["10.1.1.1"]}
    bound = {**CLAIM, "status": {"sandbox": {"name": "sb"}, "conditions": [finished]}}
    transient = apply_status(
        bound, sandbox=None, error=ReconcilerError("x"), expired=False, now=NOW
    )
    assert transient["sandbox"] == {"name": "sb"}  # kept: the next pass must not cold-start
    assert "Finished" not in {k["type"] for k in transient["conditions"]}
    foreign = apply_status(
        bound, sandbox=None, error=SandboxNotOwnedError("sb", "c"), expired=True, now=NOW
    )
    assert "sandbox" not in foreign
    assert "Finished" in {k["type"] for k in foreign["conditions"]}  # expired: kept


def test_status_write_sorted_locked_and_noop() -> None:
    status = apply_status(CLAIM, sandbox=_sandbox(), error=None, expired=False, now=NOW)
    patch = status_write({}, status, resource_version="42")
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "42"}
    assert [k["type"] for k in patch["status"]["conditions"]] == ["Ready"]
    assert status_write(status, status, resource_version="42") is None


def test_conflict_detail_shortens_apiserver_tail() -> None:
    text = (
        'Operation cannot be fulfilled on sandboxes "x": the object has been modified; please '
        "apply your changes to the latest version and try again"
    )
    assert conflict_detail(text) == (
        'Operation cannot be fulfilled on sandboxes "x" (conflicting concurrent write)'
    )
