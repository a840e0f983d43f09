"""Resume on traffic: bring an idle-suspended sandbox back while the caller waits.

Many requests can hit a suspended sandbox at once (an SDK retries, a client opens several
streams); they must cause one resume, not one each. :class:`Resumer` runs one attempt per
sandbox and lets every caller await it: patch ``operatingMode: Running`` (dropping
``suspended-by`` and moving ``pause-at`` forward in the same patch, so the idle reconciler
cannot suspend it again at once), push the claim's deadline forward, wait until the Pod is
Ready in the index cache, re-run the daemon's ``/init`` on the new pod and renew the heartbeat
Lease. A caller that gives up (its hold budget ran out) does not cancel the attempt.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, Final, Protocol

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.heartbeat import parse_micro_time
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj
from kube_agent_sandbox.gateway.activity import KeepAlive
from kube_agent_sandbox.gateway.annotations import ANNOTATION_TIMEOUT
from kube_agent_sandbox.gateway.envvars import EnvNotRestored, load_env
from kube_agent_sandbox.gateway.index import SandboxIndex, SandboxRecord
from kube_agent_sandbox.gateway.metrics import ENV_RESTORE, GatewayMetrics
from kube_agent_sandbox.gateway.pausekeeps import restored_opt_in

__all__ = [
    "RESUMABLE_BY",
    "NotResumable",
    "Resumer",
    "ResumerState",
    "auto_resumable",
]

log = logging.getLogger(__name__)

RESUME_WRITE_ATTEMPTS = 10
"""Conflicting writes a resume rides out: while a pause is being saved, the state keeper and the
core controller write the Sandbox too (three were too few in CI under load)."""

RESUMABLE_BY: Final = frozenset({c.SUSPENDED_BY_IDLE, c.SUSPENDED_BY_TIMEOUT})
READY_BUDGET: Final = 60.0
"""Seconds a resume waits for the Pod to be Ready."""


class NotResumable(LookupError):
    """Traffic may not resume this sandbox (suspended by hand, or no ``auto-resume``)."""


def _annotations(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def _mode(sandbox: Obj | None) -> str | None:
    return ((sandbox or {}).get("spec") or {}).get("operatingMode")


def auto_resumable(sandbox: Obj | None) -> bool:
    """Whether traffic may resume ``sandbox``: suspended by the idle or timeout policy, and
    ``auto-resume: "true"``. A manual suspend (no ``suspended-by``) never qualifies."""
    annotations = _annotations(sandbox)
    return (
        _mode(sandbox) == c.OPERATING_MODE_SUSPENDED
        and annotations.get(c.ANNOTATION_SUSPENDED_BY) in RESUMABLE_BY
        and annotations.get(c.ANNOTATION_AUTO_RESUME) == "true"
    )


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class TimeoutOptions(Protocol):
    """The gateway setting a resume reads (``gateway.config.GatewayOptions``)."""

    @property
    def default_timeout_seconds(self) -> int:
        """The E2B timeout of a sandbox created without one."""
        ...


class ResumerState(Protocol):
    """What the resumer uses of the gateway state (``gateway.state.GatewayState``)."""

    @property
    def api(self) -> Client:
        """The Kubernetes client (patch and get of Sandboxes and claims)."""
        ...

    @property
    def index(self) -> SandboxIndex:
        """The sandbox index (the resumer waits on it for Ready)."""
        ...

    @property
    def options(self) -> TimeoutOptions:
        """The gateway's settings."""
        ...

    @property
    def activity(self) -> KeepAlive:
        """Activity accounting: a resume renews the heartbeat Lease."""
        ...

    async def init_sandbox(self, record: SandboxRecord, *, env_vars: dict[str, str]) -> bool:
        """``POST /init`` to the sandbox's daemon."""
        ...


