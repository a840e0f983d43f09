"""``filterActiveSandboxes`` (upstream v0.5.6): count a pool's members, delete the stale, adopt
orphans.

The decisions (terminating, stale, orphan) come from :mod:`.members`; this module performs the
writes they call for and records the outcome on the :class:`~.passes.Pass`, errors included.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    Expectations,
    Obj,
    controller_ref,
    meta,
    name_of,
)
from kube_agent_sandbox.extensions.common.blueprint import (
    ON_REPLENISH,
    RECREATE,
    update_strategy,
)
from kube_agent_sandbox.extensions.common.ownership import controller_ref_to
from kube_agent_sandbox.extensions.warmpool.deletes import delete_member, delete_sandbox
from kube_agent_sandbox.extensions.warmpool.members import StalenessCheck, is_terminating
from kube_agent_sandbox.extensions.warmpool.passes import Pass, uid_of

__all__ = ["filter_active"]

log = logging.getLogger(__name__)

_KNOWN_STRATEGIES: Final = frozenset({RECREATE, ON_REPLENISH})


async def filter_active(
    run: Pass,
    listed: list[Obj],
    *,
    staleness: StalenessCheck | None,
    client: Client,
    expectations: Expectations,
) -> None:
    """Sort ``listed`` into ``run.active`` and ``run.terminating``; delete and fix as needed.

    Args:
        run: The pass; its counts, active list and errors are updated.
        listed: The pool's Sandboxes from the cache.
        staleness: The template's staleness check (None: the template is missing).
        client: Writes go here.
        expectations: The pool's pending deletions (and where new ones are recorded).
    """
    pool_uid = uid_of(run.pool)
    recreate = update_strategy(run.pool) == RECREATE
    asked = ((run.pool.get("spec") or {}).get("updateStrategy") or {}).get("type")
    if asked and asked not in _KNOWN_STRATEGIES:
        log.info(
            "unknown warm pool update strategy, using OnReplenish",
            extra={"pool": str(run.key), "updateStrategy": asked},
        )
    stale: list[tuple[Obj, bool]] = []
    fixes: list[tuple[Obj, bool]] = []
    for sb in listed:
        ref = controller_ref(sb)
        owned = ref is not None and bool(pool_uid) and ref.get("uid") == pool_uid
        if is_terminating(sb):
            run.terminating += owned
            continue
        if owned and expectations.is_pending_deletion(run.key, uid_of(sb)):
            run.terminating += 1
            continue
        if ref is not None and not owned:
            continue
        orphan = ref is None
        if staleness is not None and (recreate or orphan) and staleness.is_stale(sb):
            stale.append((sb, owned))
            continue
        labels = meta(sb).get("labels") or {}
        if orphan or labels.get(c.LABEL_LAUNCH_TYPE) != c.LAUNCH_TYPE_WARM:
            fixes.append((sb, orphan))
            continue
        run.active.append(sb)
    if stale:
        await _delete_stale(run, stale, client=client, expectations=expectations)
    if fixes:
        await _fix_members(run, fixes, client=client)


async def _delete_stale(
    run: Pass, stale: list[tuple[Obj, bool]], *, client: Client, expectations: Expectations
) -> None:
    async def delete(item: tuple[Obj, bool]) -> None:
        sb, owned = item
        try:
            if owned:
                await delete_member(client, expectations, run.key, sb)
            else:
                await delete_sandbox(client, sb)
        except Exception as exc:
            run.errors.append(exc)
            if owned:
                run.active.append(sb)  # still ours and still there
            return
        run.terminating += owned

    await asyncio.gather(*(delete(item) for item in stale))


async def _fix_members(run: Pass, fixes: list[tuple[Obj, bool]], *, client: Client) -> None:
    """Set the ``launch-type: warm`` label, and adopt orphans (controller reference)."""

    async def fix(item: tuple[Obj, bool]) -> None:
        sb, orphan = item
        m = meta(sb)
        patch_meta: dict[str, Any] = {
            "resourceVersion": m.get("resourceVersion"),
            "labels": {c.LABEL_LAUNCH_TYPE: c.LAUNCH_TYPE_WARM},
        }
        if orphan:
            refs = [r for r in m.get("ownerReferences") or () if isinstance(r, dict)]
            patch_meta["ownerReferences"] = [
                *refs,
                controller_ref_to(run.pool, kind=c.KIND_SANDBOX_WARM_POOL),
            ]
        try:
            updated = await client.patch(
                SANDBOXES, run.namespace, name_of(sb), {"metadata": patch_meta}
            )
        except Exception as exc:
            if orphan:
                if isinstance(exc, ApiError) and exc.conflict:
                    # Left uncounted, the orphan would get a replacement created in this
                    # very pass, and the pass that adopts it would trim one of the two.
                    run.adopting += 1
                run.errors.append(
                    RuntimeError(
                        "set controller reference for warm pool sandbox "
                        f"{run.namespace}/{name_of(sb)}: {exc}"
                    )
                )
                return
            run.errors.append(exc)
            run.active.append(sb)
            return
        if orphan:
            log.info(
                "adopted orphan sandbox into warm pool",
                extra={"pool": str(run.key), "sandbox": name_of(sb)},
            )
        run.active.append(updated)

    await asyncio.gather(*(fix(item) for item in fixes))
