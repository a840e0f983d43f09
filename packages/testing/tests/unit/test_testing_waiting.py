"""Pure parts of the waits: object references, a condition's boolean status, in-process waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kube_agent_sandbox.testing.waiting import (
    ObjectRef,
    WaitTimeoutError,
    condition_status,
    eventually,
    wait_for_condition,
)


def test_object_ref_from_a_manifest() -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
    }
    ref = ObjectRef.of(manifest)
    assert ref == ObjectRef("v1", "Pod", "p", "ns")
    assert str(ref) == "Pod ns/p"
    assert ObjectRef.of(ref) is ref
    assert str(ObjectRef("v1", "Node", "n")) == "Node n"


@pytest.mark.parametrize(
    "manifest",
    [
        {"kind": "Pod", "metadata": {"name": "p"}},
        {"apiVersion": "v1", "metadata": {"name": "p"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {}},
        {"apiVersion": "v1", "kind": "Pod"},
    ],
    ids=["no-apiVersion", "no-kind", "no-name", "no-metadata"],
)
def test_object_ref_needs_version_kind_and_name(manifest: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"apiVersion, kind and metadata\.name"):
        ObjectRef.of(manifest)


def _with(*conditions: dict[str, str]) -> dict[str, Any]:
    return {"status": {"conditions": list(conditions)}}


def test_condition_status_reads_the_boolean_status() -> None:
    obj = _with({"type": "Ready", "status": "False"}, {"type": "Other", "status": "True"})
    assert condition_status(obj, "Ready") == "False"
    assert condition_status(obj, "Other") == "True"


def test_presence_is_not_truth() -> None:
    """A condition that is present but not True does not count as True."""
    obj = _with({"type": "Ready", "status": "Unknown"})
    assert condition_status(obj, "Ready") != "True"


@pytest.mark.parametrize(
    "obj",
    [None, {}, {"status": {}}, {"status": {"conditions": None}}, _with({"type": "Ready"})],
    ids=["none", "empty", "no-conditions", "null-conditions", "no-status-field"],
)
def test_condition_status_of_missing_conditions_is_none(obj: dict[str, Any] | None) -> None:
    assert condition_status(obj, "Ready") is None


@pytest.mark.parametrize("status", ["true", "yes", "", "Ready"])
def test_wait_for_condition_rejects_a_non_condition_status(status: str) -> None:
    with pytest.raises(ValueError, match="True, False or Unknown"):
        wait_for_condition(None, ObjectRef("v1", "Pod", "p", "ns"), "Ready", status=status)  # type: ignore[arg-type]


async def test_eventually_returns_once_another_task_changed_the_state() -> None:
    seen: list[int] = []

    async def producer() -> None:
        for i in range(3):
            await asyncio.sleep(0.01)
            seen.append(i)

    task = asyncio.create_task(producer())
    await eventually(lambda: len(seen) == 3, within=5, what="three items")
    assert seen == [0, 1, 2]
    await task


async def test_eventually_checks_at_once() -> None:
    calls: list[None] = []

    def check() -> bool:
        calls.append(None)
        return True

    await eventually(check, within=0)
    assert len(calls) == 1


async def test_eventually_times_out_with_what_it_waited_for() -> None:
    with pytest.raises(WaitTimeoutError, match=r"timed out after 0.05s waiting for the moon"):
        await eventually(lambda: False, within=0.05, what="the moon")


async def test_eventually_lets_a_broken_check_fail() -> None:
    def broken() -> bool:
        raise KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        await eventually(broken, within=5)
