"""The stuck-member pass (upstream's reconcilePool): delete members not Ready in time.

Members past the readiness grace period are deleted, except those whose pod is unschedulable
(held and counted, so the pool signals not-progressing instead of churning); members still in
their grace period set the earliest, jittered requeue.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable

from kube_agent_sandbox.controller.runtime import Client, Expectations, Obj
from kube_agent_sandbox.extensions.warmpool.deletes import delete_member
from kube_agent_sandbox.extensions.warmpool.members import StuckVerdict, stuck_verdict
from kube_agent_sandbox.extensions.warmpool.passes import Pass

__all__ = ["stuck_pass"]

log = logging.getLogger(__name__)


async def stuck_pass(
    run: Pass,
    *,
    pod_of: Callable[[Obj], Obj | None],
    now: dt.datetime,
    grace: float,
    jitter: Callable[[], float],
    client: Client,
    expectations: Expectations,
) -> None:
    """Delete members not Ready past the grace period, except unschedulable ones (held).

    Args:
        run: The pass; ``active`` keeps only the members that stay.
        pod_of: The cached pod of a member, if any.
        now: Wall clock of the pass (member ages).
        grace: Readiness grace period in seconds.
        jitter: Random number in [0, 1) for the grace requeue jitter.
        client: Writes go here.
        expectations: Where deletions are recorded before they are sent.
    """
    keep: list[Obj] = []
    stuck: list[Obj] = []
    earliest: float | None = None
    for sb in run.active:
        verdict, retry = stuck_verdict(sb, pod_of=pod_of, now=now, grace=grace)
        if verdict is StuckVerdict.STUCK:
            stuck.append(sb)
            continue
        if verdict is StuckVerdict.HOLD:
            run.unschedulable += 1
        elif retry is not None and (earliest is None or retry < earliest):
            earliest = retry
        keep.append(sb)
    if earliest is not None:
        run.requeue.at_most(earliest * (1.0 + 0.5 * jitter()))
    if stuck:
        log.info(
            "deleting warm pool sandboxes not ready past the grace period",
            extra={"pool": str(run.key), "count": len(stuck)},
        )

        async def delete(sb: Obj) -> None:
            try:
                await delete_member(client, expectations, run.key, sb)
            except Exception as exc:
                run.errors.append(exc)
                keep.append(sb)
                return
            run.terminating += 1

        await asyncio.gather(*(delete(sb) for sb in stuck))
    run.active = keep
