"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

Only one replica may run the controllers. A candidate takes the Lease when it is free, released
(empty holder) or not renewed for ``leaseDurationSeconds`` as measured on the candidate's own
clock since it last saw the record change; the leader renews every ``retry_period`` and gives
up when it could not renew for ``renew_deadline``. Writes use the Lease's resourceVersion, so
two candidates never both win. On a clean stop the leader releases the Lease (empty holder,
duration 1 s) so a successor takes over at once (``ReleaseOnCancel``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kube_agent_sandbox.api.rest import LEASES
from kube_agent_sandbox.controller.runtime.metrics import RuntimeMetrics, default_metrics
from kube_agent_sandbox.controller.runtime.types import ApiError, Client, Obj

logger = logging.getLogger(__name__)


JITTER_FACTOR = 1.2


def default_identity() -> str:
    """``<hostname>_<uuid>``, as controller-runtime names leader election candidates."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def micro_time(ts: float) -> str:
    """Format a UNIX time as a Kubernetes MicroTime (``2006-01-02T15:04:05.000000Z``)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElectionLost(Exception):
    """The Lease could not be renewed within the renew deadline."""


@dataclass
class LeaderElectionConfig:
    """Lease location and timing (client-go / controller-runtime defaults).

    Attributes:
        lease_name: the Lease object name.
        lease_namespace: its namespace.
        identity: this candidate's holder identity.
        lease_duration: seconds a non-leader waits before taking an unrenewed Lease.
        renew_deadline: seconds the leader retries renewing before giving up.
        retry_period: seconds between attempts.
        release_on_cancel: release the Lease on a clean stop.
    """

    lease_name: str
    lease_namespace: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True

    def validate(self) -> None:
        """Check the client-go constraints.

        Raises:
            ValueError: if names are empty or the timings are inconsistent.
        """
        if not self.lease_name or not self.lease_namespace:
            raise ValueError("lease name and namespace are required")
        if not self.identity:
            raise ValueError("identity must not be empty")
        if self.retry_period <= 0 or self.renew_deadline <= 0 or self.lease_duration <= 0:
            raise ValueError("lease duration, renew deadline and retry period must be positive")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError("renew_deadline must be greater than 1.2 * retry_period")


class LeaderElector:
    """Acquires, renews and releases one Lease.

    Args:
        client: API client (get/create/update on Leases).
        config: lease location and timing (validated here).
        metrics: metric set; the process default when omitted.
        clock: wall clock for the Lease timestamps.
        monotonic: clock for expiry decisions.

    Raises:
        ValueError: for an invalid ``config``.
    """

    def __init__(
        self,
        client: Client,
        config: LeaderElectionConfig,
        *,
        metrics: RuntimeMetrics | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        config.validate()
        self.client = client
        self.config = config
        self._clock = clock
        self._mono = monotonic
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._lease: Obj | None = None
        self._leader = False
        self._m_status = (metrics or default_metrics()).leader_election_master_status.labels(
            name=config.lease_name
        )
        self._m_status.set(0)

    @property
    def is_leader(self) -> bool:
        """True while this candidate holds the Lease (as of its last successful write)."""
        return self._leader

    def _set_leader(self, leader: bool) -> None:
        if leader != self._leader:
            logger.info(
                "%s leadership of lease %s/%s",
                "acquired" if leader else "lost",
                self.config.lease_namespace,
                self.config.lease_name,
            )
        self._leader = leader
        self._m_status.set(1 if leader else 0)

    def _record(self, *, acquire_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": micro_time(self._clock()),
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go ``tryAcquireOrRenew``); True if we hold the Lease after it."""
        cfg = self.config
        now_wall = self._clock()
        now = self._mono()
        try:
            lease = await self.client.get(LEASES, cfg.lease_namespace, cfg.lease_name)
        except ApiError as exc:
            if not exc.not_found:
                logger.warning(
                    "cannot get lease %s/%s: %s", cfg.lease_namespace, cfg.lease_name, exc
                )
                return False
            spec = self._record(acquire_time=micro_time(now_wall), transitions=0)
            body: Obj = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {"name": cfg.lease_name, "namespace": cfg.lease_namespace},
                "spec": spec,
            }
            try:
                self._lease = await self.client.create(LEASES, cfg.lease_namespace, body)
            except ApiError as create_exc:
                logger.info("cannot create lease: %s", create_exc)
                return False
            self._observed, self._observed_at = spec, now
            return True

        old: dict[str, Any] = dict(lease.get("spec") or {})
        if old != self._observed:
            self._observed, self._observed_at = old, now
        holder = old.get("holderIdentity") or ""
        duration = float(old.get("leaseDurationSeconds") or 0)
        we_hold = holder == cfg.identity
        if holder and not we_hold and self._observed_at + duration > now:
            logger.debug("lease %s held by %s", cfg.lease_name, holder)
            return False
        if we_hold:
            spec = self._record(
                acquire_time=old.get("acquireTime") or micro_time(now_wall),
                transitions=int(old.get("leaseTransitions") or 0),
            )
        else:
            spec = self._record(
                acquire_time=micro_time(now_wall),
                transitions=int(old.get("leaseTransitions") or 0) + 1,
            )
        updated = dict(lease)
        updated["spec"] = spec
        try:
            self._lease = await self.client.update(
                LEASES, cfg.lease_namespace, cfg.lease_name, updated
            )
        except ApiError as exc:
            logger.info("cannot update lease %s: %s", cfg.lease_name, exc)
            return False
        self._observed, self._observed_at = spec, now
        return True

    async def acquire(self) -> None:
        """Block until this candidate holds the Lease (retrying every ~retry_period)."""
        cfg = self.config
        logger.info("attempting to acquire leader lease %s/%s", cfg.lease_namespace, cfg.lease_name)
        while True:
            if await self._attempt(cfg.renew_deadline):
                self._set_leader(True)
                return
            await asyncio.sleep(cfg.retry_period * (1 + random.random() * JITTER_FACTOR))

    async def _attempt(self, budget: float) -> bool:
        try:
            async with asyncio.timeout(max(0.001, budget)):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            return False
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("leader election attempt failed: %s", exc)
            return False

    async def renew_until_lost(self) -> None:
        """Renew every retry_period; return when a renewal failed for renew_deadline."""
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.retry_period)
            deadline = self._mono() + cfg.renew_deadline
            while True:
                remaining = deadline - self._mono()
                if remaining <= 0:
                    self._set_leader(False)
                    return
                if await self._attempt(remaining):
                    break
                await asyncio.sleep(min(cfg.retry_period, max(0.0, deadline - self._mono())))

    async def release(self) -> bool:
        """Give the Lease up (empty holder, 1 s duration); True if released or not held."""
        if not self._leader:
            return True
        self._set_leader(False)
        cfg = self.config
        lease = self._lease
        if lease is None:
            return False
        now = micro_time(self._clock())
        released = dict(lease)
        released["spec"] = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int((lease.get("spec") or {}).get("leaseTransitions") or 0),
        }
        try:
            self._lease = await self.client.update(
                LEASES, cfg.lease_namespace, cfg.lease_name, released
            )
        except ApiError as exc:
            logger.warning("failed to release lease %s: %s", cfg.lease_name, exc)
            return False
        logger.info("released leader lease %s/%s", cfg.lease_namespace, cfg.lease_name)
        return True

    async def run(self, lead: Callable[[], Awaitable[object]]) -> None:
        """Acquire, run ``lead()`` (a coroutine function) while leading, release on the way out.

        Renewal runs beside ``lead()``. When renewing fails for ``renew_deadline``, ``lead()``
        is cancelled (and awaited, so its clean-up completes) and :class:`LeaderElectionLost`
        raised. When ``lead()`` returns, raises or this call is cancelled, renewal stops and,
        with ``release_on_cancel``, the Lease is released so a successor takes over at once.
        The :class:`~kube_agent_sandbox.controller.runtime.manager.Manager` runs its
        leader-only work this way.

        Args:
            lead: The leader-only work.

        Raises:
            LeaderElectionLost: if renewing failed while ``lead`` was still running.
        """
        await run_elected(self, lead)


class Elector(Protocol):
    """What :func:`run_elected` drives: :class:`LeaderElector` or one on its own thread."""

    config: LeaderElectionConfig

    async def acquire(self) -> None:
        """Block until this candidate holds the Lease."""

    async def renew_until_lost(self) -> None:
        """Renew until a renewal failed for the renew deadline."""

    async def release(self) -> bool:
        """Give the Lease up."""


async def run_elected(elector: Elector, lead: Callable[[], Awaitable[object]]) -> None:
    """The body of :meth:`LeaderElector.run`, for any :class:`Elector`."""
    await elector.acquire()
    leading = asyncio.ensure_future(lead())
    renewing = asyncio.ensure_future(elector.renew_until_lost())
    try:
        done, _ = await asyncio.wait({leading, renewing}, return_when=asyncio.FIRST_COMPLETED)
        if renewing in done:
            leading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await leading
            raise LeaderElectionLost(elector.config.lease_name)
        leading.result()
    finally:
        for task in (leading, renewing):
            task.cancel()
        # the leader work finishes (its clean-up included) before the Lease is released
        await asyncio.wait({leading, renewing})
        if elector.config.release_on_cancel:
            await asyncio.shield(elector.release())
