"""Work queue: dedup, one worker per key, delayed adds, backoff, shutdown, metrics."""

from __future__ import annotations

import asyncio

import pytest

from kube_agent_sandbox.controller.runtime import (
    ItemExponentialBackoff,
    QueueShutDown,
    RuntimeMetrics,
    WorkQueue,
)


def _queue(name: str = "q", **kwargs: object) -> tuple[WorkQueue[str], RuntimeMetrics]:
    metrics = RuntimeMetrics()
    return WorkQueue(name, metrics=metrics, **kwargs), metrics  # type: ignore[arg-type]


def _value(metrics: RuntimeMetrics, metric: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(metric, labels)
    return 0.0 if value is None else value


async def test_many_adds_of_one_key_queue_it_once() -> None:
    q, metrics = _queue()
    for _ in range(50):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"
    assert len(q) == 0
    assert _value(metrics, "workqueue_adds_total", name="q") == 2


async def test_key_added_while_processing_waits_for_done() -> None:
    q, _ = _queue()
    q.add("a")
    item = await q.get()
    q.add("a")
    q.add("a")
    # not handed out a second time while the first worker holds it
    assert len(q) == 0
    getter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not getter.done()
    q.done(item)
    assert await getter == "a"
    q.done("a")
    assert len(q) == 0


async def test_no_key_is_processed_by_two_workers_at_once() -> None:
    q, _ = _queue()
    active: set[str] = set()
    overlaps: list[str] = []
    processed: list[str] = []

    async def worker() -> None:
        while True:
            try:
                key = await q.get()
            except QueueShutDown:
                return
            if key in active:
                overlaps.append(key)
            active.add(key)
            await asyncio.sleep(0)  # let others run while we hold the key
            for _ in range(3):
                await asyncio.sleep(0)
            active.discard(key)
            processed.append(key)
            q.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(8)]
    for round_ in range(20):
        for key in ("a", "b", "c"):
            q.add(key)
        await asyncio.sleep(0)
        if round_ % 3 == 0:
            await asyncio.sleep(0)
    while True:
        if not len(q) and not q.processing():
            break
        await asyncio.sleep(0)
    q.shutdown()
    await asyncio.gather(*workers)
    assert overlaps == []
    assert set(processed) == {"a", "b", "c"}
    # far fewer reconciles than adds: dedup worked
    assert len(processed) < 60


async def test_add_after_delays_and_keeps_earliest_deadline() -> None:
    q, _ = _queue()
    q.add_after("a", 0.05)
    q.add_after("a", 10.0)  # later deadline is ignored
    assert q.delayed() == {"a"}
    assert len(q) == 0
    item = await asyncio.wait_for(q.get(), 5)
    assert item == "a"
    assert q.delayed() == frozenset()


async def test_add_after_earlier_deadline_replaces_later() -> None:
    q, _ = _queue()
    q.add_after("a", 100.0)
    q.add_after("a", 0.01)
    assert await asyncio.wait_for(q.get(), 5) == "a"


async def test_add_after_with_zero_delay_adds_now() -> None:
    q, _ = _queue()
    q.add_after("a", 0)
    assert len(q) == 1


async def test_rate_limited_adds_back_off_exponentially_until_forget() -> None:
    limiter = ItemExponentialBackoff(0.005, 1000.0)
    q, metrics = _queue(rate_limiter=limiter)
    q.add_rate_limited("a")
    q.add_rate_limited("a")
    q.add_rate_limited("a")
    assert q.num_requeues("a") == 3
    assert limiter.when("a") == pytest.approx(0.005 * 8)
    assert _value(metrics, "workqueue_retries_total", name="q") == 3
    q.forget("a")
    assert q.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


async def test_shutdown_wakes_getters_and_refuses_adds() -> None:
    q, _ = _queue()
    getter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add_after("x", 100)
    q.shutdown()
    with pytest.raises(QueueShutDown):
        await getter
    q.add("a")
    assert len(q) == 0
    assert q.delayed() == frozenset()
    with pytest.raises(QueueShutDown):
        await q.get()


async def test_shutdown_with_drain_waits_for_processing() -> None:
    q, _ = _queue()
    q.add("a")
    item = await q.get()
    drain = asyncio.create_task(q.shutdown_with_drain(5))
    await asyncio.sleep(0.01)
    assert not drain.done()
    q.done(item)
    assert await drain is True


async def test_shutdown_with_drain_reports_timeout() -> None:
    q, _ = _queue()
    q.add("a")
    await q.get()
    assert await q.shutdown_with_drain(0.01) is False


async def test_cancelled_getter_passes_its_wakeup_on() -> None:
    q, _ = _queue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("a")  # wakes `first`
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, 5) == "a"


async def test_depth_and_duration_metrics() -> None:
    now = [100.0]
    q, metrics = _queue(clock=lambda: now[0])
    q.add("a")
    q.add("b")
    assert _value(metrics, "workqueue_depth", name="q") == 2
    now[0] = 101.0
    item = await q.get()
    assert _value(metrics, "workqueue_depth", name="q") == 1
    assert _value(metrics, "workqueue_queue_duration_seconds_sum", name="q") == pytest.approx(1.0)
    now[0] = 104.0
    assert _value(metrics, "workqueue_longest_running_processor_seconds", name="q") == 3.0
    assert _value(metrics, "workqueue_unfinished_work_seconds", name="q") == 3.0
    q.done(item)
    assert _value(metrics, "workqueue_work_duration_seconds_sum", name="q") == pytest.approx(3.0)
    assert _value(metrics, "workqueue_longest_running_processor_seconds", name="q") == 0.0
