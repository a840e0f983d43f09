"""The manager: one process's client, shared informers, controllers and servers, in order.

It stays one module: :class:`Manager` is one class whose start and stop sequence reads its
private informers, controllers, runnables, servers and elector in one order, top to bottom.

Start order: probe and metrics servers and the runnables every replica runs (e.g. the
conversion webhook); then leader election, if enabled; then, as leader only, the informers
(waiting for their first LIST), the event writer, the controllers and the leader-only
runnables. Stop order is the reverse: controllers stop taking work and finish in-flight
reconciles within a grace period, informers stop, the Lease is released, servers close.
Losing the Lease stops everything and :meth:`Manager.run` raises, so the process exits and its
replacement starts clean, as controller-runtime does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from kube_agent_sandbox.controller.runtime.controller import Controller
from kube_agent_sandbox.controller.runtime.electorthread import ClientFactory, ElectorThread
from kube_agent_sandbox.controller.runtime.events import EventSink, Recorder
from kube_agent_sandbox.controller.runtime.informer import Informer, Transform
from kube_agent_sandbox.controller.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLost,
    LeaderElector,
)
from kube_agent_sandbox.controller.runtime.metrics import RuntimeMetrics
from kube_agent_sandbox.controller.runtime.servers import (
    Check,
    HttpHandler,
    HttpServer,
    health_app,
    metrics_app,
    parse_bind_address,
)
from kube_agent_sandbox.controller.runtime.types import (
    Client,
    ListWatcher,
    Reader,
    Resource,
    Runnable,
)

logger = logging.getLogger(__name__)


class ManagerClient(Client, ListWatcher, Protocol):
    """What the manager needs of its client: writes plus list/watch."""


class CacheSyncTimeout(Exception):
    """Informers did not complete their first LIST within the sync timeout."""


@dataclass
class _InformerOptions:
    label_selector: str | None = None
    transform: Transform | None = None
    namespace: str | None = None


@dataclass
class _Runnables:
    everywhere: list[Runnable] = field(default_factory=list)
    leader: list[Runnable] = field(default_factory=list)


class Manager:
    """Owns and sequences everything a controller process runs.

    Args:
        client: API client (used by informers, leader election and events).
        leader_election: Lease settings; None disables leader election.
        metrics_bind_address: ``host:port`` of ``/metrics``; ``"0"``/``""`` disables it.
        health_bind_address: ``host:port`` of ``/healthz`` and ``/readyz``; ``"0"`` disables.
        metrics: metric set whose registry is served. When omitted: the client's metric set
            (``client.metrics``, so ``rest_client_*`` is served too), else a fresh one.
            Controllers added without their own metric set record into it.
        graceful_shutdown_timeout: seconds in-flight reconciles get to finish on stop.
        cache_sync_timeout: seconds informers get for their first LIST.
        namespace: cache (and so reconcile) only this namespace, like controller-runtime's
            ``cache.Options.DefaultNamespaces``; every namespace when None. An informer asked
            for with its own ``namespace`` keeps it.
        leader_election_client: the client the Lease is acquired and renewed through (default:
            ``client``), on the manager's event loop.
        leader_election_client_factory: when given, leader election runs on a thread and event
            loop of its own with a client this factory builds there (see
            :mod:`.electorthread`): renewals then never wait behind reconcile work, which under
            load makes a leader miss its renew deadline and step down. Takes precedence over
            ``leader_election_client``.
        sync_period: seconds between resyncs of every informer (controller-runtime's
            ``SyncPeriod``: each cached object is handed to the event handlers again, so every
            primary object is reconciled again); ``<= 0`` disables resyncs.
    """

    def __init__(
        self,
        client: ManagerClient,
        *,
        leader_election: LeaderElectionConfig | None = None,
        metrics_bind_address: str = ":8080",
        health_bind_address: str = ":8081",
        metrics: RuntimeMetrics | None = None,
        graceful_shutdown_timeout: float = 30.0,
        cache_sync_timeout: float = 120.0,
        namespace: str | None = None,
        sync_period: float = 0.0,
        leader_election_client: Client | None = None,
        leader_election_client_factory: ClientFactory | None = None,
    ) -> None:
        self.client = client
        self.leader_election_client: Client = leader_election_client or client
        self.leader_election_client_factory = leader_election_client_factory
        client_metrics = getattr(client, "metrics", None)
        if metrics is None and isinstance(client_metrics, RuntimeMetrics):
            metrics = client_metrics
        self.metrics = metrics or RuntimeMetrics()
        self.leader_election = leader_election
        if leader_election is not None:
            leader_election.validate()
        self._metrics_bind = parse_bind_address(metrics_bind_address)
        self._health_bind = parse_bind_address(health_bind_address)
        self.graceful_shutdown_timeout = graceful_shutdown_timeout
        self.cache_sync_timeout = cache_sync_timeout
        self.namespace = namespace
        self.sync_period = sync_period
        self._informers: dict[Resource, Informer] = {}
        self._informer_options: dict[Resource, _InformerOptions] = {}
        self._controllers: list[Controller] = []
        self._runnables = _Runnables()
        self.events = EventSink(client)
        self.healthz_checks: dict[str, Check] = {"ping": lambda: True}
        self.metrics_extra_handlers: dict[str, HttpHandler] = {}
        """Extra GET routes served by the metrics server (controller-runtime's
        ``metricsserver.Options.ExtraHandlers``), e.g. profiling; set before :meth:`run`."""
        self.readyz_checks: dict[str, Check] = {"informers-synced": self._informers_synced}
        self._stop = asyncio.Event()
        self._started_informers: list[Informer] = []
        self._caches_started = False
        self._elector: LeaderElector | ElectorThread | None = None
        self.metrics_server: HttpServer | None = None
        self.health_server: HttpServer | None = None
        self.leading = asyncio.Event()
        """Set once this replica leads (at once when leader election is disabled)."""
        self.controllers_started = asyncio.Event()
        """Set once caches synced and controllers run."""

    @property
    def controllers(self) -> tuple[Controller, ...]:
        """The controllers added so far."""
        return tuple(self._controllers)

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry served at ``/metrics``: register custom collectors here."""
        return self.metrics.registry

    # -- building ---------------------------------------------------------------------------
    def informer(
        self,
        resource: Resource,
        *,
        label_selector: str | None = None,
        transform: Transform | None = None,
        namespace: str | None = None,
    ) -> Informer:
        """The shared informer of ``resource``, created on first use.

        Options apply on creation; asking again with different non-default options fails.
        ``namespace`` defaults to the manager's (for namespaced resources).

        Raises:
            ValueError: if the informer exists with other options.
        """
        default_namespace = self.namespace if resource.namespaced else None
        if namespace is None:
            namespace = default_namespace
        wanted = _InformerOptions(label_selector, transform, namespace)
        existing = self._informers.get(resource)
        if existing is not None:
            defaults = _InformerOptions(namespace=default_namespace)
            if wanted != defaults and wanted != self._informer_options[resource]:
                raise ValueError(
                    f"informer for {resource.plural} already exists with other options"
                )
            return existing
        informer = Informer(
            self.client,
            resource,
            namespace=namespace,
            label_selector=label_selector,
            transform=transform,
            resync_period=self.sync_period,
        )
        self._informers[resource] = informer
        self._informer_options[resource] = wanted
        if self._caches_started:
            informer.start()
            self._started_informers.append(informer)
        return informer

    def reader(self, resource: Resource) -> Reader:
        """The cache ``Reader`` of ``resource`` (its informer, created on demand)."""
        return self.informer(resource)

    def add_controller(self, controller: Controller) -> None:
        """Wire a controller's event handlers to the informers it needs; started as leader.

        Raises:
            ValueError: if a controller with that name was already added.
        """
        if any(c.name == controller.name for c in self._controllers):
            raise ValueError(f"controller {controller.name!r} already added")
        controller.use_metrics(self.metrics)
        controller.register(self.informer)
        self._controllers.append(controller)

    def add_runnable(self, runnable: Runnable, *, needs_leader: bool = False) -> None:
        """Run ``runnable`` on every replica, or only while leading when ``needs_leader``."""
        (self._runnables.leader if needs_leader else self._runnables.everywhere).append(runnable)

    def event_recorder(self, reporting_controller: str) -> Recorder:
        """An event recorder reporting as ``reporting_controller``."""
        return self.events.recorder(reporting_controller)

    def _informers_synced(self) -> bool:
        return all(inf.has_synced for inf in self._started_informers)

    # -- running ----------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask :meth:`run` to shut down gracefully."""
        self._stop.set()

    async def run(self) -> None:
        """Start everything, run until :meth:`request_stop`, then stop everything.

        With leader election, the leader-only part (:meth:`_lead`) runs inside
        :meth:`LeaderElector.run`, which acquires the Lease first, cancels the leader work when
        renewing fails and releases the Lease after it ends.

        Raises:
            LeaderElectionLost: if the Lease was lost (the process should exit non-zero).
            CacheSyncTimeout: if informers did not sync in time.
        """
        started_everywhere: list[Runnable] = []
        try:
            await self._start_servers()
            for runnable in self._runnables.everywhere:
                await runnable.start()
                started_everywhere.append(runnable)
            if self.leader_election is None:
                await self._lead()
            else:
                if self.leader_election_client_factory is not None:
                    self._elector = ElectorThread(
                        self.leader_election_client_factory,
                        self.leader_election,
                        metrics=self.metrics,
                    )
                else:
                    self._elector = LeaderElector(
                        self.leader_election_client, self.leader_election, metrics=self.metrics
                    )
                await self._run_elected(self._elector)
        finally:
            if isinstance(self._elector, ElectorThread):
                await self._elector.close()
            for runnable in reversed(started_everywhere):
                await self._stop_runnable(runnable)
            for server in (self.health_server, self.metrics_server):
                if server is not None:
                    await server.stop()
            logger.info("manager stopped")

    async def _run_elected(self, elector: LeaderElector | ElectorThread) -> None:
        """Run :meth:`_lead` as the Lease holder; a stop before leading withdraws the candidacy."""
        election = asyncio.ensure_future(elector.run(self._lead))
        stop_wait = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({election, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not election.done() and not self.leading.is_set():
                # stopped while still a candidate: nothing to hand over, stop acquiring
                election.cancel()
                await asyncio.wait({election})
                if not election.cancelled():
                    election.result()
                return
            # once leading, _lead sees the stop itself and shuts down gracefully
            await election
        except LeaderElectionLost:
            logger.error("leader election lost, stopping")
            raise
        finally:
            stop_wait.cancel()
            if not election.done():  # this call was cancelled: so is the election
                election.cancel()
                await asyncio.wait({election})

    async def _lead(self) -> None:
        """The leader-only part: caches, event writer, controllers; until stopped or cancelled.

        Cancelled (by :meth:`LeaderElector.run`) when the Lease is lost: then in-flight
        reconciles get no grace, because another replica may lead already.
        """
        self.leading.set()
        started_leader: list[Runnable] = []
        try:
            # a Lease lost while the caches sync cancels this before controllers start
            if not await self._until_stop(self._start_caches()):
                return
            self.events.start()
            for ctrl in self._controllers:
                ctrl.start()
            for runnable in self._runnables.leader:
                await runnable.start()
                started_leader.append(runnable)
            self.controllers_started.set()
            logger.info("manager started %d controllers", len(self._controllers))
            await self._stop.wait()
        finally:
            lost = self._elector is not None and not self._elector.is_leader
            await self._stop_leader_work(started_leader, lost=lost)

    async def _until_stop(self, coro: Any) -> bool:
        """Run ``coro`` unless a stop is requested first; True if it completed.

        ``coro`` never outlives this call: it is cancelled when this call is.
        """
        work = asyncio.ensure_future(coro)
        stop_wait = asyncio.create_task(self._stop.wait())
        waits: set[asyncio.Future[Any]] = {work, stop_wait}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        finally:
            stop_wait.cancel()
        if work in done:
            work.result()
            return True
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return False

    async def _start_servers(self) -> None:
        if self._metrics_bind is not None:
            host, port = self._metrics_bind.host, self._metrics_bind.port
            routes = metrics_app(self.registry) | self.metrics_extra_handlers
            self.metrics_server = HttpServer(host, port, routes)
            await self.metrics_server.start()
        if self._health_bind is not None:
            host, port = self._health_bind.host, self._health_bind.port
            self.health_server = HttpServer(
                host, port, health_app(self.healthz_checks, self.readyz_checks)
            )
            await self.health_server.start()

    async def _start_caches(self) -> None:
        informers = list(self._informers.values())
        self._started_informers = informers
        self._caches_started = True
        for inf in informers:
            inf.start()
        waits = [inf.wait_for_sync() for inf in informers]
        try:
            async with asyncio.timeout(self.cache_sync_timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            pending = [inf.resource.plural for inf in informers if not inf.has_synced]
            raise CacheSyncTimeout(f"caches not synced: {', '.join(pending)}") from None
        logger.info("caches synced: %s", ", ".join(i.resource.plural for i in informers))

    async def _stop_leader_work(self, started_leader: Sequence[Runnable], *, lost: bool) -> None:
        # a lost Lease means another replica may lead already: no grace for in-flight
        # reconciles (controller-runtime sets its graceful shutdown timeout to 0 then)
        grace = 0.0 if lost else self.graceful_shutdown_timeout
        results = await asyncio.gather(
            *(ctrl.stop(grace) for ctrl in self._controllers), return_exceptions=True
        )
        for ctrl, result in zip(self._controllers, results, strict=True):
            if isinstance(result, BaseException):
                logger.error("stopping controller %s failed: %s", ctrl.name, result)
        for runnable in reversed(started_leader):
            await self._stop_runnable(runnable)
        for inf in self._started_informers:
            await inf.stop()
        await self.events.stop()

    @staticmethod
    async def _stop_runnable(runnable: Runnable) -> None:
        try:
            await runnable.stop()
        except Exception:
            logger.exception("stopping %r failed", runnable)

    async def run_until_signal(self) -> None:
        """:meth:`run`, stopping gracefully on SIGTERM/SIGINT; a second signal exits at once."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)

        def on_signal(signum: int) -> None:
            if self._stop.is_set():
                logger.error("second signal %d, exiting immediately", signum)
                os._exit(1)
            logger.info("signal %d received, shutting down", signum)
            self.request_stop()

        for sig in signals:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            await self.run()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
