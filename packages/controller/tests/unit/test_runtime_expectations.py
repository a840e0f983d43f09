"""Controller expectations: creations/deletions in flight per key, with a TTL."""

from __future__ import annotations

import asyncio

import pytest

from kube_agent_sandbox.controller.runtime import Expectations


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_no_record_is_satisfied() -> None:
    assert Expectations().satisfied("pool")


def test_creations_pending_until_observed() -> None:
    exp = Expectations()
    exp.expect_creations("pool", 2)
    assert not exp.satisfied("pool")
    exp.creation_observed("pool")
    assert exp.pending("pool") == (1, frozenset())
    exp.creation_observed("pool")
    exp.creation_observed("pool")  # never below zero
    assert exp.satisfied("pool")
    assert exp.pending("pool") == (0, frozenset())


def test_try_expect_creations_refuses_while_unsatisfied_and_non_positive() -> None:
    exp = Expectations()
    assert exp.try_expect_creations("pool", 0) is False
    assert exp.try_expect_creations("pool", -3) is False
    assert exp.satisfied("pool")
    assert exp.try_expect_creations("pool", 3) is True
    assert exp.try_expect_creations("pool", 3) is False
    assert exp.pending("pool")[0] == 3


async def test_concurrent_reconciles_reserve_creations_once() -> None:
    exp = Expectations()
    created: list[int] = []

    async def reconcile(i: int) -> None:
        await asyncio.sleep(0)
        if exp.try_expect_creations("pool", 5):
            created.extend(range(5))
        await asyncio.sleep(0)

    await asyncio.gather(*(reconcile(i) for i in range(20)))
    assert len(created) == 5


def test_deletions_pending_by_uid_and_empty_uid_ignored() -> None:
    exp = Expectations()
    exp.expect_deletion("pool", "")
    assert exp.satisfied("pool")
    assert len(exp) == 0
    exp.expect_deletion("pool", "u1")
    exp.expect_deletion("pool", "u2")
    assert exp.is_pending_deletion("pool", "u1")
    assert not exp.satisfied("pool")
    exp.deletion_observed("pool", "u1")
    assert not exp.is_pending_deletion("pool", "u1")
    exp.deletion_observed("pool", "u2")
    assert exp.satisfied("pool")


def test_records_time_out() -> None:
    clock = Clock()
    exp = Expectations(ttl=300, clock=clock)
    exp.expect_creations("pool", 4)
    exp.expect_deletion("other", "u1")
    clock.now = 299
    assert not exp.satisfied("pool")
    assert exp.is_pending_deletion("other", "u1")
    clock.now = 301
    assert exp.satisfied("pool")
    assert not exp.is_pending_deletion("other", "u1")
    assert len(exp) == 0  # timed-out records are dropped


def test_expect_deletion_refreshes_raised_at() -> None:
    clock = Clock()
    exp = Expectations(ttl=10, clock=clock)
    exp.expect_deletion("pool", "u1")
    clock.now = 8
    exp.expect_deletion("pool", "u2")
    clock.now = 15
    assert exp.is_pending_deletion("pool", "u1")


def test_forget_drops_record() -> None:
    exp = Expectations()
    exp.expect_creations("pool", 1)
    exp.forget("pool")
    assert exp.satisfied("pool")


def test_negative_expectation_rejected() -> None:
    with pytest.raises(ValueError, match="negative"):
        Expectations().expect_creations("pool", -1)
