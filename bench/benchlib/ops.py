"""Bounded-concurrency API calls with retries, and small statistics helpers.

The benchmarks drive the API server hard; a transient 429/5xx or dropped connection should
delay one call, not abort a 10,000-object run. Calls are retried with backoff; what still
fails is counted and reported.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from benchlib.stats import percentile
from kube_agent_sandbox.controller.runtime import ApiError

__all__ = ["BatchOutcome", "percentile", "run_bounded"]

log = logging.getLogger(__name__)

RETRIES = 5


@dataclass
class BatchOutcome:
    """What a batch of calls did.

    Attributes:
        started: ``time.monotonic()`` when the batch began.
        finished: ``time.monotonic()`` when the last call returned.
        sent_at: Per item, when its (first) call was sent.
        durations: Seconds each successful call took (last attempt).
        failures: Item -> error text, for calls that failed after retries.
        retries: Attempts beyond the first, over all items.
    """

    started: float = 0.0
    finished: float = 0.0
    sent_at: dict[str, float] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    retries: int = 0

    @property
    def seconds(self) -> float:
        """Wall time of the batch."""
        return self.finished - self.started

    @property
    def rate(self) -> float:
        """Successful calls per second."""
        return len(self.durations) / self.seconds if self.seconds > 0 else 0.0


def _retryable(err: BaseException) -> bool:
    if isinstance(err, ApiError):
        return err.status == 429 or err.status >= 500
    return isinstance(err, TimeoutError | aiohttp.ClientError | OSError)


async def run_bounded(
    items: Sequence[str],
    call: Callable[[str], Awaitable[object]],
    *,
    concurrency: int,
    ok: Callable[[BaseException], bool] = lambda err: False,
) -> BatchOutcome:
    """Run ``call(item)`` for every item, at most ``concurrency`` at a time, with retries.

    Args:
        items: Names to act on.
        call: The API call for one name.
        concurrency: Calls in flight at once.
        ok: Errors that count as success (e.g. 404 on delete).

    Returns:
        Timings and failures.
    """
    outcome = BatchOutcome(started=time.monotonic())
    semaphore = asyncio.Semaphore(concurrency)

    async def one(item: str) -> None:
        async with semaphore:
            outcome.sent_at[item] = time.monotonic()
            for attempt in range(RETRIES + 1):
                began = time.monotonic()
                try:
                    await call(item)
                except Exception as err:
                    if ok(err):
                        break
                    if attempt < RETRIES and _retryable(err):
                        outcome.retries += 1
                        await asyncio.sleep(min(5.0, 0.2 * 2**attempt))
                        continue
                    outcome.failures[item] = f"{type(err).__name__}: {err}"[:300]
                    return
                else:
                    break
            outcome.durations.append(time.monotonic() - began)

    await asyncio.gather(*(one(item) for item in items))
    outcome.finished = time.monotonic()
    if outcome.failures:
        first = next(iter(outcome.failures.items()))
        log.warning("%d calls failed, e.g. %s: %s", len(outcome.failures), *first)
    return outcome
