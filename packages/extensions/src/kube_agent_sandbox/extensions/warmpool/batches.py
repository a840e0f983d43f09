"""Slow-start batches: 1, 2, 4, 8 ... operations in parallel, stopping at the first failure.

A pool that must create 300 Sandboxes does so in about nine round trips instead of 300, yet a
request that is certain to fail (quota, admission, RBAC) fails once, not 300 times.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

__all__ = ["slow_start"]

T = TypeVar("T")


async def slow_start(
    items: Sequence[T], operation: Callable[[T], Awaitable[object]]
) -> tuple[int, list[BaseException]]:
    """Run ``operation`` on each item in doubling batches until a batch has a failure.

    Args:
        items: What to operate on, in order.
        operation: One request; raises on failure.

    Returns:
        ``(successes, errors)``; items after the first failed batch are not attempted.
    """
    done = 0
    successes = 0
    batch = 1
    while done < len(items):
        chunk = items[done : done + batch]
        done += len(chunk)
        results = await asyncio.gather(*(operation(item) for item in chunk), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        successes += len(chunk) - len(errors)
        if errors:
            for err in errors:
                if isinstance(err, asyncio.CancelledError):
                    raise err
            return successes, errors
        batch *= 2
    return successes, []