def _rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Resumer:
    """Single-flight resume per sandbox (see the module docstring).

    Args:
        state: The gateway state (see :class:`ResumerState`).
        wall: The current UTC time (tests).
        ready_budget: Seconds to wait for the Pod to be Ready.
        metrics: Where finished attempts are counted by result (none when omitted).
    """

    def __init__(
        self,
        state: ResumerState,
        *,
        wall: Callable[[], dt.datetime] = _utcnow,
        ready_budget: float = READY_BUDGET,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.state = state
        self.metrics = metrics
        self._wall = wall
        self.ready_budget = ready_budget
        self._inflight: dict[tuple[str, str], asyncio.Task[SandboxRecord]] = {}
        self.attempts = 0
        """Resume attempts started (concurrent callers share one)."""

    async def resume(self, record: SandboxRecord, *, on_traffic: bool = False) -> SandboxRecord:
        """Resume ``record``'s sandbox and return its Ready record.

        Args:
            record: The index record (``SandboxRecord``).
            on_traffic: Enforce the auto-resume policy (data-plane traffic); an explicit
                E2B connect passes False and resumes any suspend, as E2B does.

        Raises:
            NotResumable: ``on_traffic`` and the policy does not allow it.
            LookupError: The sandbox has no Sandbox object or vanished meanwhile.
            TimeoutError: Not Ready within the budget.
        """
        sandbox = record.sandbox
        if sandbox is None:
            raise LookupError(f"sandbox {record.sandbox_id} has no Sandbox object")
        suspended = _mode(sandbox) == c.OPERATING_MODE_SUSPENDED
        if on_traffic and suspended and not auto_resumable(sandbox):
            raise NotResumable(f"sandbox {record.sandbox_id} may not be resumed by traffic")
        key = (record.namespace, record.sandbox_id)
        task = self._inflight.get(key)
        if task is None:
            self.attempts += 1
            task = asyncio.create_task(self._attempt(record), name=f"resume-{record.sandbox_id}")
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._done(key, done))
        return await asyncio.shield(task)

    def _done(self, key: tuple[str, str], task: asyncio.Task[SandboxRecord]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if self.metrics is not None and not task.cancelled():
            self.metrics.record_resume(task.exception())
        if not task.cancelled() and task.exception() is not None:
            log.info("sandbox %s: resume failed: %s", key[1], task.exception())

    async def _attempt(self, record: SandboxRecord) -> SandboxRecord:
        # read before the pod starts: a sandbox whose environment is unreadable stays paused
        try:
            env_vars = await load_env(self.state.api, record.namespace, record.claim)
        except EnvNotRestored as err:
            log.error("%s: not resumed", err)
            if self.metrics is not None:
                self.metrics.env_failures_total.labels(ENV_RESTORE).inc()
            raise
        await self._set_running(record)
        await self._push_claim_deadline(record)
        fresh = await self.state.index.wait_for(
            record.sandbox_id,
            lambda r: r is None or (r.ready and not r.suspended),
            namespace=record.namespace,
            within=self.ready_budget,
        )
        if fresh is None:
            raise LookupError(f"sandbox {record.sandbox_id} was deleted while resuming")
        await self.state.init_sandbox(fresh, env_vars=env_vars)
        self.state.activity.keepalive(fresh)
        log.info("sandbox %s resumed", record.sandbox_id)
        return fresh

    def timeout_seconds(self, record: SandboxRecord) -> int:
        """The sandbox's E2B timeout (its annotation, else the gateway's default)."""
        raw = record.annotations.get(ANNOTATION_TIMEOUT)
        try:
            seconds = int(str(raw))
        except (TypeError, ValueError):
            seconds = 0
        if seconds > 0:
            return seconds
        return int(self.state.options.default_timeout_seconds)

    async def _set_running(self, record: SandboxRecord) -> None:
        """One patch: Running, no ``suspended-by``, ``pause-at`` moved forward (if set)."""
        sandbox = record.sandbox
        if sandbox is None:  # checked by resume(); the record is immutable
            raise LookupError(f"sandbox {record.sandbox_id} has no Sandbox object")
        name = str(sandbox["metadata"]["name"])
        for _ in range(RESUME_WRITE_ATTEMPTS):
            if _mode(sandbox) != c.OPERATING_MODE_SUSPENDED:
                return  # already running (resumed by someone else): just wait for Ready
            annotations: dict[str, str | None] = {c.ANNOTATION_SUSPENDED_BY: None}
            # a pause's own choice (memory: false) ends here: auto-pause keeps the claim's
            annotations.update(restored_opt_in(record.annotations))
            if c.ANNOTATION_PAUSE_AT in _annotations(sandbox):
                later = self._wall() + dt.timedelta(seconds=self.timeout_seconds(record))
                annotations[c.ANNOTATION_PAUSE_AT] = _rfc3339(later)
            patch = {
                "metadata": {
                    "resourceVersion": sandbox["metadata"].get("resourceVersion"),
                    "annotations": annotations,
                },
                "spec": {"operatingMode": c.OPERATING_MODE_RUNNING},
            }
            try:
                await self.state.api.patch(SANDBOXES, record.namespace, name, patch)
                return
            except ApiError as err:
                if err.not_found:
                    raise LookupError(f"sandbox {record.sandbox_id} is gone") from err
                if not err.conflict:
                    raise
            sandbox = await self.state.api.get(SANDBOXES, record.namespace, name)
        raise TimeoutError(f"sandbox {record.sandbox_id}: resume kept conflicting")

    async def _push_claim_deadline(self, record: SandboxRecord) -> None:
        """E2B restarts the timeout on resume: move the claim's deadline to now + timeout."""
        later = self._wall() + dt.timedelta(seconds=self.timeout_seconds(record))
        spec = record.claim.get("spec") or {}
        lifecycle = dict(spec.get("lifecycle") or {})
        patch: dict[str, Any] = {}
        shutdown = parse_micro_time(lifecycle.get("shutdownTime"))
        if shutdown is not None and shutdown < later:
            patch["spec"] = {"lifecycle": {**lifecycle, "shutdownTime": _rfc3339(later)}}
        if c.ANNOTATION_PAUSE_AT in record.annotations:
            patch["metadata"] = {"annotations": {c.ANNOTATION_PAUSE_AT: _rfc3339(later)}}
        if not patch:
            return
        try:
            await self.state.api.patch(SANDBOX_CLAIMS, record.namespace, record.sandbox_id, patch)
        except ApiError as err:
            if not err.not_found:
                raise
