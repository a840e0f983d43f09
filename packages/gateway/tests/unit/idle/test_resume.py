"""The resumer: single flight, one patch, deadlines pushed, policy on traffic, conflicts."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api import keepstate
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import ApiError, FakeApi
from kube_agent_sandbox.gateway.annotations import ANNOTATION_TIMEOUT
from kube_agent_sandbox.gateway.index import NAME_INDEX, SandboxIndex, name_index
from kube_agent_sandbox.gateway.resume import NotResumable, Resumer, auto_resumable

NS = "tenant"
NOW = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)


@dataclass
class Options:
    default_timeout_seconds: int = 300


@dataclass
class State:
    """What the resumer uses of the gateway state."""

    api: FakeApi
    index: SandboxIndex
    options: Options = field(default_factory=Options)
    inits: list[str] = field(default_factory=list)
    kept_alive: list[str] = field(default_factory=list)

    async def init_sandbox(self, record: Any, *, env_vars: Any) -> bool:
        self.inits.append(record.sandbox_id)
        return True

    @property
    def activity(self) -> Any:
        state = self

        class _Activity:
            def keepalive(self, record: Any) -> None:
                state.kept_alive.append(record.sandbox_id)

        return _Activity()


def world(
    *,
    suspended_by: str | None = "idle",
    auto_resume: str | None = "true",
    pause_at: bool = True,
    claim_extra: dict[str, str] | None = None,
    sandbox_extra: dict[str, str] | None = None,
) -> State:
    api = FakeApi(default_namespace=NS)
    claim_annotations = {ANNOTATION_TIMEOUT: "600", **(claim_extra or {})}
    api.add(
        SANDBOX_CLAIMS,
        {
            "metadata": {"name": "sb", "namespace": NS, "annotations": claim_annotations},
            "spec": {"lifecycle": {"shutdownTime": "2026-12-01T12:01:00Z"}},
            "status": {
                "sandbox": {"name": "sb"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "r", "message": ""}],
            },
        },
    )
    annotations: dict[str, str] = dict(sandbox_extra or {})
    if suspended_by:
        annotations[c.ANNOTATION_SUSPENDED_BY] = suspended_by
    if auto_resume:
        annotations[c.ANNOTATION_AUTO_RESUME] = auto_resume
    if pause_at:
        annotations[c.ANNOTATION_PAUSE_AT] = "2026-12-01T11:59:00Z"
    api.add(
        SANDBOXES,
        {
            "metadata": {"name": "sb", "namespace": NS, "annotations": annotations},
            "spec": {"operatingMode": "Suspended"},
        },
    )
    index = SandboxIndex(
        api.reader(SANDBOX_CLAIMS, indexes={NAME_INDEX: name_index}),
        api.reader(SANDBOXES),
        api.reader(PODS),
    )
    return State(api, index)


def controller_brings_pod_up(state: State) -> None:
    """The Sandbox controller's part: a running Sandbox gets a Pod with an IP."""
    sandbox = state.api.obj(SANDBOXES, "sb", NS)
    assert sandbox is not None
    if sandbox["spec"].get("operatingMode") == "Running" and state.api.obj(PODS, "sb", NS) is None:
        state.api.add(
            PODS, {"metadata": {"name": "sb", "namespace": NS}, "status": {"podIP": "10.0.0.9"}}
        )
        state.index.notify()


def resumer(state: State, **kwargs: Any) -> Resumer:
    return Resumer(state, wall=lambda: NOW, **kwargs)


async def _controller_loop(state: State) -> None:
    while True:
        controller_brings_pod_up(state)
        await asyncio.sleep(0.01)


async def test_concurrent_resumes_make_one_patch_and_one_init() -> None:
    state = world()
    rs = resumer(state)
    record = state.index.lookup("sb")
    assert record is not None
    assert record.suspended
    loop = asyncio.create_task(_controller_loop(state))
    try:
        results = await asyncio.gather(*(rs.resume(record, on_traffic=True) for _ in range(8)))
    finally:
        loop.cancel()
    assert all(r.ready and r.pod is not None for r in results)
    patches = [call for call in state.api.writes(SANDBOXES) if call.verb == "patch"]
    assert len(patches) == 1
    assert rs.attempts == 1
    assert state.inits == ["sb"]
    assert state.kept_alive == ["sb"]
    body = patches[0].body
    assert body["spec"] == {"operatingMode": "Running"}
    assert body["metadata"]["annotations"] == {
        c.ANNOTATION_SUSPENDED_BY: None,
        c.ANNOTATION_PAUSE_AT: "2026-12-01T12:10:00Z",  # now + the claim's 600 s timeout
    }
    sandbox = state.api.obj(SANDBOXES, "sb", NS)
    assert sandbox is not None
    assert c.ANNOTATION_SUSPENDED_BY not in sandbox["metadata"]["annotations"]
    claim = state.api.obj(SANDBOX_CLAIMS, "sb", NS)
    assert claim is not None
    assert claim["spec"]["lifecycle"]["shutdownTime"] == "2026-12-01T12:10:00Z"


