"""When and how the Sandbox status is written (upstream's updateStatus).

The status is the controller's only output most clients read, and writing it is the
controller's most frequent API call. So: no write when nothing changed semantically, no write
for a change of ``nodeName`` alone while the Sandbox is not Ready (it rides along with the next
write, normally the Ready transition), and the write is a merge patch of the status subresource
without a resourceVersion (this controller is the sole status writer).

:class:`StatusWriter` also remembers what it wrote (read-your-writes), so passes that run
before the cache shows the write do not send the same status again, and it holds back a
change that only reports progress towards Ready (:func:`progress_only`) for at most
``--sandbox-status-coalesce-window``: a Sandbox whose Pod is created, scheduled and started
within the window gets one status write (Ready) instead of three.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    Obj,
    create_merge_patch,
    find_condition,
    is_condition_true,
    is_empty,
    name_of,
    namespace_of,
    semantic_equal,
    uid_of,
    wrap,
)
from kube_agent_sandbox.controller.sandbox.ownwrites import OwnWrite
from kube_agent_sandbox.controller.sandbox.writebehind import DeferralClock

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


def _condition(status: Obj, type_: str) -> tuple[str, str] | None:
    found = find_condition(status.get("conditions"), type_)
    return None if found is None else (str(found.get("status")), str(found.get("reason")))


def progress_only(old: Any, new: Any) -> bool:
    """Whether going from ``old`` to ``new`` only reports progress towards Ready.

    True when neither status is Ready, both are (or, for ``old``, not yet) in the normal
    not-ready-yet state (Ready False with reason ``DependenciesNotReady``, not suspended, not
    finished): the Pod was created, scheduled or got an IP. Errors, suspension, finishing,
    expiry and Ready itself are never progress only.
    """
    old_n, new_n = normalized(old), normalized(new)
    waiting = ("False", c.REASON_DEPENDENCIES_NOT_READY)
    if _condition(new_n, c.CONDITION_READY) != waiting:
        return False
    if _condition(old_n, c.CONDITION_READY) not in (None, waiting):
        return False
    if _condition(new_n, c.CONDITION_FINISHED) or _condition(old_n, c.CONDITION_FINISHED):
        return False
    not_suspended = ("False", c.REASON_NOT_SUSPENDED)
    if _condition(new_n, c.CONDITION_SUSPENDED) != not_suspended:
        return False
    return _condition(old_n, c.CONDITION_SUSPENDED) in (None, not_suspended)


@dataclass(frozen=True, slots=True)
class _Written:
    """The status this controller last wrote to one Sandbox, and that write's versions."""

    write: OwnWrite
    status: Obj


class StatusWriter:
    """Writes Sandbox statuses and overlays the last write while the cache lags behind it.

    The status this controller last wrote is kept per Sandbox with the UID, the
    resourceVersion it was computed from and the one the API server gave the write. While
    the cache still shows an older version (it has not delivered the write yet, though it may
    already show this controller's own metadata patch of the same pass), passes start from the
    written status instead of the stale one; otherwise each owned-Pod event would send the
    same status again until the cache caught up, and under load, when the cache lags most,
    the repeated writes would load the API server most.

    Args:
        client: The API client.
        coalesce_window: Seconds a progress-only change may wait for the next one (0: none).
        clock: Times the coalescing window (tests pass a settable clock).
    """

    def __init__(
        self, client: Client, *, coalesce_window: float = 0.0, clock: DeferralClock | None = None
    ) -> None:
        self._client = client
        self._written: dict[tuple[str, str], _Written] = {}
        self._window = max(0.0, coalesce_window)
        self._held = clock if clock is not None else DeferralClock()
        self._pending: dict[tuple[str, str], tuple[str | None, Obj]] = {}

    def forget(self, key: tuple[str, str]) -> None:
        """Drop the memo and any held change of a Sandbox (deleted, or terminating)."""
        self._written.pop(key, None)
        self._held.clear(key)
        self._pending.pop(key, None)

    def hold(self, sandbox: Obj, old_status: Obj) -> float | None:
        """Seconds to hold this pass's status change back, or None to write it now.

        Only a progress-only change (:func:`progress_only`) is held, for at most the window
        from when the first held change of the Sandbox was seen; the pass that finds the
        window over writes whatever the status is then. The held status is kept, so the next
        pass starts from it (:meth:`carry_held`) as it would from a written one.
        """
        key = (namespace_of(sandbox), name_of(sandbox))
        new = sandbox.get("status")
        self._pending.pop(key, None)
        if self._window <= 0 or not progress_only(old_status, new):
            self._held.clear(key)
            return None
        if status_patch(old_status, new) is None:
            return None
        due, wait = self._held.observe(key, self._window)
        if due:
            self._held.clear(key)
            return None
        self._pending[key] = (uid_of(sandbox), copy.deepcopy(new or {}))
        return wait

    def carry_held(self, key: tuple[str, str], sandbox: Obj) -> None:
        """Start ``sandbox`` from the status an earlier pass held back, if one is held.

        Without it, a pass that must write at once (expiry, an error) would start from the
        older cached status and lose what the held one reported (e.g. ``Suspended=False``).
        """
        held = self._pending.get(key)
        if held is not None and held[0] == uid_of(sandbox):
            sandbox["status"] = copy.deepcopy(held[1])

    def overlay(self, key: tuple[str, str], cached: Obj, sandbox: Obj) -> None:
        """Put the last written status on ``sandbox`` if ``cached`` predates that write."""
        written = self._written.pop(key, None)
        if written is not None and written.write.predates(cached):
            sandbox["status"] = copy.deepcopy(written.status)
            self._written[key] = written

    async def write(self, sandbox: Obj, old_status: Obj) -> None:
        """Patch the status subresource when the pass changed it (NotFound: deleted, fine).

        Raises:
            ReconcileError: ``failed to patch sandbox status``.
        """
        key = (namespace_of(sandbox), name_of(sandbox))
        self._pending.pop(key, None)
        self._held.clear(key)
        patch = status_patch(old_status, sandbox.get("status"))
        if patch is None:
            return
        self._written.pop(key, None)
        try:
            stored = await self._client.patch(
                SANDBOXES, key[0], key[1], patch, subresource="status"
            )
        except ApiError as exc:
            if exc.not_found:
                return  # deleted mid-reconcile
            raise wrap(exc, "failed to patch sandbox status") from exc
        except Exception as exc:
            raise wrap(exc, "failed to patch sandbox status") from exc
        self._written[key] = _Written(
            OwnWrite.of(sandbox, stored), copy.deepcopy(sandbox.get("status") or {})
        )
