"""The gateway's backstop for pause-on-timeout: Sandboxes left running past ``pause-at``."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiError, FakeApi, Obj
from kube_agent_sandbox.gateway.overdue_pause import OverduePauses

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
NS = "tenant"


def _sandbox(api: FakeApi, name: str, *, pause_at: str | None, mode: str = "Running") -> Obj:
    annotations = {} if pause_at is None else {c.ANNOTATION_PAUSE_AT: pause_at}
    return api.add(
        SANDBOXES,
        {
            "metadata": {"name": name, "namespace": NS, "annotations": annotations},
            "spec": {"operatingMode": mode},
        },
    )


def _ago(seconds: int) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _backstop(api: FakeApi, names: list[str]) -> OverduePauses:
    def sandboxes() -> list[Obj]:
        return [obj for name in names if (obj := api.obj(SANDBOXES, name, NS)) is not None]

    return OverduePauses(lambda: api, sandboxes, clock=lambda: NOW, grace=30)


def _mode(api: FakeApi, name: str) -> tuple[str, str | None]:
    obj = api.obj(SANDBOXES, name, NS)
    assert obj is not None
    annotations = obj["metadata"].get("annotations") or {}
    return obj["spec"]["operatingMode"], annotations.get(c.ANNOTATION_SUSPENDED_BY)


async def test_a_sandbox_long_past_its_pause_deadline_is_paused_as_the_reconciler_would(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FakeApi()
    _sandbox(api, "overdue", pause_at=_ago(120))
    backstop = _backstop(api, ["overdue"])
    with caplog.at_level(logging.WARNING):
        assert await backstop.sweep() == 1
    # suspended-by timeout: the data plane still resumes it on traffic (auto-resume)
    assert _mode(api, "overdue") == ("Suspended", "timeout")
    assert "--idle-shutdown" in caplog.text
    assert "120 s past" in caplog.text
    assert await backstop.sweep() == 0  # once only
    assert backstop.paused == 1


async def test_sandboxes_in_grace_without_deadline_or_suspended_are_left_alone() -> None:
    api = FakeApi()
    _sandbox(api, "in-grace", pause_at=_ago(10))
    _sandbox(api, "future", pause_at=(NOW + timedelta(minutes=5)).isoformat())
    _sandbox(api, "no-deadline", pause_at=None)
    _sandbox(api, "garbled", pause_at="yesterday")
    _sandbox(api, "paused", pause_at=_ago(300), mode="Suspended")
    names = ["in-grace", "future", "no-deadline", "garbled", "paused"]
    assert await _backstop(api, names).sweep() == 0
    assert [_mode(api, n)[0] for n in names] == ["Running"] * 4 + ["Suspended"]
    assert not [call for call in api.calls if call.verb == "patch"]


async def test_a_racing_writer_wins_and_errors_do_not_stop_the_sweep() -> None:
    api = FakeApi()
    names = ("failing", "raced", "fine")  # the order of the sweep
    for name in names:
        _sandbox(api, name, pause_at=_ago(100))
    stale = {name: api.obj(SANDBOXES, name, NS) for name in names}
    # the reconciler (or a resume) wrote "raced" after the cache saw it
    raced = stale["raced"]
    assert raced is not None
    api.add(SANDBOXES, {**raced, "spec": {"operatingMode": "Running", "x": 1}})
    api.fail("patch", SANDBOXES.plural, ApiError(500, "InternalError", "etcd hiccup"))

    backstop = OverduePauses(
        lambda: api, lambda: [obj for obj in stale.values() if obj], clock=lambda: NOW, grace=30
    )
    assert await backstop.sweep() == 1
    assert _mode(api, "raced")[0] == "Running"  # conflict: left to the newer writer
    assert _mode(api, "fine") == ("Suspended", "timeout")
    assert _mode(api, "failing")[0] == "Running"  # ...and the next sweep retries it
    fresh = [api.obj(SANDBOXES, name, NS) for name in ("failing",)]
    retry = OverduePauses(lambda: api, lambda: fresh, clock=lambda: NOW, grace=30)
    assert await retry.sweep() == 1
    assert _mode(api, "failing") == ("Suspended", "timeout")
