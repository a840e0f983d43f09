"""Deletion of the per-claim NetworkPolicy older controllers created (as upstream's Reconcile does).

Every pass looks in the NetworkPolicy cache for ``<claim>-network-policy`` controlled by the
claim and deletes it in the background, once per policy UID, so the reconcile never waits
for it.
"""

from __future__ import annotations

import asyncio
import logging

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Client,
    Obj,
    Reader,
    is_controlled_by,
    meta,
)
from kube_agent_sandbox.extensions.claim.context import key_of
from kube_agent_sandbox.extensions.common.ownership import controlled_by_kind

log = logging.getLogger(__name__)


def legacy_network_policy_name(claim_name: str) -> str:
    """The name of the per-claim NetworkPolicy older controllers created."""
    return f"{claim_name}-network-policy"


def is_legacy_network_policy_of(policy: Obj, claim: Obj) -> bool:
    """True when ``claim`` (an extensions SandboxClaim, by UID) controls ``policy``."""
    return controlled_by_kind(policy, kind=c.KIND_SANDBOX_CLAIM) is not None and (
        is_controlled_by(policy, claim)
    )


class LegacyPolicyCleanup:
    """Background deletes of legacy claim NetworkPolicies.

    Args:
        client: Issues the DELETEs.
        policies: Cache of NetworkPolicies (None: nothing is ever deleted).
    """

    def __init__(self, client: Client, policies: Reader | None) -> None:
        self._client = client
        self._policies = policies
        # per claim key, the UID of the legacy NetworkPolicy deleted (or being deleted), so a
        # cache that still shows it does not cost another DELETE (dropped with the claim)
        self._deleted: dict[tuple[str, str], str] = {}
        self._background: set[asyncio.Task[None]] = set()

    def forget(self, key: tuple[str, str]) -> None:
        """Drop what is remembered about the claim ``key`` (it is gone)."""
        self._deleted.pop(key, None)

    async def drain(self) -> None:
        """Wait for the background DELETEs."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def cleanup(self, claim: Obj) -> None:
        """Delete ``<claim>-network-policy`` if the cache shows the claim controlling it.

        Reads only the cache; the DELETE runs in the background, once per policy UID.
        """
        if self._policies is None:
            return
        key = key_of(claim)
        policy = self._policies.get(key[0], legacy_network_policy_name(key[1]))
        if policy is None:
            self._deleted.pop(key, None)
            return
        policy_uid = str(meta(policy).get("uid") or "")
        if not policy_uid or self._deleted.get(key) == policy_uid:
            return
        if not is_legacy_network_policy_of(policy, claim):
            return
        self._deleted[key] = policy_uid
        task = asyncio.create_task(self._delete(key, policy_uid))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _delete(self, key: tuple[str, str], policy_uid: str) -> None:
        namespace, name = key
        np_name = legacy_network_policy_name(name)
        try:
            await self._client.delete(
                NETWORK_POLICIES, namespace, np_name, preconditions={"uid": policy_uid}
            )
            log.info("deleted legacy network policy %s/%s", namespace, np_name)
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return  # gone already, or replaced by another object (a later pass decides)
            self._forget_deletion(key, policy_uid)
            log.warning("legacy network policy cleanup of %s/%s: %s", namespace, np_name, exc)
        except Exception:
            self._forget_deletion(key, policy_uid)
            log.exception("legacy network policy cleanup of %s/%s failed", namespace, np_name)

    def _forget_deletion(self, key: tuple[str, str], policy_uid: str) -> None:
        """Let the next pass try again after a failed DELETE."""
        if self._deleted.get(key) == policy_uid:
            del self._deleted[key]
