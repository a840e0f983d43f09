"""The embedding guide's own reconciler, unit-tested with the runtime's FakeApi.

This file is also the guide's example of testing a reconciler without a cluster: ``FakeApi``
is the in-memory API server shipped in the wheel, and its ``reader`` stands in for a synced
informer cache.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kube_agent_sandbox.controller.runtime import ApiError, FakeApi, Request

EXAMPLE = Path(__file__).resolve().parents[4] / "docs" / "examples" / "embedding_own_reconciler.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("embedding_own_reconciler", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


usage = _load()


class Events:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def event(self, obj: object, *, type_: str, reason: str, action: str, note: str) -> None:
        self.reasons.append(reason)


# --8<-- [start:test]
def reconciler(api: FakeApi, events: Events) -> Any:
    return usage.SandboxUsageReconciler(
        api,
        sandboxes=api.reader(usage.SANDBOXES),
        reports=api.reader(usage.CONFIG_MAPS),
        recorder=events,
    )


async def test_counts_sandboxes_and_writes_only_changes() -> None:
    api, events = FakeApi(default_namespace="team-a"), Events()
    for name in ("one", "two"):
        api.add(usage.SANDBOXES, {"metadata": {"name": name}})
    rec = reconciler(api, events)
    request = Request("team-a", usage.USAGE_NAME)

    await rec.reconcile(request)
    report = api.obj(usage.CONFIG_MAPS, usage.USAGE_NAME)
    assert report is not None
    assert report["data"] == {"sandboxes": "2"}
    assert events.reasons == ["Created"]

    api.clear_calls()
    await rec.reconcile(request)  # nothing changed: nothing written
    assert api.writes() == []

    api.add(usage.SANDBOXES, {"metadata": {"name": "three"}})
    await rec.reconcile(request)
    [patch] = api.writes(usage.CONFIG_MAPS)
    assert patch.body == {"data": {"sandboxes": "3"}}


# --8<-- [end:test]


async def test_an_empty_namespace_gets_no_report() -> None:
    api = FakeApi(default_namespace="team-a")
    await reconciler(api, Events()).reconcile(Request("team-a", usage.USAGE_NAME))
    assert api.writes() == []


async def test_a_report_created_meanwhile_is_not_an_error() -> None:
    """The cache had no report, the API server had one: the create loses, no retry needed."""
    api, events = FakeApi(default_namespace="team-a"), Events()
    api.add(usage.SANDBOXES, {"metadata": {"name": "one"}})
    api.fail("create", "configmaps", ApiError(409, "AlreadyExists", "exists"))
    await reconciler(api, events).reconcile(Request("team-a", usage.USAGE_NAME))
    assert events.reasons == []


async def test_other_write_errors_are_retried() -> None:
    api = FakeApi(default_namespace="team-a")
    api.add(usage.SANDBOXES, {"metadata": {"name": "one"}})
    api.fail("create", "configmaps", ApiError(403, "Forbidden", "no"))
    # raised, so the controller retries it with backoff
    with pytest.raises(ApiError, match="403 Forbidden"):
        await reconciler(api, Events()).reconcile(Request("team-a", usage.USAGE_NAME))
