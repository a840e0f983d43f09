"""The idle reconciler's decisions, on a FakeApi with a fake clock."""

from __future__ import annotations

import datetime as dt

import pytest
from idle_harness import (
    NS,
    T0,
    Clock,
    idle_annotations,
    renew,
    sandbox,
    sandbox_writes,
    wired,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from kube_agent_sandbox.api.rest import LEASES, POD_METRICS
from kube_agent_sandbox.controller.runtime import ApiError, Request
from kube_agent_sandbox.extensions.idle.reconciler import IdleReconciler, last_activity

REQ = Request(NS, "sb")
IDLE = 900.0


def _mode(api: object, name: str = "sb") -> str | None:
    obj = api.obj(SANDBOXES, name, NS)  # type: ignore[attr-defined]
    return None if obj is None else obj["spec"].get("operatingMode")


async def test_idle_sandbox_is_suspended_exactly_once() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    stored = api.add(SANDBOXES, sandbox(annotations=idle_annotations()))
    renew(api, stored, T0)

    clock.at(IDLE - 1)
    result = await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []
    assert result.requeue_after == pytest.approx(1.0)

    clock.at(IDLE)
    assert (await reconciler.reconcile(REQ)).requeue_after is None
    (patch,) = sandbox_writes(api)
    assert patch.body["spec"] == {"operatingMode": c.OPERATING_MODE_SUSPENDED}
    assert patch.body["metadata"]["annotations"] == {c.ANNOTATION_SUSPENDED_BY: "idle"}
    assert patch.body["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert recorder.reasons() == ["IdleSuspended"]
    assert "15m0s" in recorder.events[0]["note"]

    for later in (IDLE + 1, IDLE * 3):
        clock.at(later)
        await reconciler.reconcile(REQ)
    assert len(sandbox_writes(api)) == 1
    assert recorder.reasons() == ["IdleSuspended"]
    assert _mode(api) == c.OPERATING_MODE_SUSPENDED
    assert api.writes("sandboxes/status") == []


async def test_a_renewal_one_second_before_the_deadline_prevents_it() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    stored = api.add(SANDBOXES, sandbox(annotations=idle_annotations()))
    renew(api, stored, T0)
    renew(api, stored, T0 + dt.timedelta(seconds=IDLE - 1))

    clock.at(IDLE)
    result = await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []
    assert result.requeue_after == pytest.approx(IDLE - 1)
    assert recorder.events == []

    clock.at(2 * IDLE - 1)
    await reconciler.reconcile(REQ)
    assert _mode(api) == c.OPERATING_MODE_SUSPENDED


async def test_without_a_lease_the_ready_transition_counts_as_activity() -> None:
    clock = Clock()
    api, reconciler, _ = wired(clock)
    api.add(SANDBOXES, sandbox(annotations=idle_annotations(), ready_at=T0 + dt.timedelta(60)))
    clock.at(IDLE + 30)
    await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []


async def test_a_sandbox_that_is_not_ready_is_never_idle_suspended() -> None:
    clock = Clock()
    api, reconciler, _ = wired(clock)
    api.add(SANDBOXES, sandbox(annotations=idle_annotations(), ready_at=None))
    clock.at(IDLE * 10)
    result = await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []
    assert result.requeue_after is None


async def test_the_last_resume_counts_as_activity() -> None:
    obj = sandbox(annotations=idle_annotations())
    obj["status"]["conditions"][1]["lastTransitionTime"] = "2026-12-01T13:00:00Z"
    assert last_activity(obj, None) == dt.datetime(2026, 12, 1, 13, tzinfo=dt.UTC)


async def test_a_cache_behind_the_server_is_checked_before_acting() -> None:
    clock = Clock()
    api, reconciler, _ = wired(clock)
    stored = api.add(SANDBOXES, sandbox(annotations=idle_annotations()))
    renew(api, stored, T0)
    # The cache still has the old Lease; the server has a renewal from a moment ago.
    reconciler._leases = api.reader(SANDBOX_TEMPLATES)  # a cache that lacks the Lease
    renew(api, stored, T0 + dt.timedelta(seconds=IDLE - 5))
    clock.at(IDLE)
    await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []
    assert [call.verb for call in api.calls if call.plural == "leases"] == ["get"]


async def test_a_manual_suspend_is_left_alone() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    api.add(SANDBOXES, sandbox(annotations=idle_annotations(), mode="Suspended"))
    clock.at(IDLE * 2)
    await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []
    stored = api.obj(SANDBOXES, "sb", NS)
    assert stored is not None
    assert c.ANNOTATION_SUSPENDED_BY not in stored["metadata"]["annotations"]
    assert recorder.events == []


async def test_a_resume_by_hand_clears_the_suspended_by_record() -> None:
    clock = Clock()
    api, reconciler, _ = wired(clock)
    annotations = idle_annotations(**{c.ANNOTATION_SUSPENDED_BY: "idle"})
    api.add(SANDBOXES, sandbox(annotations=annotations, mode="Running"))
    await reconciler.reconcile(REQ)
    stored = api.obj(SANDBOXES, "sb", NS)
    assert stored is not None
    assert c.ANNOTATION_SUSPENDED_BY not in stored["metadata"]["annotations"]
    assert stored["spec"]["operatingMode"] == "Running"


async def test_a_conflict_rereads_and_suspends_once() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    stored = api.add(SANDBOXES, sandbox(annotations=idle_annotations()))
    renew(api, stored, T0)
    raced = False

    def other_writer(verb: str, resource: object, namespace: object, name: object) -> None:
        nonlocal raced
        if verb == "patch" and not raced:
            raced = True
            api.mutate(
                SANDBOXES, "sb", lambda o: o["metadata"].setdefault("labels", {}).update(x="y")
            )

    api.on_request = other_writer
    clock.at(IDLE + 10)
    await reconciler.reconcile(REQ)
    patches = [call for call in sandbox_writes(api) if call.verb == "patch"]
    assert len(patches) == 2  # the first met a 409
    assert (
        patches[0].body["metadata"]["resourceVersion"]
        != patches[1].body["metadata"]["resourceVersion"]
    )
    assert _mode(api) == c.OPERATING_MODE_SUSPENDED
    assert recorder.reasons() == ["IdleSuspended"]


async def test_a_conflict_with_a_resume_converges_to_running() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    stored = api.add(SANDBOXES, sandbox(annotations=idle_annotations()))
    renew(api, stored, T0)
    raced = False

    def gateway(verb: str, resource: object, namespace: object, name: object) -> None:
        nonlocal raced
        if verb == "patch" and not raced:
            raced = True
            # Traffic arrived: the gateway renewed the Lease and touched the Sandbox.
            renew(api, stored, clock())
            api.mutate(SANDBOXES, "sb", lambda o: o["metadata"]["annotations"].update(touched="1"))

    api.on_request = gateway
    clock.at(IDLE + 10)
    result = await reconciler.reconcile(REQ)
    assert _mode(api) is None
    assert recorder.events == []
    assert result.requeue_after == pytest.approx(IDLE)


async def test_endless_conflicts_are_retried_later() -> None:
    clock = Clock()
    api, reconciler, _ = wired(clock)
    api.add(SANDBOXES, sandbox(annotations=idle_annotations()))
    conflict = ApiError(409, "Conflict", "modified")
    api.fail("patch", "sandboxes", conflict, conflict, conflict)
    clock.at(IDLE * 2)
    result = await reconciler.reconcile(REQ)
    assert result.requeue is True
    assert _mode(api) is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("fifteen minutes", "is not a Go duration"),
        ("30s", "shorter than the minimum of 60s"),
        ("-5m", "is negative"),
        ("15", "is not a Go duration"),
    ],
)
async def test_an_invalid_idle_timeout_is_reported_once_and_ignored(
    value: str, fragment: str
) -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    api.add(SANDBOXES, sandbox(annotations=idle_annotations(value)))
    clock.at(IDLE * 10)
    for _ in range(3):
        assert (await reconciler.reconcile(REQ)).requeue_after is None
    assert sandbox_writes(api) == []
    (event,) = recorder.events
    assert event["reason"] == "InvalidIdlePolicy"
    assert event["type"] == "Warning"
    assert fragment in event["note"]