async def _resumed_sandbox(state: State) -> Any:
    record = state.index.lookup("sb")
    assert record is not None
    loop = asyncio.create_task(_controller_loop(state))
    try:
        await resumer(state).resume(record)
    finally:
        loop.cancel()
    sandbox = state.api.obj(SANDBOXES, "sb", NS)
    assert sandbox is not None
    return sandbox


async def test_the_resume_puts_the_claims_opt_in_back_after_a_files_only_pause() -> None:
    # the claim's auto-pause keeps memory; a pause with memory: false wrote Filesystem
    memory = {
        keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND: keepstate.MODE_MEMORY,
        keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK: keepstate.MODE_FILESYSTEM,
    }
    files = {keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND: keepstate.MODE_FILESYSTEM}
    state = world(claim_extra=memory, sandbox_extra=files)
    sandbox = await _resumed_sandbox(state)
    assert {key: sandbox["metadata"]["annotations"].get(key) for key in memory} == memory


async def test_a_claim_without_an_opt_in_leaves_the_sandboxs_alone_on_resume() -> None:
    files = {keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND: keepstate.MODE_FILESYSTEM}
    state = world(sandbox_extra=files)
    sandbox = await _resumed_sandbox(state)
    assert sandbox["metadata"]["annotations"][keepstate.ANNOTATION_SNAPSHOT_ON_SUSPEND] == (
        keepstate.MODE_FILESYSTEM
    )


@pytest.mark.parametrize(
    ("suspended_by", "auto_resume"),
    [(None, "true"), ("idle", None), ("idle", "false"), ("someone", "true")],
)
async def test_traffic_never_resumes_what_the_policy_does_not_allow(
    suspended_by: str | None, auto_resume: str | None
) -> None:
    state = world(suspended_by=suspended_by, auto_resume=auto_resume)
    record = state.index.lookup("sb")
    assert record is not None
    assert not auto_resumable(record.sandbox)
    with pytest.raises(NotResumable):
        await resumer(state).resume(record, on_traffic=True)
    assert state.api.writes() == []


async def test_timeout_suspends_resume_on_traffic_too() -> None:
    state = world(suspended_by="timeout")
    record = state.index.lookup("sb")
    assert record is not None
    assert auto_resumable(record.sandbox)


async def test_an_explicit_connect_resumes_a_manual_suspend() -> None:
    state = world(suspended_by=None, auto_resume=None, pause_at=False)
    record = state.index.lookup("sb")
    assert record is not None
    loop = asyncio.create_task(_controller_loop(state))
    try:
        fresh = await resumer(state).resume(record)
    finally:
        loop.cancel()
    assert fresh.ready
    (patch,) = list(state.api.writes(SANDBOXES))
    assert patch.body["metadata"]["annotations"] == {c.ANNOTATION_SUSPENDED_BY: None}


async def test_a_conflict_rereads_and_patches_again() -> None:
    state = world()
    conflict = ApiError(409, "Conflict", "modified")
    state.api.fail("patch", "sandboxes", conflict)
    record = state.index.lookup("sb")
    assert record is not None
    loop = asyncio.create_task(_controller_loop(state))
    try:
        fresh = await resumer(state).resume(record, on_traffic=True)
    finally:
        loop.cancel()
    assert fresh.ready
    verbs = [call.verb for call in state.api.calls if call.plural == "sandboxes"]
    assert verbs == ["patch", "get", "patch"]


async def test_a_resume_someone_else_already_made_is_joined_without_a_patch() -> None:
    state = world()
    record = state.index.lookup("sb")
    assert record is not None
    state.api.mutate(SANDBOXES, "sb", lambda o: o["spec"].update(operatingMode="Running"), NS)
    conflict = ApiError(409, "Conflict", "modified")
    state.api.fail("patch", "sandboxes", conflict)  # our stale patch meets the other resume
    loop = asyncio.create_task(_controller_loop(state))
    try:
        fresh = await resumer(state).resume(record, on_traffic=True)
    finally:
        loop.cancel()
    assert fresh.ready
    assert [c.verb for c in state.api.calls if c.plural == "sandboxes"] == ["patch", "get"]


async def test_not_ready_in_time_fails_and_the_next_call_tries_again() -> None:
    state = world()
    rs = resumer(state, ready_budget=0.2)
    record = state.index.lookup("sb")
    assert record is not None
    with pytest.raises(TimeoutError):
        await rs.resume(record, on_traffic=True)
    fresh_record = state.index.lookup("sb")
    assert fresh_record is not None
    controller_brings_pod_up(state)
    again = await rs.resume(fresh_record, on_traffic=True)
    assert again.ready
    assert rs.attempts == 2


async def test_a_caller_giving_up_does_not_cancel_the_shared_attempt() -> None:
    state = world()
    rs = resumer(state)
    record = state.index.lookup("sb")
    assert record is not None
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await rs.resume(record, on_traffic=True)
    controller_brings_pod_up(state)
    fresh = await rs.resume(record, on_traffic=True)
    assert fresh.ready
    assert rs.attempts == 1


async def test_a_sandbox_without_its_object_is_not_found() -> None:
    state = world()
    record = state.index.lookup("sb")
    assert record is not None
    unbound = type(record)(
        namespace=NS, claim=record.claim, sandbox=None, pod=None, ready=False, suspended=False
    )
    with pytest.raises(LookupError):
        await resumer(state).resume(unbound)
