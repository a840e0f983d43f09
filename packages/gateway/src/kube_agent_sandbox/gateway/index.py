"""Find a sandbox by its E2B id: claim, Sandbox and Pod from the informer caches.

The E2B sandbox id is the SandboxClaim's name. Claims live in tenant namespaces, so the
index looks names up across namespaces (an informer index on the name); callers check the
tenant. The Sandbox is the one the claim's status names, the Pod the one the Sandbox names.
Every answer comes from memory: no API call on the request path. The index also keeps the
caches of warm pools and templates a create resolves its template with.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, Reader

NAME_INDEX: Final = "gateway-name"
LOOPBACK_PER_POD: Final = "loopback"
"""``pod_address_override`` value that gives each pod its own loopback address (testing)."""


def loopback_address(pod_uid: str) -> str:
    """The pod's own loopback address ``127.x.y.z``, from a hash of its UID.

    Testing only (kwok pods run nothing): a local daemon per pod listens there, so two
    sandboxes reach two daemons although every pod's ports are mapped the same way. The UID,
    not the IP: a new pod may get a deleted pod's IP, and must not reach the old daemon.

    Raises:
        ValueError: if ``pod_uid`` is empty.
    """
    if not pod_uid:
        raise ValueError("a pod without a UID has no loopback address")
    x, y, z = hashlib.sha256(pod_uid.encode()).digest()[:3]
    return f"127.{x}.{y}.{z % 254 + 1}"


def name_index(obj: Obj) -> Iterable[str]:
    """Informer index function: the object's name."""
    name = (obj.get("metadata") or {}).get("name")
    return [name] if name else []


def condition(obj: Obj | None, ctype: str) -> Obj | None:
    """The status condition of type ``ctype``, or None."""
    if obj is None:
        return None
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == ctype:
            return cond
    return None


def condition_true(obj: Obj | None, ctype: str) -> bool:
    """Whether the condition ``ctype`` is ``True``."""
    cond = condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


@dataclass(frozen=True, slots=True)
class SandboxRecord:
    """What the caches know about one E2B sandbox.

    Attributes:
        namespace: the tenant namespace.
        claim: the SandboxClaim (its name is the sandbox id).
        sandbox: the bound Sandbox, or None before binding.
        pod: the Sandbox's Pod, or None (not created yet, or suspended).
        ready: the claim is Ready and the pod has an IP: traffic can flow.
        suspended: the Sandbox is suspended (``operatingMode: Suspended``) or going there.
    """

    namespace: str
    claim: Obj
    sandbox: Obj | None
    pod: Obj | None
    ready: bool
    suspended: bool

    @property
    def sandbox_id(self) -> str:
        """The E2B sandbox id (the claim's name)."""
        return str(self.claim["metadata"]["name"])

    @property
    def claim_uid(self) -> str:
        """The claim's UID (tokens derive from it)."""
        return str(self.claim["metadata"].get("uid", ""))

    @property
    def annotations(self) -> Mapping[str, str]:
        """The claim's annotations."""
        return self.claim["metadata"].get("annotations") or {}

    @property
    def pod_ip(self) -> str | None:
        """The pod's IP (Pod status first, else the claim's status), or None."""
        if self.pod is not None:
            ip = (self.pod.get("status") or {}).get("podIP")
            if ip:
                return str(ip)
        if self.sandbox is None or self.suspended:
            return None
        ips = ((self.claim.get("status") or {}).get("sandbox") or {}).get("podIPs") or []
        return str(ips[0]) if ips else None