async def test_zero_means_off() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    api.add(SANDBOXES, sandbox(annotations=idle_annotations("0")))
    clock.at(IDLE * 10)
    await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []
    assert recorder.events == []


async def test_pause_at_suspends_with_timeout_at_that_time() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    api.add(SANDBOXES, sandbox(annotations={c.ANNOTATION_PAUSE_AT: "2026-12-01T12:05:00Z"}))
    clock.at(200)
    assert (await reconciler.reconcile(REQ)).requeue_after == pytest.approx(100)
    assert sandbox_writes(api) == []
    clock.at(300)
    await reconciler.reconcile(REQ)
    stored = api.obj(SANDBOXES, "sb", NS)
    assert stored is not None
    assert stored["spec"]["operatingMode"] == c.OPERATING_MODE_SUSPENDED
    assert stored["metadata"]["annotations"][c.ANNOTATION_SUSPENDED_BY] == "timeout"
    assert recorder.reasons() == ["TimeoutSuspended"]


async def test_pause_at_and_idle_take_the_earlier_requeue() -> None:
    clock = Clock()
    api, reconciler, _ = wired(clock)
    annotations = idle_annotations("2m", **{c.ANNOTATION_PAUSE_AT: "2026-12-01T14:00:00+01:00"})
    api.add(SANDBOXES, sandbox(annotations=annotations))
    clock.at(60)
    assert (await reconciler.reconcile(REQ)).requeue_after == pytest.approx(60)


