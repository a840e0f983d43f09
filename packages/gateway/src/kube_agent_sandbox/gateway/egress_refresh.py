"""Keeps the addresses of ``allowOut`` host names current in the sandboxes' NetworkPolicies.

A NetworkPolicy matches addresses, so a host name in ``allowOut`` is enforced as the addresses
it resolved to (:mod:`.egress`). Those change (DNS round robin, CDNs, a moved service), so the
gateway's leader resolves the host names of its sandboxes again every
:data:`~.egress.DNS_REFRESH_SECONDS` and patches a policy's ``egress`` when its addresses
changed. What each policy was last given (for which rules) is remembered in memory; a new
leader starts with nothing remembered and patches each such policy once, and so does a pass
that finds other rules than it remembers (changed by ``update_network`` on another replica).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.runtime import ApiError, Client
from kube_agent_sandbox.gateway.controlplane.models import stored_egress
from kube_agent_sandbox.gateway.egress import (
    DNS_REFRESH_SECONDS,
    EgressRules,
    InvalidEgressRules,
    network_policy,
)
from kube_agent_sandbox.gateway.index import SandboxRecord
from kube_agent_sandbox.gateway.periodic import Periodic

log = logging.getLogger(__name__)

Resolver = Callable[[Sequence[str]], Awaitable[dict[str, tuple[str, ...]]]]
"""Host names to their IPv4 addresses (:func:`~.egress.resolve_domains`)."""

Key = tuple[str, str]
"""``(namespace, sandbox id)``."""


class EgressRefresher:
    """Re-resolves ``allowOut`` host names and patches the policies whose addresses changed
    (a manager Runnable; the leader's only).

    Args:
        api: the client (``patch`` on NetworkPolicies), read at each pass.
        records: the gateway's sandboxes, read at each pass.
        resolver: host names to addresses, read at each pass (tests replace it).
        gateway_namespace: where the gateway's pods run (as at create).
        interval: seconds between passes.
    """

    def __init__(
        self,
        api: Callable[[], Client],
        records: Callable[[], Iterable[SandboxRecord]],
        resolver: Callable[[], Resolver],
        *,
        gateway_namespace: Callable[[], str | None],
        interval: float = DNS_REFRESH_SECONDS,
    ) -> None:
        self._api = api
        self._records = records
        self._resolver = resolver
        self._gateway_namespace = gateway_namespace
        self._loop = Periodic("egress host name refresh", interval, self.refresh)
        self.applied: dict[Key, tuple[str, dict[str, tuple[str, ...]]]] = {}
        """The rules (JSON) and addresses each policy was last given (by a create, an update
        or a pass)."""

    async def refresh(self) -> int:
        """One pass; how many policies were patched."""
        patched = 0
        seen: set[Key] = set()
        for record in self._records():
            key = (record.namespace, record.sandbox_id)
            try:
                rules = stored_egress(record)
            except InvalidEgressRules:
                continue  # the create refused it; nothing was enforced from it
            if rules is None or not rules.restricted or not rules.domains:
                continue
            if record.sandbox is None:
                continue
            seen.add(key)
            resolved = await self._resolver()(rules.domains)
            if self.applied.get(key) == (rules.to_json(), resolved):
                continue
            policy = network_policy(
                record.sandbox,
                record.sandbox_id,
                rules,
                gateway_namespace=self._gateway_namespace(),
                resolved=resolved,
            )
            if await self._patch(record.namespace, policy):
                self.remember(record.namespace, record.sandbox_id, rules, resolved)
                patched += 1
        for gone in set(self.applied) - seen:
            del self.applied[gone]
        return patched

    async def _patch(self, namespace: str, policy: dict[str, Any]) -> bool:
        name = policy["metadata"]["name"]
        try:
            await self._api().patch(
                NETWORK_POLICIES, namespace, name, {"spec": {"egress": policy["spec"]["egress"]}}
            )
        except ApiError as exc:
            if not exc.not_found:  # not created yet (the create path makes it) or collected
                log.warning("could not update NetworkPolicy %s/%s: %s", namespace, name, exc)
            return False
        log.info("egress host names of %s/%s resolve to new addresses", namespace, name)
        return True

    def remember(
        self,
        namespace: str,
        sandbox_id: str,
        rules: EgressRules,
        resolved: dict[str, tuple[str, ...]],
    ) -> None:
        """Record what a policy was just given (by a create, an update or a pass)."""
        if rules.domains:
            self.applied[(namespace, sandbox_id)] = (rules.to_json(), resolved)
        else:
            self.applied.pop((namespace, sandbox_id), None)

    async def start(self) -> None:
        """Start the loop (once the caches synced)."""
        await self._loop.start()

    async def stop(self) -> None:
        """Stop the loop."""
        await self._loop.stop()
