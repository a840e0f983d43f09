"""Deleting a pool's Sandboxes by UID, with the deletion expectation around it.

Every step that deletes (stale members, stuck members, excess members) goes through these two
functions, so the precondition and the expectation roll-back are written once.
"""

from __future__ import annotations

from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    Expectations,
    Obj,
    Request,
    meta,
    name_of,
)
from kube_agent_sandbox.extensions.warmpool.passes import uid_of

__all__ = ["delete_member", "delete_sandbox"]


async def delete_member(
    client: Client, expectations: Expectations, key: Request, sandbox: Obj
) -> None:
    """Delete a pool-owned member, expecting the deletion first (rolled back on failure)."""
    uid = uid_of(sandbox)
    expectations.expect_deletion(key, uid)
    try:
        gone = await delete_sandbox(client, sandbox)
    except BaseException:
        expectations.deletion_observed(key, uid)
        raise
    if gone:
        expectations.deletion_observed(key, uid)


async def delete_sandbox(client: Client, sandbox: Obj) -> bool:
    """Delete ``sandbox`` (this UID only). Returns True if it was already gone."""
    m = meta(sandbox)
    uid = uid_of(sandbox)
    try:
        await client.delete(
            SANDBOXES,
            str(m.get("namespace") or ""),
            name_of(sandbox),
            preconditions={"uid": uid} if uid else None,
        )
    except ApiError as exc:
        if exc.not_found or (exc.conflict and "Precondition" in exc.message):
            return True
        raise
    return False
