"""Backstop of E2B's pause-on-timeout: a sandbox past its ``pause-at`` never runs on.

A create with ``lifecycle.on_timeout: "pause"`` gives the sandbox a ``pause-at`` deadline
that the controller's idle reconciler (``--idle-shutdown``) acts on. The documented installs
run it; an install that does not (a controller without the flag, or one the user deploys
another way) would leave such a sandbox running past its end, silently and billed. So every
:data:`SWEEP_SECONDS` the gateway suspends each Sandbox whose deadline passed more than
:data:`GRACE_SECONDS` ago, with the reconciler's own patch (``operatingMode: Suspended``,
``suspended-by: timeout``, so auto-resume still works), guarded by the resourceVersion it
saw so a racing writer (the reconciler, a resume, another replica) wins, and logs a warning
that names the missing flag.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj
from kube_agent_sandbox.gateway.controlplane.models import parse_time
from kube_agent_sandbox.gateway.index import is_suspended
from kube_agent_sandbox.gateway.periodic import Periodic

log = logging.getLogger(__name__)

SWEEP_SECONDS = 10.0
GRACE_SECONDS = 30.0
"""The reconciler acts at the deadline; the gateway steps in only when it clearly did not."""


def overdue(sandbox: Obj, now: datetime, grace: timedelta) -> datetime | None:
    """The ``pause-at`` of a running Sandbox that is more than ``grace`` past it, else None."""
    meta = sandbox.get("metadata") or {}
    if meta.get("deletionTimestamp") or is_suspended(sandbox):
        return None
    annotations = meta.get("annotations") or {}
    pause_at = parse_time(annotations.get(c.ANNOTATION_PAUSE_AT))
    if pause_at is None or now - pause_at <= grace:
        return None
    return pause_at


class OverduePauses:
    """Suspends Sandboxes the idle reconciler left running past ``pause-at`` (a Runnable).

    Args:
        api: the client (``patch`` on Sandboxes), read at each sweep.
        sandboxes: the Sandboxes of the gateway's own claims (others' ``pause-at`` is the
            reconciler's business only), read at each sweep.
        clock: the current time (tests).
        grace: how far past its deadline a Sandbox must be.
    """

    def __init__(
        self,
        api: Callable[[], Client],
        sandboxes: Callable[[], Iterable[Obj]],
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        grace: float = GRACE_SECONDS,
    ) -> None:
        self._api = api
        self._sandboxes = sandboxes
        self._clock = clock
        self._grace = timedelta(seconds=grace)
        self._loop = Periodic("overdue pause sweep", SWEEP_SECONDS, self.sweep)
        self.paused = 0

    async def sweep(self) -> int:
        """Suspend every overdue Sandbox once; how many were suspended."""
        now = self._clock()
        done = 0
        for sandbox in self._sandboxes():
            pause_at = overdue(sandbox, now, self._grace)
            if pause_at is not None and await self._suspend(sandbox, pause_at, now):
                done += 1
        self.paused += done
        return done

    async def _suspend(self, sandbox: Obj, pause_at: datetime, now: datetime) -> bool:
        meta = sandbox["metadata"]
        namespace, name = str(meta.get("namespace") or ""), str(meta["name"])
        patch: dict[str, Any] = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {c.ANNOTATION_SUSPENDED_BY: c.SUSPENDED_BY_TIMEOUT},
            },
            "spec": {"operatingMode": c.OPERATING_MODE_SUSPENDED},
        }
        try:
            await self._api().patch(SANDBOXES, namespace, name, patch)
        except ApiError as err:
            if not (err.conflict or err.not_found):
                log.warning("could not pause overdue sandbox %s/%s: %s", namespace, name, err)
            return False
        late = int((now - pause_at).total_seconds())
        log.warning(
            "sandbox %s/%s ran %d s past its pause deadline: paused it; the controller's idle "
            "reconciler should have (is the controller running with --idle-shutdown?)",
            namespace,
            name,
            late,
        )
        return True

    async def start(self) -> None:
        """Start the sweep loop (once the caches synced)."""
        await self._loop.start()

    async def stop(self) -> None:
        """Stop the loop."""
        await self._loop.stop()
