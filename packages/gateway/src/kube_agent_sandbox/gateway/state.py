"""Everything a running gateway shares between requests, started and stopped with the app.

:class:`GatewayState` owns the Kubernetes client, the informer caches (gateway SandboxClaims,
Sandboxes, sandbox Pods, API-key Secrets, SandboxWarmPools and SandboxTemplates), the
:class:`SandboxIndex` over them, the tenants, the token issuer and the idle-shutdown helpers.
The app's lifespan calls :meth:`start` and :meth:`stop`; tests may pass their own client
(e.g. ``FakeApi``).

Idle shutdown: :attr:`activity` (:class:`~kube_agent_sandbox.gateway.activity.ActivityTracker`,
the debounced heartbeat Leases) and :attr:`resumer`
(:class:`~kube_agent_sandbox.gateway.resume.Resumer`, single-flight resume) are started after
the caches synced and stopped before they stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

import httpx

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
    Client,
    EventHandler,
    Informer,
    ListWatcher,
    load_config,
)
from kube_agent_sandbox.gateway.activity import ActivityTracker
from kube_agent_sandbox.gateway.annotations import LABEL_API_KEY, LABEL_GATEWAY_SANDBOX
from kube_agent_sandbox.gateway.config import GatewayOptions
from kube_agent_sandbox.gateway.envd import ENVD_PORT, init_daemon
from kube_agent_sandbox.gateway.envvars import load_env
from kube_agent_sandbox.gateway.index import NAME_INDEX, SandboxIndex, SandboxRecord, name_index
from kube_agent_sandbox.gateway.resume import Resumer
from kube_agent_sandbox.gateway.tenants import KEY_HASH_INDEX, Tenants, key_hash_index
from kube_agent_sandbox.gateway.tokens import Tokens, load_secret

logger = logging.getLogger(__name__)

CACHE_SYNC_TIMEOUT = 120.0
HEARTBEAT_PATH = "/_gateway/heartbeat"


class NotStarted(RuntimeError, AttributeError):
    """The state is used before :meth:`GatewayState.start` (``getattr(..., None)`` sees None)."""


class GatewayClient(Client, ListWatcher, Protocol):
    """What the gateway needs of its client: writes plus list/watch (for the informers)."""


class Activity(Protocol):
    """Activity signals the data plane reports (idle shutdown renews Leases from them)."""

    def request_started(self, record: SandboxRecord) -> None:
        """A request for the sandbox arrived."""
        ...

    def stream_opened(self, record: SandboxRecord) -> None:
        """A long-lived stream to the sandbox opened."""
        ...

    def stream_closed(self, record: SandboxRecord) -> None:
        """A stream opened with :meth:`stream_opened` closed."""
        ...


class Resume(Protocol):
    """Brings a suspended sandbox back (single-flight per sandbox in the real one)."""

    async def resume(self, record: SandboxRecord) -> SandboxRecord:
        """Resume, wait until Ready, re-init the daemon; returns the fresh record."""
        ...


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
        self._own_api = api is None
        self._api: GatewayClient | None = api
        self.tokens = tokens or Tokens(load_secret(options.hmac_secret_file))
        self.informers: dict[str, Informer] = {}
        self._index: SandboxIndex | None = None
        self._tenants: Tenants | None = None
        self.activity = ActivityTracker(self)
        self.resumer = Resumer(self)
        self.creates: dict[tuple[str, str], asyncio.Future[str]] = {}
        """In-flight creates by ``(namespace, Idempotency-Key)`` -> future of the sandbox id."""
        self._helpers: list[Any] = [self.activity, self.resumer]
        self.http: httpx.AsyncClient | None = None
        """The HTTP client of the gateway's own calls to daemons (``/init``)."""
        self.data_plane: Any = None
        """The data-plane ASGI app, built by the app on first use."""
        self.started = False

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
    def heartbeat_url(self) -> str | None:
        """The URL sandboxd posts heartbeats to, when the gateway knows its own URL."""
        if not self.options.public_url:
            return None
        return self.options.public_url.rstrip("/") + HEARTBEAT_PATH

    # -- lifecycle --------------------------------------------------------------------------
    def _build_informers(self, api: GatewayClient) -> None:
        ns = self.options.namespace
        claims = Informer(
            api, SANDBOX_CLAIMS, namespace=ns, label_selector=f"{LABEL_GATEWAY_SANDBOX}=true"
        )
        claims.add_index(NAME_INDEX, name_index)
        sandboxes = Informer(api, SANDBOXES, namespace=ns)
        pods = Informer(api, PODS, namespace=ns, label_selector=c.LABEL_SANDBOX_NAME_HASH)
        secrets = Informer(api, SECRETS, namespace=ns, label_selector=f"{LABEL_API_KEY}=true")
        secrets.add_index(KEY_HASH_INDEX, key_hash_index)
        # a create resolves its template from these (no API read on the warm path)
        warm_pools = Informer(api, SANDBOX_WARM_POOLS, namespace=ns)
        templates = Informer(api, SANDBOX_TEMPLATES, namespace=ns)
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
        self._tenants = Tenants(secrets)
        index = self._index
        handler = EventHandler(
            on_add=index.notify,
            on_update=lambda _old, _new: index.notify(),
            on_delete=index.notify,
        )
        for name in ("claims", "sandboxes", "pods"):
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
        self._build_informers(self._api)
        # one client (its TLS context is built once); pods are reached directly, never by proxy
        self.http = httpx.AsyncClient(trust_env=False)
        for informer in self.informers.values():
            informer.start()
        async with asyncio.timeout(CACHE_SYNC_TIMEOUT):
            await asyncio.gather(*(i.wait_for_sync() for i in self.informers.values()))
        for helper in self._helpers:
            start = getattr(helper, "start", None)
            if start is not None:
                await start()
        self.started = True
        logger.info("gateway caches synced (namespace: %s)", self.options.namespace or "all")

    async def stop(self) -> None:
        """Stop the helpers and the caches; close the client if this state made it."""
        for helper in reversed(self._helpers):
            stop = getattr(helper, "stop", None)
            if stop is not None:
                try:
                    await stop()
                except Exception:
                    logger.exception("stopping %r failed", helper)
        if self.http is not None:
            await self.http.aclose()
            self.http = None
        for informer in self.informers.values():
            with contextlib.suppress(Exception):
                await informer.stop()
        if self._own_api and isinstance(self._api, ApiClient):
            await self._api.close()
            self._api = None
        self.started = False

    # -- shared operations ------------------------------------------------------------------
    async def init_sandbox(self, record: SandboxRecord, *, env_vars: dict[str, str] | None) -> bool:
        """``POST /init`` to the sandbox's daemon (best effort); True if it answered.

        ``env_vars`` None means "the environment kept at create" (re-init of a new pod).

        A daemon that cannot be reached (no daemon in the image, kwok pods) is logged, not
        fatal: the exec fallback serves such sandboxes.
        """
        address = self.index.address(record, ENVD_PORT)
        if address is None:
            logger.warning("sandbox %s has no pod address: /init skipped", record.sandbox_id)
            return False
        if env_vars is None:  # a new pod of an existing sandbox: the kept environment
            env_vars = await load_env(self.api, record.namespace, record.sandbox_id)
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