async def test_an_invalid_pause_at_is_reported() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    api.add(SANDBOXES, sandbox(annotations={c.ANNOTATION_PAUSE_AT: "tomorrow"}))
    await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []
    assert recorder.reasons() == ["InvalidIdlePolicy"]
    assert "RFC 3339" in recorder.events[0]["note"]


async def test_on_idle_delete_deletes_the_owning_claim() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    claim = api.add(SANDBOX_CLAIMS, {"metadata": {"name": "sb", "namespace": NS}, "spec": {}})
    api.add(
        SANDBOXES,
        sandbox(
            annotations=idle_annotations(**{c.ANNOTATION_ON_IDLE: "Delete"}), owner_claim=claim
        ),
    )
    clock.at(IDLE)
    await reconciler.reconcile(REQ)
    (delete,) = api.writes(SANDBOX_CLAIMS)
    assert delete.verb == "delete"
    assert delete.preconditions == {"uid": claim["metadata"]["uid"]}
    assert api.obj(SANDBOX_CLAIMS, "sb", NS) is None
    assert _mode(api) is None  # not suspended: the claim's deletion takes the Sandbox with it
    assert recorder.reasons() == ["IdleDeleted"]
    assert "SandboxClaim sb" in recorder.events[0]["note"]


async def test_on_idle_delete_deletes_an_unowned_sandbox() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    api.add(SANDBOXES, sandbox(annotations=idle_annotations(**{c.ANNOTATION_ON_IDLE: "Delete"})))
    clock.at(IDLE)
    await reconciler.reconcile(REQ)
    assert api.obj(SANDBOXES, "sb", NS) is None
    assert recorder.reasons() == ["IdleDeleted"]


async def test_an_unknown_on_idle_falls_back_to_suspend_and_says_so() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    api.add(SANDBOXES, sandbox(annotations=idle_annotations(**{c.ANNOTATION_ON_IDLE: "Nuke"})))
    clock.at(IDLE)
    await reconciler.reconcile(REQ)
    assert _mode(api) == c.OPERATING_MODE_SUSPENDED
    assert recorder.reasons() == ["InvalidIdlePolicy", "IdleSuspended"]


def _pod_metrics(cpu: str) -> dict[str, object]:
    return {
        "metadata": {"name": "sb", "namespace": NS},
        "containers": [{"name": "c", "usage": {"cpu": cpu, "memory": "10Mi"}}],
    }


async def test_a_busy_cpu_vetoes_the_suspend() -> None:
    clock = Clock()
    api, reconciler, _ = wired(clock)
    annotations = idle_annotations(**{c.ANNOTATION_BUSY_CPU_MILLICORES: "100"})
    api.add(SANDBOXES, sandbox(annotations=annotations))
    api.add(POD_METRICS, _pod_metrics("250000000n"))  # 250m
    clock.at(IDLE)
    result = await reconciler.reconcile(REQ)
    assert _mode(api) is None
    assert result.requeue_after == pytest.approx(IDLE / 10)

    api.mutate(POD_METRICS, "sb", lambda o: o["containers"][0]["usage"].update(cpu="20m"))
    await reconciler.reconcile(REQ)
    assert _mode(api) == c.OPERATING_MODE_SUSPENDED


async def test_without_metrics_the_veto_is_skipped_and_the_event_says_so() -> None:
    clock = Clock()
    api, reconciler, recorder = wired(clock)
    annotations = idle_annotations(**{c.ANNOTATION_BUSY_CPU_MILLICORES: "100"})
    api.add(SANDBOXES, sandbox(annotations=annotations))
    clock.at(IDLE)
    await reconciler.reconcile(REQ)
    assert _mode(api) == c.OPERATING_MODE_SUSPENDED
    assert "CPU veto skipped: metrics.k8s.io unavailable (404" in recorder.events[0]["note"]


