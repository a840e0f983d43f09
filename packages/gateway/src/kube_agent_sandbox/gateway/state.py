"""Everything a running gateway shares between requests, started and stopped with the app.

:class:`GatewayState` owns the Kubernetes client, the informer caches (gateway SandboxClaims,
Sandboxes, sandbox Pods, API-key Secrets, SandboxWarmPools and SandboxTemplates), the
:class:`SandboxIndex` over them, the tenants, the token issuer and the idle-shutdown helpers.
The app's lifespan calls :meth:`start` and :meth:`stop`; tests may pass their own client
(e.g. ``FakeApi``).

The caches are the controller runtime's: a :class:`~kube_agent_sandbox.controller.runtime.Manager`
(no leader election, no probe or metrics server: the gateway serves its own ``/health``) owns
the informers, waits for their first LIST and stops them, as it does in the controller.

Idle shutdown: :attr:`activity` (:class:`~kube_agent_sandbox.gateway.activity.ActivityTracker`,
the debounced heartbeat Leases) runs as one of the manager's runnables, started after the caches
synced and stopped before they stop; :attr:`resumer`
(:class:`~kube_agent_sandbox.gateway.resume.Resumer`, single-flight resume) has nothing to run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Protocol

import httpx
from starlette.types import ASGIApp

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import PODS, SECRETS
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    CacheSyncTimeout,
    Client,
    ClusterConfig,
    EventHandler,
    Informer,
    ListWatcher,
    Manager,
    Obj,
    load_config,
)
from kube_agent_sandbox.gateway.activity import ActivityTracker
from kube_agent_sandbox.gateway.annotations import LABEL_API_KEY_TENANT, LABEL_GATEWAY_SANDBOX
from kube_agent_sandbox.gateway.config import GatewayOptions
from kube_agent_sandbox.gateway.daemon_client import ENVD_PORT, init_daemon
from kube_agent_sandbox.gateway.egress import own_namespace, resolve_domains
from kube_agent_sandbox.gateway.egress_refresh import EgressRefresher, Resolver
from kube_agent_sandbox.gateway.index import NAME_INDEX, SandboxIndex, SandboxRecord, name_index
from kube_agent_sandbox.gateway.key_migration import check_legacy_keys
from kube_agent_sandbox.gateway.metrics import GatewayMetrics
from kube_agent_sandbox.gateway.overdue_pause import OverduePauses
from kube_agent_sandbox.gateway.resume import Resumer
from kube_agent_sandbox.gateway.tenant_rbac import DEFAULT_GATEWAY_NAMESPACE
from kube_agent_sandbox.gateway.tenants import KEY_HASH_INDEX, Tenants, key_hash_index
from kube_agent_sandbox.gateway.tokens import Tokens, load_secret
from kube_agent_sandbox.gateway.tracing import tracer_for

logger = logging.getLogger(__name__)

CACHE_SYNC_TIMEOUT = 120.0
UNKNOWN_KEYS_LOGGED = 1000
"""Distinct unknown key ids logged per process (every one is counted)."""
HEARTBEAT_PATH = "/_gateway/heartbeat"


class NotStarted(RuntimeError, AttributeError):
    """The state is used before :meth:`GatewayState.start`."""


class GatewayClient(Client, ListWatcher, Protocol):
    """What the gateway needs of its client: writes plus list/watch (for the informers)."""


class GatewayState:
    """Shared state of one gateway process.

    Args:
        options: the gateway's settings.
        api: client to use (tests); default: one built from ``options.kubeconfig`` on start.
        tokens: token issuer (tests); default: from ``options.hmac_secret_file``.
    """

    def __init__(
        self,
        options: GatewayOptions,
        *,
        api: GatewayClient | None = None,
        tokens: Tokens | None = None,
    ) -> None:
        self.options = options
        self.tracer = tracer_for(enabled=options.enable_tracing)
        """Spans of creates (the no-op tracer unless ``--enable-tracing``)."""
        self._own_api = api is None
        self._api: GatewayClient | None = api
        self.tokens = tokens or Tokens(load_secret(options.hmac_secret_file))
        self.informers: dict[str, Informer] = {}
        self._index: SandboxIndex | None = None
        self._tenants: Tenants | None = None
        self.activity = ActivityTracker(self)
        self.metrics = GatewayMetrics()
        self.resumer = Resumer(self, metrics=self.metrics)
        self.overdue_pauses = OverduePauses(lambda: self.api, self._gateway_sandboxes)
        self.resolve_domains: Resolver = resolve_domains
        """Host names of ``allowOut`` to addresses (tests replace it)."""
        self.egress_refresher = EgressRefresher(
            lambda: self.api,
            self._gateway_records,
            lambda: self.resolve_domains,
            gateway_namespace=lambda: own_namespace(self.options.gateway_namespace),
        )
        self.creates: dict[tuple[str, str], tuple[str, asyncio.Future[str]]] = {}
        """In-flight creates of this process by ``(namespace, Idempotency-Key)`` -> request
        fingerprint and future of the sandbox id (across replicas the claim's name
        de-duplicates, see :mod:`kube_agent_sandbox.gateway.controlplane.create`)."""
        self.http: httpx.AsyncClient | None = None
        """The HTTP client of the gateway's own calls to daemons (``/init``)."""
        self.data_plane: ASGIApp | None = None
        """The data-plane ASGI app, built by the app on first use."""
        self.key_namespace = own_namespace(options.gateway_namespace) or DEFAULT_GATEWAY_NAMESPACE
        """Where the API-key Secrets are: the gateway's own namespace."""
        self._unknown_keys: set[str] = set()
        self.started = False
        self._manager: Manager | None = None
        self._manager_run: asyncio.Task[None] | None = None

    # -- accessors (valid after start) ------------------------------------------------------
    @property
    def api(self) -> GatewayClient:
        """The Kubernetes client."""
        if self._api is None:
            raise NotStarted("the gateway state is not started")
        return self._api

    @property
    def index(self) -> SandboxIndex:
        """The sandbox index over the caches."""
        if self._index is None:
            raise NotStarted("the gateway state is not started")
        return self._index

    @property
    def tenants(self) -> Tenants:
        """API-key authentication."""
        if self._tenants is None:
            raise NotStarted("the gateway state is not started")
        return self._tenants

    @property
    def cluster_config(self) -> ClusterConfig | None:
        """Where the apiserver is and how to authenticate; None for a client without one."""
        return self._api.config if isinstance(self._api, ApiClient) else None

    @property
    def heartbeat_url(self) -> str | None:
        """The URL sandboxd posts heartbeats to, when the gateway knows its own URL."""
        if not self.options.public_url:
            return None
        return self.options.public_url.rstrip("/") + HEARTBEAT_PATH

    # -- lifecycle --------------------------------------------------------------------------
    def _build_informers(self, manager: Manager) -> None:
        """The manager's informers (in the manager's namespace) and the index over them."""
        claims = manager.informer(SANDBOX_CLAIMS, label_selector=f"{LABEL_GATEWAY_SANDBOX}=true")
        claims.add_index(NAME_INDEX, name_index)
        sandboxes = manager.informer(SANDBOXES)
        pods = manager.informer(PODS, label_selector=c.LABEL_SANDBOX_NAME_HASH)
        # keys live in the gateway's own namespace only (its Role there; issue 21)
        secrets = manager.informer(
            SECRETS, label_selector=LABEL_API_KEY_TENANT, namespace=self.key_namespace
        )
        secrets.add_index(KEY_HASH_INDEX, key_hash_index)
        # a create resolves its template from these (no API read on the warm path)
        warm_pools = manager.informer(SANDBOX_WARM_POOLS)
        templates = manager.informer(SANDBOX_TEMPLATES)
        self.informers = {
            "claims": claims,
            "sandboxes": sandboxes,
            "pods": pods,
            "secrets": secrets,
            "warm_pools": warm_pools,
            "templates": templates,
        }
        self._index = SandboxIndex(
            claims,
            sandboxes,
            pods,
            pod_address_override=self.options.pod_address_override,
            pod_port_map=self.options.pod_port_map,
            warm_pools=warm_pools,
            templates=templates,
        )
        self._tenants = Tenants(
            secrets, only_namespace=self.options.namespace, on_unknown=self._unknown_key
        )
        index = self._index
        handler = EventHandler(
            on_add=index.notify,
            on_update=lambda _old, _new: index.notify(),
            on_delete=index.notify,
        )
        for name in ("claims", "sandboxes", "pods", "warm_pools"):
            self.informers[name].add_event_handler(handler)

    async def start(self) -> None:
        """Connect, start the caches and wait for their first LIST, start the helpers.

        Raises:
            TimeoutError: if the caches do not sync in time.
        """
        if self._api is None:
            config = load_config(self.options.kubeconfig)
            self._api = ApiClient(
                config, qps=self.options.kube_api_qps, burst=self.options.kube_api_burst
            )
        manager = Manager(
            self._api,
            metrics_bind_address="0",
            health_bind_address="0",
            cache_sync_timeout=CACHE_SYNC_TIMEOUT,
            namespace=self.options.namespace,
        )
        self._build_informers(manager)
        manager.add_runnable(self.activity, needs_leader=True)
        manager.add_runnable(self.overdue_pauses, needs_leader=True)
        manager.add_runnable(self.egress_refresher, needs_leader=True)
        # one client (its TLS context is built once); pods are reached directly, never by proxy
        self.http = httpx.AsyncClient(trust_env=False)
        self._manager = manager
        self._manager_run = asyncio.create_task(manager.run(), name="gateway-manager")
        await _until_started(manager, self._manager_run)
        self.started = True
        logger.info(
            "gateway caches synced (namespace: %s, API keys in namespace %s)",
            self.options.namespace or "all",
            self.key_namespace,
        )
        await self._report_legacy_keys()

    async def stop(self) -> None:
        """Stop the helpers and the caches; close the client if this state made it."""
        manager, run = self._manager, self._manager_run
        self._manager = self._manager_run = None
        if manager is not None and run is not None:
            manager.request_stop()
            try:
                await run
            except Exception:
                logger.exception("stopping the gateway's caches failed")
        if self.http is not None:
            await self.http.aclose()
            self.http = None
        if self._own_api and isinstance(self._api, ApiClient):
            await self._api.close()
            self._api = None
        self.started = False

    def _unknown_key(self, ident: str) -> None:
        self.metrics.unknown_api_keys_total.inc()
        if ident in self._unknown_keys or len(self._unknown_keys) >= UNKNOWN_KEYS_LOGGED:
            return
        self._unknown_keys.add(ident)
        logger.warning(
            "unknown API key %s: revoked, mistyped, or created before keys moved to namespace"
            " %s (run `agent-sandbox-gateway keys migrate --gateway-namespace %s`)",
            ident,
            self.key_namespace,
            self.key_namespace,
        )

    async def _report_legacy_keys(self) -> None:
        """Say loudly when keys of the old layout (in tenant namespaces) may be left behind."""
        try:
            found = await check_legacy_keys(
                self.api,
                keys=self.informers["secrets"].list(),
                sandbox_namespaces={
                    (claim.get("metadata") or {}).get("namespace", "")
                    for claim in self.index.claims.list()
                },
            )
        except Exception:
            logger.exception("looking for API keys of the old layout failed")
            return
        migrate = f"agent-sandbox-gateway keys migrate --gateway-namespace {self.key_namespace}"
        if found.legacy:
            self.metrics.legacy_api_keys.set(sum(found.legacy.values()))
            logger.error(
                "%d API keys are stored the old way in tenant namespaces (%s) and no longer"
                " authenticate: run `%s` (docs/guides/gateway.md, Upgrading)",
                sum(found.legacy.values()),
                ", ".join(f"{ns}: {n}" for ns, n in sorted(found.legacy.items())),
                migrate,
            )
        self.metrics.keyless_tenant_namespaces.set(len(found.keyless))
        if found.keyless:
            logger.warning(
                "namespaces %s hold this gateway's sandboxes but no API key in namespace %s"
                " grants them; keys created before keys moved there no longer authenticate:"
                " run `%s` (docs/guides/gateway.md, Upgrading)",
                ", ".join(found.keyless),
                self.key_namespace,
                migrate,
            )

    def _gateway_records(self) -> Iterator[SandboxRecord]:
        """The records of the claims this gateway created."""
        index = self.index
        for claim in index.claims.list():
            yield index.record(claim)

    def _gateway_sandboxes(self) -> Iterator[Obj]:
        """The Sandboxes of the claims this gateway created."""
        for record in self._gateway_records():
            if record.sandbox is not None:
                yield record.sandbox

    # -- shared operations ------------------------------------------------------------------
    async def init_sandbox(self, record: SandboxRecord, *, env_vars: dict[str, str]) -> bool:
        """``POST /init`` to the sandbox's daemon (best effort); True if it answered.

        A resume passes the environment kept at create (:func:`~.envvars.load_env`).

        A daemon that cannot be reached (no daemon in the image, kwok pods) is logged, not
        fatal: the exec fallback serves such sandboxes.
        """
        address = self.index.address(record, ENVD_PORT)
        if address is None:
            logger.warning("sandbox %s has no pod address: /init skipped", record.sandbox_id)
            return False
        try:
            await init_daemon(
                address,
                access_token=self.tokens.envd_access_token(record.claim_uid),
                env_vars=env_vars,
                heartbeat_url=self.heartbeat_url,
                sandbox_id=record.sandbox_id,
                budget=self.options.init_timeout_seconds,
                client=self.http,
            )
        except Exception as exc:
            logger.warning("sandbox %s: daemon /init failed: %s", record.sandbox_id, exc)
            return False
        return True


async def _until_started(manager: Manager, run: asyncio.Task[None]) -> None:
    """Wait until ``manager`` synced its caches and started its runnables.

    Raises:
        TimeoutError: the caches did not sync in time.
        RuntimeError: the manager ended before it started.
    """
    started = asyncio.ensure_future(manager.controllers_started.wait())
    try:
        await asyncio.wait({started, run}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        started.cancel()
    if manager.controllers_started.is_set():
        return
    try:
        run.result()
    except CacheSyncTimeout as err:
        raise TimeoutError(str(err)) from err
    raise RuntimeError("the gateway's caches stopped before they synced")
