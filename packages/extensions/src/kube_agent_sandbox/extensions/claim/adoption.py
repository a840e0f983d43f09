"""Choosing a warm Sandbox for a claim and turning it into the claim's (adoptSandboxFromCandidates).

Picking is synchronous: keys are popped from the in-memory :class:`WarmQueue` and checked
against the cache without an ``await``, so however many workers pick at once, a key is handed
to one claim only. Candidates that cannot be adopted now (no pod IPs yet, pool not resolvable)
go back to the queue at the end of the pick; stale ones under ``Recreate`` are dropped.

The adoption itself is one merge patch of the Sandbox, locked on the resourceVersion it was
computed from (:func:`adoption_target` builds the desired object), so two controllers, or a
claim racing the pool's own update, can never both win it.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, is_condition_true, meta
from kube_agent_sandbox.extensions.claim.fromsnapshot import kept_state_annotations
from kube_agent_sandbox.extensions.claim.sandboxbuild import (
    desired_pod_metadata,
    merge_claim_metadata,
    set_claim_labels,
    template_name_of,
)
from kube_agent_sandbox.extensions.claim.warmqueue import (
    WarmKey,
    WarmQueue,
    adoptable_pool,
    node_name,
)
from kube_agent_sandbox.extensions.common.blueprint import (
    RECREATE,
    blueprint_hash,
    blueprint_matches,
    template_ref_hash,
    update_strategy,
)
from kube_agent_sandbox.extensions.common.ownership import controller_ref_to

POOL_LABELS = (
    c.LABEL_WARM_POOL_SANDBOX,
    c.LABEL_SANDBOX_POD_TEMPLATE_HASH,
    c.LABEL_SANDBOX_TEMPLATE_HASH,
)
"""Labels that make a Sandbox a pool member; adoption removes them."""

PENDING_IP_GRACE = 2.0
"""Seconds a young claim waits for warm candidates to report pod IPs (upstream's
warmCandidatesPendingError)."""

PENDING_IP_REQUEUE = 0.5
"""Longest wait between looks at pending warm candidates."""


def is_ready(sandbox: Obj) -> bool:
    """Ready=True on the Sandbox."""
    return is_condition_true((sandbox.get("status") or {}).get("conditions"), c.CONDITION_READY)


def has_pod_ips(sandbox: Obj) -> bool:
    """The Sandbox reports at least one pod IP."""
    return bool((sandbox.get("status") or {}).get("podIPs"))


@dataclass
class Pick:
    """The outcome of one pick.

    Attributes:
        sandbox: The chosen Sandbox as cached (None: nothing adoptable now).
        key: Its queue key (to push back if the adoption cannot proceed).
        pending_network: Candidates were skipped only because they have no pod IPs yet.
    """

    sandbox: Obj | None = None
    key: WarmKey | None = None
    pending_network: int = 0
    deferred: list[WarmKey] = field(default_factory=list)


class _Freshness:
    """Resolves once per pick whether candidates must match the template (``Recreate``)."""

    def __init__(
        self,
        namespace: str,
        pool_name: str,
        *,
        get_pool: Callable[[str, str], Obj | None],
        get_template: Callable[[str, str], Obj | None],
    ) -> None:
        self._resolved = False
        self._error = False
        self._template: Obj | None = None
        self._hash = ""
        self._args = (namespace, pool_name, get_pool, get_template)

    def _resolve(self) -> None:
        self._resolved = True
        namespace, pool_name, get_pool, get_template = self._args
        pool = get_pool(namespace, pool_name)
        if pool is None:
            self._error = True
            return
        if update_strategy(pool) != RECREATE:
            return
        template = get_template(namespace, template_name_of(pool))
        if template is None:
            self._error = True
            return
        self._template = template
        self._hash = blueprint_hash(template)

    def check(self, sandbox: Obj) -> bool | None:
        """True: fresh (or no check needed); False: stale; None: cannot tell now."""
        if not self._resolved:
            self._resolve()
        if self._error:
            return None
        if self._template is None:
            return True
        labels = meta(sandbox).get("labels") or {}
        if self._hash and labels.get(c.LABEL_SANDBOX_TEMPLATE_HASH) == self._hash:
            return True
        return blueprint_matches(self._template, sandbox.get("spec") or {})


def pick_candidate(
    queue: WarmQueue,
    namespace: str,
    pool_name: str,
    *,
    get_sandbox: Callable[[str, str], Obj | None],
    get_pool: Callable[[str, str], Obj | None],
    get_template: Callable[[str, str], Obj | None],
) -> Pick:
    """Choose a warm Sandbox of ``pool_name`` for a claim (``getCandidate``).

    Ready candidates with pod IPs are taken at once; otherwise the first not-Ready one with
    pod IPs is the fallback. Candidates without pod IPs, or whose freshness cannot be
    resolved, go back to the queue; stale ones (``Recreate``) and ones that are gone or no
    longer adoptable are dropped. No ``await`` happens here.

    Returns:
        The pick; its ``deferred`` keys are already back in the queue.
    """
    freshness = _Freshness(namespace, pool_name, get_pool=get_pool, get_template=get_template)
    result = Pick()
    fallback: tuple[WarmKey, Obj] | None = None
    deferred: list[WarmKey] = []
    while True:
        key = queue.pop(namespace, pool_name)
        if key is None:
            break
        sandbox = get_sandbox(namespace, key.name)
        if sandbox is None or adoptable_pool(sandbox) != pool_name:
            continue  # gone, adopted meanwhile, or moved: drop the key
        fresh = freshness.check(sandbox)
        refreshed = WarmKey(namespace, key.name, node_name(sandbox) or key.node_name)
        if fresh is False:
            continue  # stale under Recreate: the pool replaces it
        if not has_pod_ips(sandbox):
            deferred.append(refreshed)
            result.pending_network += 1
            continue
        if fresh is None:
            deferred.append(refreshed)
            continue
        if is_ready(sandbox):
            result.sandbox, result.key = sandbox, refreshed
            break
        if fallback is None:
            fallback = (refreshed, sandbox)
        else:
            deferred.append(refreshed)
    if result.sandbox is None and fallback is not None:
        result.key, result.sandbox = fallback
    elif fallback is not None:
        deferred.append(fallback[0])
    for key in deferred:
        queue.push_back(namespace, pool_name, key)
    result.deferred = deferred
    if result.sandbox is not None:
        result.pending_network = 0
    return result


def adoption_target(sandbox: Obj, claim: Obj, template: Obj | None) -> Obj:
    """The Sandbox as the claim's (``completeAdoption``), computed from the cached copy.

    Pool labels go, ``launch-type`` becomes ``warm``, the claim becomes the only owner (and
    controller), ``pod-name`` names the Sandbox's own pod, the claim's trace context and
    labels are copied, so are the keep-state annotations (the claim's, else the template's),
    and the pod template metadata becomes what the claim's template and
    ``additionalPodMetadata`` ask for. Without the template the claim's metadata is merged
    into the existing pod metadata instead (minus pool labels and a ``safe-to-evict: "true"``).

    Raises:
        ReconcilerError: ``additionalPodMetadata`` would override a key.
    """
    target = copy.deepcopy(sandbox)
    target.pop("status", None)
    m = target.setdefault("metadata", {})
    name = str(m.get("name") or "")
    labels: dict[str, Any] = dict(m.get("labels") or {})
    for key in POOL_LABELS:
        labels.pop(key, None)
    labels[c.LABEL_LAUNCH_TYPE] = c.LAUNCH_TYPE_WARM
    existing_hash = labels.get(c.LABEL_SANDBOX_TEMPLATE_REF_HASH)
    set_claim_labels(labels, claim, template_name=None)
    if not existing_hash:
        template_name = str(
            (meta(template).get("name") if template is not None else None)
            or (m.get("annotations") or {}).get(c.ANNOTATION_SANDBOX_TEMPLATE_REF)
            or ""
        )
        if template_name:
            labels[c.LABEL_SANDBOX_TEMPLATE_REF_HASH] = template_ref_hash(template_name)
    m["labels"] = labels
    m["ownerReferences"] = [controller_ref_to(claim, kind=c.KIND_SANDBOX_CLAIM)]
    annotations: dict[str, Any] = dict(m.get("annotations") or {})
    annotations[c.ANNOTATION_POD_NAME] = name
    trace = (meta(claim).get("annotations") or {}).get(c.ANNOTATION_TRACE_CONTEXT)
    if trace:
        annotations[c.ANNOTATION_TRACE_CONTEXT] = trace
    annotations.update(kept_state_annotations(claim, template))
    m["annotations"] = annotations

    pod_template = target.setdefault("spec", {}).setdefault("podTemplate", {})
    if template is not None:
        pod_meta = desired_pod_metadata(claim, template)
    else:
        current = pod_template.get("metadata") or {}
        pod_labels = dict(current.get("labels") or {})
        for key in POOL_LABELS:
            pod_labels.pop(key, None)
        set_claim_labels(pod_labels, claim, template_name=None)
        pod_annotations = dict(current.get("annotations") or {})
        if pod_annotations.get(c.ANNOTATION_SAFE_TO_EVICT) == "true":
            del pod_annotations[c.ANNOTATION_SAFE_TO_EVICT]
        pod_meta = merge_claim_metadata(
            {"labels": pod_labels, "annotations": pod_annotations}, claim
        )
    if pod_meta:
        pod_template["metadata"] = pod_meta
    else:
        pod_template.pop("metadata", None)
    return target


def claim_age(claim: Obj, now: dt.datetime) -> float | None:
    """Seconds since the claim was created (None when it has no creationTimestamp)."""
    created = meta(claim).get("creationTimestamp")
    if not created:
        return None
    try:
        moment = dt.datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (now - moment).total_seconds()