async def test_the_policy_is_copied_from_the_template_and_the_claim() -> None:
    clock = Clock()
    api, reconciler, _ = wired(clock)
    api.add(
        SANDBOX_TEMPLATES,
        {
            "metadata": {
                "name": "tmpl",
                "namespace": NS,
                "annotations": {
                    c.ANNOTATION_IDLE_TIMEOUT: "10m",
                    c.ANNOTATION_AUTO_RESUME: "true",
                    c.ANNOTATION_SUSPENDED_BY: "idle",  # never inherited
                },
            },
            "spec": {},
        },
    )
    claim = api.add(
        SANDBOX_CLAIMS,
        {
            "metadata": {
                "name": "sb",
                "namespace": NS,
                "annotations": {
                    c.ANNOTATION_IDLE_TIMEOUT: "20m",
                    c.ANNOTATION_PAUSE_AT: "2026-12-02T00:00:00Z",
                },
            },
            "spec": {},
        },
    )
    obj = sandbox(annotations={c.ANNOTATION_SANDBOX_TEMPLATE_REF: "tmpl"}, owner_claim=claim)
    obj["spec"]["podTemplate"]["metadata"] = {
        "annotations": {c.ANNOTATION_BUSY_CPU_MILLICORES: "50"}
    }
    api.add(SANDBOXES, obj)
    await reconciler.reconcile(REQ)
    stored = api.obj(SANDBOXES, "sb", NS)
    assert stored is not None
    annotations = stored["metadata"]["annotations"]
    assert annotations[c.ANNOTATION_IDLE_TIMEOUT] == "20m"
    assert annotations[c.ANNOTATION_AUTO_RESUME] == "true"
    assert annotations[c.ANNOTATION_BUSY_CPU_MILLICORES] == "50"
    assert annotations[c.ANNOTATION_PAUSE_AT] == "2026-12-02T00:00:00Z"
    assert c.ANNOTATION_SUSPENDED_BY not in annotations
    # Once copied, nothing more to write.
    api.clear_calls()
    await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []


async def test_a_sandbox_value_wins_over_inherited_ones() -> None:
    clock = Clock()
    api, reconciler, _ = wired(clock)
    api.add(
        SANDBOX_TEMPLATES,
        {
            "metadata": {
                "name": "tmpl",
                "namespace": NS,
                "annotations": {c.ANNOTATION_IDLE_TIMEOUT: "10m"},
            },
            "spec": {},
        },
    )
    annotations = {c.ANNOTATION_SANDBOX_TEMPLATE_REF: "tmpl", c.ANNOTATION_IDLE_TIMEOUT: "0"}
    api.add(SANDBOXES, sandbox(annotations=annotations))
    clock.at(IDLE * 10)
    await reconciler.reconcile(REQ)
    assert sandbox_writes(api) == []


async def test_a_deleted_sandbox_is_forgotten() -> None:
    clock = Clock()
    _, reconciler, _ = wired(clock)
    assert (await reconciler.reconcile(REQ)).requeue_after is None


async def test_lease_events_map_to_their_sandbox() -> None:
    from kube_agent_sandbox.api.heartbeat import lease_body
    from kube_agent_sandbox.extensions.idle.setup import lease_to_sandbox

    stored = sandbox()
    stored["metadata"]["uid"] = "u1"
    lease = lease_body(stored, holder="h", duration_seconds=60, now=T0)
    assert list(lease_to_sandbox(lease)) == [REQ]
    lease["metadata"]["ownerReferences"] = []
    assert list(lease_to_sandbox(lease)) == []
    assert LEASES.group == "coordination.k8s.io"


async def test_a_restarted_reconciler_rebuilds_the_timer_from_the_lease() -> None:
    clock = Clock()
    api, first, _ = wired(clock)
    stored = api.add(SANDBOXES, sandbox(annotations=idle_annotations()))
    renew(api, stored, T0 + dt.timedelta(seconds=100))
    clock.at(400)
    before = await first.reconcile(REQ)
    # A new process: nothing carried over but the API's objects.
    second = IdleReconciler(
        api,
        sandboxes=api.reader(SANDBOXES),
        leases=api.reader(LEASES),
        claims=api.reader(SANDBOX_CLAIMS),
        templates=api.reader(SANDBOX_TEMPLATES),
        recorder=first._recorder,
        clock=clock,
    )
    after = await second.reconcile(REQ)
    assert before.requeue_after == after.requeue_after == pytest.approx(600)
