"""The status a pass writes, the merge patch that gets it there, and the write (``updateStatus``).

Zero values are omitted from the desired status (as Go's ``omitempty`` does) and cleared with
``null`` in the patch, so a pool scaled from 3 to 0 shows no stale ``replicas: 3``. Fields the
controller does not own are left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kube_agent_sandbox.api.resources import SANDBOX_WARM_POOLS
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj, meta, name_of
from kube_agent_sandbox.extensions.warmpool.passes import Pass, PoolState

__all__ = ["OWNED_FIELDS", "desired_status", "status_patch", "write_status"]

OWNED_FIELDS: Final = ("replicas", "readyReplicas", "selector", "observedGeneration")


def desired_status(
    *, replicas: int, ready_replicas: int, selector: str, observed_generation: int
) -> dict[str, Any]:
    """The owned status fields, zero values left out."""
    values: dict[str, Any] = {
        "replicas": replicas,
        "readyReplicas": ready_replicas,
        "selector": selector,
        "observedGeneration": observed_generation,
    }
    return {k: v for k, v in values.items() if v}


def status_patch(current: Obj | None, desired: dict[str, Any]) -> dict[str, Any]:
    """The ``status`` merge patch from ``current`` to ``desired`` (empty when equal)."""
    current = current or {}
    patch: dict[str, Any] = {}
    for name in OWNED_FIELDS:
        have = current.get(name) or None
        want = desired.get(name)
        if have != want:
            patch[name] = want
    return patch


async def write_status(
    run: Pass,
    state: PoolState,
    desired: dict[str, Any],
    *,
    client: Client,
    interval: float,
    clock: Callable[[], float],
) -> None:
    """Patch the owned status fields that changed, coalescing member-count changes.

    A write the cache does not show yet counts as the current status (no repeat). A change
    that only counts members, within ``interval`` seconds of the previous write, waits for
    the end of the interval (the pass requeues itself then), so a burst of claims costs one
    status write per interval instead of one per member taken or refilled.

    Args:
        run: The pass (its pool; its requeue when the write waits).
        state: The pool's last status write.
        desired: The owned status fields, as :func:`desired_status` returns them.
        client: Writes go here.
        interval: The ``status_interval`` setting (0: write every change at once).
        clock: Monotonic seconds.
    """
    pool = run.pool
    m = meta(pool)
    version = str(m.get("resourceVersion") or "")
    current = pool.get("status") or {}
    if state.written is not None:
        if state.written[0] == version:
            current = state.written[1]
        else:
            state.written = None
    patch = status_patch(current, desired)
    if not patch:
        return
    last = state.status_written_at
    if interval > 0 and last is not None and "observedGeneration" not in patch:
        wait = last + interval - clock()
        if wait > 0:
            run.requeue.at_most(wait)
            return
    try:
        await client.patch(
            SANDBOX_WARM_POOLS,
            str(m.get("namespace") or ""),
            name_of(pool),
            {"status": patch},
            subresource="status",
        )
    except ApiError as exc:
        if not exc.not_found:
            raise
        return
    state.status_written_at = clock()
    state.written = (version, {**current, **patch}) if version else None
