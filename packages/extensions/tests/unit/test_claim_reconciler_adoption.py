"""Reconcile branches of the SandboxClaim controller against the in-memory API: cold creates,
warm adoption and its conflicts, stale references, expiry, errors and metrics."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from claim_test_support import (
    NOW,
    NS,
    LaggingReader,
    World,
    _pod_template,
    _ready_cond,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.controller.runtime import ApiError, Obj, Result
from kube_agent_sandbox.extensions.claim.errors import AdoptionConflictError, ReconcilerError


async def test_cold_create_builds_sandbox_and_reports_not_ready() -> None:
    w = World()
    claim = w.claim(labels=None)
    await w.reconcile()
    sandbox = w.get(SANDBOXES, "claim")
    assert sandbox["metadata"]["labels"] == {
        c.LABEL_CLAIM_UID: claim["metadata"]["uid"],
        c.LABEL_LAUNCH_TYPE: "cold",
        c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tmpl"),
    }
    assert sandbox["metadata"]["ownerReferences"][0]["uid"] == claim["metadata"]["uid"]
    # its Pod will be named like it: written now, the Sandbox controller has nothing to add
    assert sandbox["metadata"]["annotations"] == {
        c.ANNOTATION_SANDBOX_TEMPLATE_REF: "tmpl",
        c.ANNOTATION_POD_NAME: "claim",
    }
    assert sandbox["spec"]["podTemplate"]["spec"]["automountServiceAccountToken"] is False
    assert sandbox["spec"]["podTemplate"]["spec"]["dnsPolicy"] == "None"
    stored = w.get(SANDBOX_CLAIMS, "claim")
    assert _ready_cond(stored)["reason"] == c.REASON_SANDBOX_NOT_READY
    assert stored["status"]["sandbox"] == {"name": "claim"}
    assert stored["metadata"]["annotations"][c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT] == (
        "2026-08-01T12:00:00.000000123Z"
    )
    assert ("SandboxProvisioned", "Provisioning", 'Created Sandbox "claim"') in w.recorder.events


async def test_warm_adoption_is_three_writes_and_ready_in_one_pass() -> None:
    w = World()
    w.member("pool-aaaaa")
    claim = w.claim()
    w.api.clear_calls()
    await w.reconcile()
    writes = [(call.verb, call.plural, call.subresource) for call in w.api.writes()]
    assert writes == [
        ("patch", "sandboxclaims", None),
        ("patch", "sandboxes", None),
        ("patch", "sandboxclaims", "status"),
    ]
    first = w.api.writes()[0].body
    annotations = first["metadata"]["annotations"]
    assert annotations[c.ANNOTATION_SANDBOX_NAME] == "pool-aaaaa"
    assert c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT in annotations
    assert c.ANNOTATION_CLAIM_FIRST_READY_AT in annotations
    assert first["metadata"]["resourceVersion"]  # optimistic lock
    assert w.api.writes()[1].body["metadata"]["resourceVersion"]
    sandbox = w.get(SANDBOXES, "pool-aaaaa")
    labels = sandbox["metadata"]["labels"]
    assert c.LABEL_WARM_POOL_SANDBOX not in labels
    assert c.LABEL_SANDBOX_TEMPLATE_HASH not in labels
    assert labels[c.LABEL_CLAIM_UID] == claim["metadata"]["uid"]
    assert sandbox["metadata"]["ownerReferences"][0]["kind"] == "SandboxClaim"
    assert sandbox["metadata"]["annotations"][c.ANNOTATION_POD_NAME] == "pool-aaaaa"
    assert "annotations" not in sandbox["spec"]["podTemplate"]["metadata"]
    stored = w.get(SANDBOX_CLAIMS, "claim")
    ready = _ready_cond(stored)
    assert (ready["status"], ready["reason"]) == ("True", "DependenciesReady")
    assert ready["lastTransitionTime"] == "2026-08-01T11:00:00Z"
    assert stored["status"]["sandbox"] == {"name": "pool-aaaaa", "podIPs": ["10.0.0.7"]}
    assert ("SandboxAdopted", "Adoption", 'Adopted warm pool Sandbox "pool-aaaaa"') in (
        w.recorder.events
    )
    # the next pass finds everything in place: no write
    w.api.clear_calls()
    await w.reconcile()
    assert w.api.writes() == []


async def test_ready_candidate_preferred_and_unready_fallback() -> None:
    w = World()
    w.member("pool-unready", ready=False)
    w.member("pool-ready")
    w.claim("a")
    w.claim("b")
    await w.reconcile("a")
    assert w.get(SANDBOX_CLAIMS, "a")["status"]["sandbox"]["name"] == "pool-ready"
    await w.reconcile("b")
    assert w.get(SANDBOX_CLAIMS, "b")["status"]["sandbox"]["name"] == "pool-unready"
    assert _ready_cond(w.get(SANDBOX_CLAIMS, "b"))["reason"] == "DependenciesNotReady"


async def test_lagging_claim_cache_never_adopts_twice() -> None:
    w = World()
    w.member("pool-a")
    w.member("pool-b")
    old = w.claim()
    w.claims_reader = LaggingReader([old])
    w.reconciler = w._make(True)
    await w.reconcile()
    await w.reconcile()  # the cache still shows the claim without annotation or status
    owned = [
        s
        for s in w.api.objects(SANDBOXES)
        if s["metadata"]["ownerReferences"][0]["kind"] == "SandboxClaim"
    ]
    assert len(owned) == 1


async def test_adoption_patch_conflict_resolved_on_same_candidate() -> None:
    w = World()
    w.member("pool-a")
    w.claim()
    bumped = False

    def hook(verb: str, resource: Any, namespace: str | None, name: str | None) -> None:
        nonlocal bumped
        if verb == "patch" and resource == SANDBOXES and not bumped:
            bumped = True  # the sandbox controller writes between our read and our patch
            w.api.mutate(SANDBOXES, "pool-a", lambda o: o["status"].update(nodeName="n1"))

    w.api.on_request = hook
    await w.reconcile()
    stored = w.get(SANDBOX_CLAIMS, "claim")
    assert stored["status"]["sandbox"]["name"] == "pool-a"
    assert w.get(SANDBOXES, "pool-a")["metadata"]["ownerReferences"][0]["kind"] == "SandboxClaim"


async def test_candidate_taken_by_another_claim_is_adoption_conflict() -> None:
    w = World()
    w.member("pool-a")
    w.claim()

    def take(verb: str, resource: Any, namespace: str | None, name: str | None) -> None:
        if verb == "patch" and resource == SANDBOXES:
            w.api.on_request = None

            def steal(o: Obj) -> None:
                o["metadata"]["labels"].pop(c.LABEL_WARM_POOL_SANDBOX)
                o["metadata"]["ownerReferences"] = [
                    {
                        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                        "kind": "SandboxClaim",
                        "name": "other",
                        "uid": "other-uid",
                        "controller": True,
                    }
                ]

            w.api.mutate(SANDBOXES, "pool-a", steal)

    w.api.on_request = take
    with pytest.raises(AdoptionConflictError):
        await w.reconcile()
    stored = w.get(SANDBOX_CLAIMS, "claim")
    assert c.ANNOTATION_SANDBOX_NAME not in stored["metadata"].get("annotations", {})
    assert _ready_cond(stored)["reason"] == c.REASON_ADOPTION_CONFLICT
    assert _ready_cond(stored)["message"].endswith("; the next pass retries from a converged view")
    # next pass: no warm candidate left, cold start
    await w.reconcile()
    assert w.get(SANDBOX_CLAIMS, "claim")["status"]["sandbox"]["name"] == "claim"


async def test_legacy_label_migrated_to_annotation() -> None:
    w = World()
    claim = w.claim()
    w.api.mutate(
        SANDBOX_CLAIMS,
        "claim",
        lambda o: (
            o["metadata"].setdefault("labels", {}).update({c.LABEL_SANDBOX_NAME_LEGACY: "pool-old"})
        ),
    )
    sandbox = w.member("pool-old")
    w.api.mutate(
        SANDBOXES,
        "pool-old",
        lambda o: o["metadata"].update(
            ownerReferences=[
                {
                    "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
                    "kind": "SandboxClaim",
                    "name": "claim",
                    "uid": claim["metadata"]["uid"],
                    "controller": True,
                }
            ]
        ),
    )
    assert sandbox
    await w.reconcile()
    stored = w.get(SANDBOX_CLAIMS, "claim")
    assert c.LABEL_SANDBOX_NAME_LEGACY not in stored["metadata"].get("labels", {})
    assert stored["metadata"]["annotations"][c.ANNOTATION_SANDBOX_NAME] == "pool-old"
    assert stored["status"]["sandbox"]["name"] == "pool-old"


async def test_stale_reference_to_missing_sandbox_is_cleared() -> None:
    w = World()
    w.claim()
    w.api.mutate(
        SANDBOX_CLAIMS,
        "claim",
        lambda o: (
            o["metadata"]
            .setdefault("annotations", {})
            .update({c.ANNOTATION_SANDBOX_NAME: "pool-gone"})
        ),
    )
    await w.reconcile()
    stored = w.get(SANDBOX_CLAIMS, "claim")
    assert c.ANNOTATION_SANDBOX_NAME not in stored["metadata"]["annotations"]
    assert stored["status"]["sandbox"]["name"] == "claim"  # fell through to a cold start


async def test_reference_to_sandbox_of_another_claim_is_cleared() -> None:
    w = World()
    w.claim()
    w.api.add(
        SANDBOXES,
        {
            "metadata": {
                "name": "theirs",
                "ownerReferences": [
                    {
                        "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
                        "kind": "SandboxClaim",
                        "name": "other",
                        "uid": "other-uid",
                        "controller": True,
                    }
                ],
            },
            "spec": {"podTemplate": _pod_template()},
        },
    )
    w.api.mutate(
        SANDBOX_CLAIMS,
        "claim",
        lambda o: (
            o["metadata"]
            .setdefault("annotations", {})
            .update({c.ANNOTATION_SANDBOX_NAME: "theirs"})
        ),
    )
    await w.reconcile()
    stored = w.get(SANDBOX_CLAIMS, "claim")
    assert c.ANNOTATION_SANDBOX_NAME not in stored["metadata"]["annotations"]
    assert w.get(SANDBOXES, "theirs")["metadata"]["ownerReferences"][0]["uid"] == "other-uid"


async def test_foreign_same_name_sandbox_is_reconciler_error() -> None:
    w = World()
    w.claim()
    w.api.add(SANDBOXES, {"metadata": {"name": "claim"}, "spec": {"podTemplate": _pod_template()}})
    with pytest.raises(ReconcilerError):
        await w.reconcile()
    ready = _ready_cond(w.get(SANDBOX_CLAIMS, "claim"))
    assert ready["reason"] == c.REASON_RECONCILER_ERROR
    assert ready["message"] == (
        'Error seen: sandbox "claim" is not controlled by claim "claim". Please use a '
        "different claim name or delete the sandbox manually"
    )


async def test_already_exists_is_create_pending_with_short_requeue() -> None:
    w = World()
    w.claim()
    w.sandboxes_reader = LaggingReader([])
    w.reconciler = w._make(True)
    w.api.add(SANDBOXES, {"metadata": {"name": "claim"}, "spec": {"podTemplate": _pod_template()}})
    result = await w.reconcile()
    assert result == Result(requeue_after=0.2)
    ready = _ready_cond(w.get(SANDBOX_CLAIMS, "claim"))
    assert (ready["reason"], ready["message"]) == (
        c.REASON_SANDBOX_CREATE_PENDING,
        "Sandbox already created; waiting for cache to converge",
    )
    assert w.recorder.events == []


async def test_pending_pod_ips_wait_then_cold_after_grace() -> None:
    w = World()
    w.member("pool-noip", ips=False)
    w.claim()
    result = await w.reconcile()
    assert result.requeue_after is not None
    assert 0 < result.requeue_after <= 0.5
    stored = w.get(SANDBOX_CLAIMS, "claim")
    assert "status" not in stored  # nothing computed or written
    assert w.queue.size(NS, "pool") == 1  # the candidate stays queued
    w.now = NOW + dt.timedelta(seconds=3)
    await w.reconcile()
    assert w.get(SANDBOX_CLAIMS, "claim")["status"]["sandbox"]["name"] == "claim"


async def test_template_and_pool_not_found() -> None:
    w = World()
    w.claim(warmPoolRef={"name": "nope"})
    result = await w.reconcile()
    assert result == Result(requeue_after=60.0)
    ready = _ready_cond(w.get(SANDBOX_CLAIMS, "claim"))
    assert (ready["reason"], ready["message"]) == (
        "WarmPoolNotFound",
        'SandboxWarmPool "nope" not found',
    )
    w.api.add(
        SANDBOX_WARM_POOLS,
        {"metadata": {"name": "p2"}, "spec": {"sandboxTemplateRef": {"name": "missing"}}},
    )
    w.claim("c2", warmPoolRef={"name": "p2"})
    await w.reconcile("c2")
    ready = _ready_cond(w.get(SANDBOX_CLAIMS, "c2"))
    assert (ready["reason"], ready["message"]) == (
        "TemplateNotFound",
        'SandboxTemplate "missing" not found',
    )


@pytest.mark.parametrize("policy", ["Retain", "Delete", "DeleteForeground"])
async def test_expiry_with_each_policy(policy: str) -> None:
    w = World()
    w.claim(lifecycle={"shutdownTime": "2026-08-01T11:30:00Z", "shutdownPolicy": policy})
    w.api.add(
        SANDBOXES,
        {
            "metadata": {
                "name": "claim",
                "ownerReferences": [
                    {
                        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                        "kind": "SandboxClaim",
                        "name": "claim",
                        "uid": w.get(SANDBOX_CLAIMS, "claim")["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {"podTemplate": _pod_template()},
        },
    )
    first = await w.reconcile()
    assert first == Result(requeue_after=0.001)
    ready = _ready_cond(w.get(SANDBOX_CLAIMS, "claim"))
    assert (ready["reason"], ready["message"]) == (
        "ClaimExpired",
        "Claim expired. Sandbox cleanup initiated.",
    )
    assert ("ClaimExpired", "Claim Expired", "Claim expired") in w.recorder.events
    await w.reconcile()
    if policy == "Retain":
        assert w.api.obj(SANDBOX_CLAIMS, "claim") is not None
        assert w.api.obj(SANDBOXES, "claim") is None
    else:
        assert w.api.obj(SANDBOX_CLAIMS, "claim") is None
        expected = "Foreground" if policy == "DeleteForeground" else None
        assert w.api.propagation[-1] == expected
        note = f"Deleting Claim (ShutdownPolicy={policy})"
        assert ("ClaimExpired", "Deleting", note) in w.recorder.events


async def test_expired_retain_with_foreign_sandbox_skips_deletion() -> None:
    w = World()
    w.claim(lifecycle={"shutdownTime": "2026-08-01T11:30:00Z"})
    w.api.add(SANDBOXES, {"metadata": {"name": "claim"}, "spec": {"podTemplate": _pod_template()}})
    await w.reconcile()
    await w.reconcile()
    assert w.api.obj(SANDBOXES, "claim") is not None
    ready = _ready_cond(w.get(SANDBOX_CLAIMS, "claim"))
    assert ready["reason"] == "ClaimExpired"
    assert ready["message"].endswith("; deletion skipped.")


async def test_status_conflict_is_dropped_silently() -> None:
    w = World()
    w.claim()
    w.api.fail(
        "patch", "sandboxclaims/status", ApiError(409, "Conflict", "the object has been modified")
    )
    result = await w.reconcile()
    assert result == Result()


async def test_disabled_observability_writes_no_annotations() -> None:
    w = World(persist=False)
    w.member("pool-a")
    w.claim()
    await w.reconcile()
    annotations = w.get(SANDBOX_CLAIMS, "claim")["metadata"]["annotations"]
    assert c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT not in annotations
    assert annotations[c.ANNOTATION_SANDBOX_NAME] == "pool-a"


@pytest.mark.parametrize(
    ("spec", "reason", "raises"),
    [
        (
            {"additionalPodMetadata": {"labels": {"nodomain": "x"}}},
            c.REASON_INVALID_METADATA,
            False,
        ),
        ({"env": [{"name": "A", "value": "b"}]}, c.REASON_ENV_VARS_INJECTION_REJECTED, False),
        (
            {
                "volumeClaimTemplates": [
                    {"metadata": {"name": "d"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
                ]
            },
            c.REASON_VOLUME_CLAIM_TEMPLATES_ERROR,
            False,
        ),
        (
            {"env": [{"name": "A", "value": "b", "containerName": "nope"}]},
            c.REASON_RECONCILER_ERROR,
            True,
        ),
    ],
)
async def test_user_errors_are_reported_and_only_some_retried(
    spec: Obj, reason: str, raises: bool
) -> None:
    w = World()
    if "containerName" in str(spec):
        w.api.mutate(
            SANDBOX_TEMPLATES,
            "tmpl",
            lambda o: o["spec"].update(envVarsInjectionPolicy="Allowed"),
        )
    w.claim(**spec)
    if raises:
        with pytest.raises(ReconcilerError):
            await w.reconcile()
    else:
        assert await w.reconcile() == Result()
    assert _ready_cond(w.get(SANDBOX_CLAIMS, "claim"))["reason"] == reason
    assert w.api.obj(SANDBOXES, "claim") is None


async def test_env_claims_skip_warm_candidates() -> None:
    w = World()
    w.api.mutate(
        SANDBOX_TEMPLATES, "tmpl", lambda o: o["spec"].update(envVarsInjectionPolicy="Overrides")
    )
    w.member("pool-a")
    w.claim(env=[{"name": "A", "value": "b"}])
    await w.reconcile()
    sandbox = w.get(SANDBOXES, "claim")
    assert sandbox["spec"]["podTemplate"]["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "b"}
    ]
    assert w.queue.size(NS, "pool") == 1


async def test_metrics_recorded_once_at_first_ready() -> None:
    from prometheus_client import CollectorRegistry

    from kube_agent_sandbox.extensions.claim.metrics import ClaimMetrics

    registry = CollectorRegistry()
    w = World(persist=False)
    w.reconciler._metrics = ClaimMetrics(registry)
    w.member("pool-a")
    w.claim()
    w.api.mutate(
        SANDBOX_CLAIMS,
        "claim",
        lambda o: (
            o["metadata"]
            .setdefault("annotations", {})
            .update({c.ANNOTATION_CLIENT_FIRST_REQUESTED_AT: "2026-08-01T11:59:58Z"})
        ),
    )
    await w.reconcile()
    await w.reconcile()
    labels = {"launch_type": "warm", "sandbox_template": "tmpl"}
    get = registry.get_sample_value
    assert get("agent_sandbox_client_claim_startup_latency_ms_count", labels) == 1.0
    assert get("agent_sandbox_client_claim_startup_latency_ms_sum", labels) == 2000.0
    # not persisted, yet measured from the time kept in memory
    assert get("agent_sandbox_claim_controller_startup_latency_ms_count", labels) == 1.0
    creation = {
        "namespace": NS,
        "sandbox_template": "tmpl",
        "launch_type": "warm",
        "warmpool_name": "pool",
        "pod_condition": "ready",
        "created_by": "unknown",
    }
    assert get("agent_sandbox_claim_creation_total", creation) == 1.0
