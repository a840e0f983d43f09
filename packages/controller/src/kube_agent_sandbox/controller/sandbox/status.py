"""When and how the Sandbox status is written (upstream's updateStatus).

The status is the controller's only output most clients read, and writing it is the
controller's most frequent API call. So: no write when nothing changed semantically, no write
for a change of ``nodeName`` alone while the Sandbox is not Ready (it rides along with the next
write, normally the Ready transition), and the write is a merge patch of the status subresource
without a resourceVersion (this controller is the sole status writer).

:class:`StatusWriter` also remembers what it wrote (read-your-writes), so passes that run
before the cache shows the write do not send the same status again.
"""

from __future__ import annotations

import copy
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    Obj,
    create_merge_patch,
    is_condition_true,
    is_empty,
    name_of,
    namespace_of,
    resource_version_of,
    semantic_equal,
    uid_of,
    wrap,
)

STATUS_FIELDS = ("serviceFQDN", "service", "conditions", "selector", "podIPs", "nodeName")


def normalized(status: Any) -> Obj:
    """The status as Go would serialise it: fields with empty values omitted."""
    if not isinstance(status, dict):
        return {}
    return {k: v for k, v in status.items() if not is_empty(v)}


def node_name_only_change(old: Obj, new: Obj) -> bool:
    """True when ``nodeName`` is the only semantic difference between two statuses."""
    if (old.get("nodeName") or "") == (new.get("nodeName") or ""):
        return False
    scratch = dict(new)
    scratch["nodeName"] = old.get("nodeName")
    return semantic_equal(old, scratch)


def status_patch(old: Any, new: Any) -> Obj | None:
    """The status merge patch to send, or None when no write is due.

    Args:
        old: The status as read at the start of the reconcile.
        new: The status computed by the reconcile.

    Returns:
        ``{"status": {...}}`` or None.
    """
    old_n, new_n = normalized(old), normalized(new)
    if semantic_equal(old_n, new_n):
        return None
    if node_name_only_change(old_n, new_n) and not is_condition_true(
        new_n.get("conditions"), c.CONDITION_READY
    ):
        return None
    diff = create_merge_patch(old_n, new_n)
    if not diff:
        return None
    return {"status": diff}


class StatusWriter:
    """Writes Sandbox statuses and overlays the last write while the cache lags behind it.

    The status this controller last wrote is kept per Sandbox with the UID and
    resourceVersion of the object it was computed from. While the cache still shows that
    resourceVersion (it has not delivered the write yet), passes start from the written
    status instead of the stale one; otherwise each owned-Pod event would send the same
    status again until the cache caught up.

    Args:
        client: The API client.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._written: dict[tuple[str, str], tuple[str | None, str | None, Obj]] = {}

    def forget(self, key: tuple[str, str]) -> None:
        """Drop the memo of a Sandbox (deleted, or terminating)."""
        self._written.pop(key, None)

    def overlay(self, key: tuple[str, str], cached: Obj, sandbox: Obj) -> None:
        """Put the last written status on ``sandbox`` if ``cached`` predates that write."""
        written = self._written.pop(key, None)
        if written is not None and written[:2] == (uid_of(cached), resource_version_of(cached)):
            sandbox["status"] = copy.deepcopy(written[2])
            self._written[key] = written

    async def write(self, sandbox: Obj, old_status: Obj) -> None:
        """Patch the status subresource when the pass changed it (NotFound: deleted, fine).

        Raises:
            ReconcileError: ``failed to patch sandbox status``.
        """
        patch = status_patch(old_status, sandbox.get("status"))
        if patch is None:
            return
        key = (namespace_of(sandbox), name_of(sandbox))
        self._written.pop(key, None)
        try:
            await self._client.patch(SANDBOXES, key[0], key[1], patch, subresource="status")
        except ApiError as exc:
            if exc.not_found:
                return  # deleted mid-reconcile
            raise wrap(exc, "failed to patch sandbox status") from exc
        except Exception as exc:
            raise wrap(exc, "failed to patch sandbox status") from exc
        self._written[key] = (
            uid_of(sandbox),
            resource_version_of(sandbox),
            copy.deepcopy(sandbox.get("status") or {}),
        )
