"""AsyncClaimCalls: create, read, list, wait for and delete SandboxClaims (claiming a sandbox
from a warm pool, which returns a handle, is on the client itself).

Hand-written source: ``_sync/claims.py`` is generated from it by ``scripts/unasync_sdk.py``.
"""

from __future__ import annotations

from typing import Any

from kube_agent_sandbox.sdk import builders, readiness
from kube_agent_sandbox.sdk._async.objects import DEFAULT_READY_TIMEOUT, AsyncObjectCalls, Obj
from kube_agent_sandbox.sdk.constants import SANDBOX_CLAIMS, TRACE_CONTEXT_ANNOTATION


class AsyncClaimCalls(AsyncObjectCalls):
    """The SandboxClaim calls of :class:`~kube_agent_sandbox.sdk.AsyncSandboxClient`."""

    async def create_claim(
        self, warm_pool: str, *, namespace: str | None = None, **options: Any
    ) -> Obj:
        """Create a SandboxClaim and return it as created (no wait, not tracked)."""
        ns = self._ns(namespace)
        body = builders.claim_body(warm_pool, namespace=ns, **options)
        with self._tracer.span("create_claim", {"sandbox.warm_pool": warm_pool}):
            trace_context = self._tracer.trace_context()
            if trace_context:
                body["metadata"].setdefault("annotations", {})[TRACE_CONTEXT_ANNOTATION] = (
                    trace_context
                )
            created = await self._request("POST", SANDBOX_CLAIMS, ns, verb="create", body=body)
            self._tracer.set_attributes({"sandbox.claim.name": str(created["metadata"]["name"])})
            return created

    async def get_claim(self, name: str, *, namespace: str | None = None) -> Obj:
        """The SandboxClaim object."""
        return await self._get(SANDBOX_CLAIMS, name, namespace=self._ns(namespace))

    async def list_claims(
        self, *, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        """SandboxClaims of a namespace."""
        return await self._list(
            SANDBOX_CLAIMS, namespace=self._ns(namespace), label_selector=label_selector
        )

    async def wait_claim_ready(
        self, name: str, *, namespace: str | None = None, timeout: float = DEFAULT_READY_TIMEOUT
    ) -> Obj:
        """Watch a claim until Ready=True with a bound Sandbox (fails fast on terminal reasons)."""
        return await self._wait_ready(
            SANDBOX_CLAIMS,
            name,
            namespace=self._ns(namespace),
            timeout=timeout,
            readiness_of=readiness.claim_readiness,
        )

    async def delete_claim(
        self,
        name: str,
        *,
        namespace: str | None = None,
        wait: bool = False,
        timeout: float = 60.0,
        missing_ok: bool = False,
    ) -> None:
        """Delete a SandboxClaim (the controller removes its Sandbox)."""
        with self._tracer.span("delete_claim", {"sandbox.claim.name": name}):
            await self._delete(
                SANDBOX_CLAIMS,
                name,
                namespace=self._ns(namespace),
                missing_ok=missing_ok,
                wait=wait,
                timeout=timeout,
            )
