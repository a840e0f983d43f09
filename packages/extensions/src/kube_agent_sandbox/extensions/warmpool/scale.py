"""Refill and trim a pool (upstream's reconcilePool, takeRefillTokens).

Both steps are gated by the pool's :class:`Expectations`, never by a wait: a pass that finds
earlier writes unobserved skips the step and requeues, and the Sandbox events that lower the
expectations requeue the pool sooner. Writes go out in slow-start batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiError, Client, Expectations, Obj, name_of
from kube_agent_sandbox.extensions.warmpool.batches import slow_start
from kube_agent_sandbox.extensions.warmpool.blueprint import named_member
from kube_agent_sandbox.extensions.warmpool.deletes import delete_member
from kube_agent_sandbox.extensions.warmpool.members import deletion_order
from kube_agent_sandbox.extensions.warmpool.passes import Pass, PoolState

__all__ = ["EXPECTATIONS_REQUEUE", "GENERATE_NAME_ATTEMPTS", "create_members", "trim_members"]

log = logging.getLogger(__name__)

EXPECTATIONS_REQUEUE: Final = 30.0
"""Seconds before re-checking a pool whose earlier writes are not yet in the cache."""
GENERATE_NAME_ATTEMPTS: Final = 3
"""Tries of a create whose generated name collides (AlreadyExists) before it counts as failed."""
_NAMES_LOGGED: Final = 10


async def create_members(
    run: Pass,
    state: PoolState,
    deficit: int,
    *,
    body: Callable[[], Obj],
    client: Client,
    expectations: Expectations,
) -> int:
    """Create up to ``deficit`` members, paced and gated by the expectations.

    Args:
        run: The pass; requeue and errors are updated.
        state: The pool's refill shaping (token bucket, replenish hold).
        deficit: Members missing, already capped at the batch size.
        body: Builds the member to create (called once, only if something is created).
        client: Writes go here.
        expectations: Pending creations are recorded here before the creates.

    Returns:
        How many members were created.
    """
    granted = deficit
    if state.bucket is not None:
        granted, wait = state.bucket.take(deficit)
        if granted == 0:
            run.requeue.at_most(wait)
            return 0
    if not expectations.try_expect_creations(run.key, granted):
        if state.bucket is not None:
            state.bucket.refund(granted)
        run.requeue.at_most(EXPECTATIONS_REQUEUE)
        return 0
    member = body()

    async def create(_: int) -> None:
        for attempt in range(GENERATE_NAME_ATTEMPTS):
            try:
                await client.create(SANDBOXES, run.namespace, named_member(member))
                return
            except ApiError as exc:
                # a drawn name collided with an existing one: draw another
                if not exc.already_exists or attempt + 1 == GENERATE_NAME_ATTEMPTS:
                    raise

    created, errors = await slow_start(range(granted), create)
    for _ in range(granted - created):
        expectations.creation_observed(run.key)
    state.hold.created(created)
    log.debug(
        "created warm pool sandboxes",
        # not "created": a LogRecord attribute, which ``extra`` must not overwrite (KeyError)
        extra={"pool": str(run.key), "count": created, "wanted": granted},
    )
    run.errors.extend(errors)
    return created


async def trim_members(
    run: Pass, excess: int, *, client: Client, expectations: Expectations
) -> None:
    """Delete ``excess`` members: not Ready first, then newest first."""
    if not expectations.satisfied(run.key):
        run.requeue.at_most(EXPECTATIONS_REQUEUE)
        return
    victims = deletion_order(run.active)[:excess]
    log.info(
        "deleting excess warm pool sandboxes",
        extra={
            "pool": str(run.key),
            "count": len(victims),
            "sandboxes": [name_of(sb) for sb in victims[:_NAMES_LOGGED]],
        },
    )

    async def delete(sb: Obj) -> None:
        await delete_member(client, expectations, run.key, sb)

    _, errors = await slow_start(victims, delete)
    run.errors.extend(errors)