class SandboxIndex:
    """Looks sandboxes up by id in the caches of claims, Sandboxes and Pods.

    Args:
        claims: cache of the gateway's SandboxClaims, with the :data:`NAME_INDEX` index.
        sandboxes: cache of Sandboxes.
        pods: cache of sandbox Pods.
        pod_address_override: testing only: every pod address becomes this host, or
            :data:`LOOPBACK_PER_POD`: each pod its own (:func:`loopback_address`).
        pod_port_map: testing only: sandbox port -> local port (with the override).
        warm_pools: cache of SandboxWarmPools (None: every lookup misses).
        templates: cache of SandboxTemplates (None: every lookup misses).
    """

    def __init__(
        self,
        claims: Reader,
        sandboxes: Reader,
        pods: Reader,
        *,
        pod_address_override: str | None = None,
        pod_port_map: Mapping[int, int] | None = None,
        warm_pools: Reader | None = None,
        templates: Reader | None = None,
    ) -> None:
        self.claims = claims
        self.sandboxes = sandboxes
        self.pods = pods
        self.warm_pools = warm_pools
        self.templates = templates
        self.pod_address_override = pod_address_override
        self.pod_port_map = dict(pod_port_map or {})
        self._changed = asyncio.Event()
        self._generation = 0

    # -- lookups ----------------------------------------------------------------------------
    def lookup(self, sandbox_id: str, *, namespace: str | None = None) -> SandboxRecord | None:
        """The sandbox with this id (in ``namespace`` only, when given), or None.

        A claim being deleted counts as gone. Two live claims of one name in different
        namespaces (possible only when created behind the gateway's back) are ambiguous
        without a namespace: None.
        """
        if not sandbox_id:
            return None
        if namespace is not None:
            claim = self.claims.get(namespace, sandbox_id)
            candidates = [claim] if claim is not None else []
        else:
            candidates = self.claims.by_index(NAME_INDEX, sandbox_id)
        live = [cl for cl in candidates if not cl["metadata"].get("deletionTimestamp")]
        if len(live) != 1:
            return None
        return self.record(live[0])

    def warm_pool(self, namespace: str, name: str) -> Obj | None:
        """The cached SandboxWarmPool, or None (not cached, being deleted, or no cache)."""
        return _live(self.warm_pools, namespace, name)

    def template(self, namespace: str, name: str) -> Obj | None:
        """The cached SandboxTemplate, or None (not cached, being deleted, or no cache)."""
        return _live(self.templates, namespace, name)

    def pod_of(self, sandbox: Obj) -> Obj | None:
        """The Sandbox's Pod from the cache (named by annotation, else as the Sandbox), or None."""
        meta = sandbox["metadata"]
        pod_name = (meta.get("annotations") or {}).get(c.ANNOTATION_POD_NAME) or meta["name"]
        pod = self.pods.get(str(meta.get("namespace", "")), pod_name)
        if pod is not None and pod["metadata"].get("deletionTimestamp"):
            return None
        return pod

    def record(self, claim: Obj) -> SandboxRecord:
        """Join a claim with its Sandbox and Pod from the caches."""
        meta = claim["metadata"]
        namespace = str(meta.get("namespace", ""))
        bound = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
        sandbox = self.sandboxes.get(namespace, bound) if bound else None
        pod = self.pod_of(sandbox) if sandbox is not None else None
        suspended = is_suspended(sandbox)
        ready = (
            sandbox is not None
            and not suspended
            and condition_true(claim, c.CONDITION_READY)
            and pod is not None
            and bool((pod.get("status") or {}).get("podIP"))
        )
        return SandboxRecord(
            namespace=namespace,
            claim=claim,
            sandbox=sandbox,
            pod=pod,
            ready=ready,
            suspended=suspended,
        )

    def records(self, namespace: str) -> list[SandboxRecord]:
        """Every live sandbox of a tenant namespace."""
        return [
            self.record(claim)
            for claim in self.claims.list(namespace)
            if not claim["metadata"].get("deletionTimestamp")
        ]

    def address(self, record: SandboxRecord, port: int) -> tuple[str, int] | None:
        """Where to reach ``port`` of the sandbox: ``(host, port)``, or None without a pod IP.

        With :attr:`pod_address_override` every pod is that host (or its own loopback
        address) and ports go through :attr:`pod_port_map` (testing: kwok pods with local
        daemons).
        """
        ip = record.pod_ip
        if ip is None:
            return None
        override = self.pod_address_override
        if override == LOOPBACK_PER_POD:
            uid = ((record.pod or {}).get("metadata") or {}).get("uid")
            if not uid:
                return None
            return loopback_address(str(uid)), self.pod_port_map.get(port, port)
        if override is not None:
            return override, self.pod_port_map.get(port, port)
        return ip, port

    # -- change notification ----------------------------------------------------------------
    def notify(self, *_objs: Any) -> None:
        """Wake everyone waiting in :meth:`wait_for` (informer event handlers call this)."""
        self._generation += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    @property
    def generation(self) -> int:
        """How many changes the caches reported so far (the console's long poll compares it)."""
        return self._generation

    async def wait_changed(self, generation: int, *, within: float) -> int:
        """Wait until a change after ``generation`` (or ``within`` seconds); the new generation."""
        changed = self._changed  # taken before the check, so no change is missed
        if self._generation == generation:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), within)
        return self._generation

    async def wait_for(
        self,
        sandbox_id: str,
        predicate: Callable[[SandboxRecord | None], bool],
        *,
        namespace: str | None = None,
        within: float,
    ) -> SandboxRecord | None:
        """Wait until ``predicate(lookup(sandbox_id))`` holds; returns that record.

        Raises:
            TimeoutError: if it does not hold within ``within`` seconds.
        """
        deadline = time.monotonic() + within
        while True:
            changed = self._changed  # taken before the check, so no change is missed
            record = self.lookup(sandbox_id, namespace=namespace)
            if predicate(record):
                return record
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"sandbox {sandbox_id} did not reach the wanted state")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(remaining, 1.0))


def _live(cache: Reader | None, namespace: str, name: str) -> Obj | None:
    if cache is None:
        return None
    obj = cache.get(namespace, name)
    if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return None
    return obj


def is_suspended(sandbox: Obj | None) -> bool:
    """Whether a Sandbox is suspended or suspending (spec says so, or Suspended=True)."""
    if sandbox is None:
        return False
    mode = (sandbox.get("spec") or {}).get("operatingMode")
    return mode == c.OPERATING_MODE_SUSPENDED or condition_true(sandbox, c.CONDITION_SUSPENDED)
