"""What the steps of a SandboxClaim reconcile share: their inputs and the claim write.

The claim reconciler (reconciler.py) runs the top-level flow of upstream v0.5.6
extensions/controllers/sandboxclaim_controller.go, Reconcile; each step (active.py, adopt_step.py,
provision.py, expiry_step.py, status_step.py, annotations.py) is a function in its own module that
takes the :class:`ClaimContext` and the pass's :class:`ClaimPass`, writes through the context's
client and raises a :class:`~kube_agent_sandbox.extensions.claim.errors.ClaimError` when something
fails. The small object helpers below are the only copies the steps use.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS
from kube_agent_sandbox.controller.runtime import Client, EventRecorder, Obj, Reader, meta
from kube_agent_sandbox.controller.tracing import Tracer
from kube_agent_sandbox.extensions.claim.observed import FirstObserved
from kube_agent_sandbox.extensions.claim.overlay import WriteOverlay
from kube_agent_sandbox.extensions.claim.warmqueue import WarmQueue


class ClaimMetricsSink(Protocol):
    """The claim metrics the reconciler records (upstream v0.5.6 internal/metrics/metrics.go)."""

    def record_creation(
        self,
        *,
        namespace: str,
        sandbox_template: str,
        launch_type: str,
        warmpool_name: str,
        pod_condition: str,
        created_by: str,
    ) -> None: ...

    def observe_first_ready(self, claim: Obj, *, sandbox: Obj | None, now: dt.datetime) -> None: ...


@dataclass
class ClaimContext:
    """The client, caches and settings every step of a claim reconcile reads.

    Mutable on purpose: the reconciler exposes ``metrics`` and ``tracer`` for tests to swap.

    Attributes:
        client: Writes and authoritative reads.
        claims: SandboxClaims cache behind this controller's write overlay.
        sandboxes: Sandboxes cache behind this controller's write overlay.
        pools: Cache of SandboxWarmPools.
        templates: Cache of SandboxTemplates.
        queue: The warm queue.
        observed: First-observation times.
        metrics: Claim metrics (None records nothing).
        recorder: Event recorder (None: ``--disable-claim-events``).
        domains: Label domains ``additionalPodMetadata`` may use.
        persist: Write first-observed/trace annotations to claims.
        tracer: Tracing.
        clock: Wall clock for conditions and expiry.
        clock_ns: Wall clock in nanoseconds (annotations).
        first_ready_owed: Claims (key -> UID) whose first-ready stamp was written before
            their Ready status.
    """

    client: Client
    claims: WriteOverlay
    sandboxes: WriteOverlay
    pools: Reader
    templates: Reader
    queue: WarmQueue
    observed: FirstObserved
    metrics: ClaimMetricsSink | None
    recorder: EventRecorder | None
    domains: tuple[str, ...]
    persist: bool
    tracer: Tracer
    clock: Callable[[], dt.datetime]
    clock_ns: Callable[[], int]
    first_ready_owed: dict[tuple[str, str], str] = field(default_factory=dict)

    def event(self, claim: Obj, reason: str, action: str, note: str) -> None:
        """Record a Normal event on ``claim`` unless events are disabled."""
        if self.recorder is not None:
            self.recorder.event(claim, type_="Normal", reason=reason, action=action, note=note)


@dataclass
class ClaimPass:
    """What one reconcile knows and still has to write about its claim."""

    claim: Obj
    pending: dict[str, str] = field(default_factory=dict)
    first_ready_stamped: bool = False
    pending_network: bool = False


async def patch_claim(ctx: ClaimContext, work: ClaimPass, patch: Obj) -> Obj:
    """Merge-patch the pass's claim and keep the answer as the pass's (and overlay's) claim."""
    namespace, name = key_of(work.claim)
    updated = await ctx.client.patch(SANDBOX_CLAIMS, namespace, name, patch)
    ctx.claims.remember(updated)
    work.claim = updated
    return updated


def key_of(obj: Obj) -> tuple[str, str]:
    """The object's (namespace, name)."""
    m = meta(obj)
    return str(m.get("namespace") or ""), str(m.get("name") or "")


def annotations_of(obj: Obj) -> dict[str, Any]:
    """A copy of the object's annotations."""
    return dict(meta(obj).get("annotations") or {})


def labels_of(obj: Obj) -> dict[str, Any]:
    """A copy of the object's labels."""
    return dict(meta(obj).get("labels") or {})


def pool_name(claim: Obj) -> str:
    """The claim's ``spec.warmPoolRef.name`` ("" without one)."""
    return str(((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name") or "")


def writable(obj: Obj) -> Obj:
    """The parts of an object a metadata/spec merge patch is computed over (not status)."""
    return {k: v for k, v in obj.items() if k != "status"}
