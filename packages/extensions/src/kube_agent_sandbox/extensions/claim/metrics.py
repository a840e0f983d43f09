"""The claim controller's Prometheus metrics: startup latencies and the creation counter
(upstream v0.5.6 internal/metrics/metrics.go).

Names, buckets, label names and help texts are upstream's, so existing dashboards and the
benchmark tooling read ours unchanged. The latency histograms are observed once per claim, at
its first Ready=True (the caller guards that with the ``claim-first-ready-at`` annotation);
this module resolves the labels and applies upstream's skip rules for missing, unparseable or
future timestamps.
"""

from __future__ import annotations

import datetime as dt
import logging
import weakref
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, meta
from kube_agent_sandbox.extensions.claim.lifecycle import parse_time_or_none

log = logging.getLogger(__name__)

CLAIM_STARTUP_LATENCY: Final = "agent_sandbox_claim_startup_latency_ms"
CLAIM_CONTROLLER_STARTUP_LATENCY: Final = "agent_sandbox_claim_controller_startup_latency_ms"
CLIENT_CLAIM_STARTUP_LATENCY: Final = "agent_sandbox_client_claim_startup_latency_ms"
SANDBOX_CREATION_LATENCY: Final = "agent_sandbox_creation_latency_ms"
CLAIM_CREATION_TOTAL: Final = "agent_sandbox_claim_creation_total"

STARTUP_BUCKETS: Final = (
    100.0,
    250.0,
    500.0,
    750.0,
    1000.0,
    1250.0,
    1500.0,
    2000.0,
    2500.0,
    5000.0,
    10000.0,
    30000.0,
    60000.0,
    120000.0,
    240000.0,
)
CREATION_BUCKETS: Final = (
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
    30000.0,
    60000.0,
    120000.0,
    240000.0,
    300000.0,
    600000.0,
)

LAUNCH_TYPE_UNKNOWN: Final = "unknown"
UNKNOWN_TEMPLATE: Final = "__unknown__"
POD_CONDITION_READY: Final = "ready"
POD_CONDITION_NOT_READY: Final = "not_ready"

_STARTUP_LABELS: Final = ("launch_type", "sandbox_template")
_CREATION_LABELS: Final = ("namespace", "launch_type", "sandbox_template")
_COUNTER_LABELS: Final = (
    "namespace",
    "sandbox_template",
    "launch_type",
    "warmpool_name",
    "pod_condition",
    "created_by",
)

_HELP_CLAIM_STARTUP: Final = (
    "End-to-end latency from SandboxClaim creation to Sandbox Ready state in milliseconds."
)
_HELP_CONTROLLER_STARTUP: Final = (
    "Latency from controller first observed SandboxClaim to Sandbox Ready state in milliseconds."
)
_HELP_CLIENT_STARTUP: Final = (
    "End-to-end latency from client request to SandboxClaim Ready state in milliseconds. "
    "Note: This metric may be affected by clock skew between the client and controller."
)
_HELP_CREATION: Final = (
    "Latency from Sandbox creation to Pod Ready state in milliseconds. For warm launches, this "
    "measures controller synchronization overhead since the Pod is pre-provisioned."
)
_HELP_COUNTER: Final = (
    "Total number of SandboxClaims created, labeled by namespace, sandbox template, launch "
    "type, warmpool name, pod condition, and created_by."
)


def launch_type_of(sandbox: Obj | None) -> str:
    """``warm`` / ``cold`` from the Sandbox's launch-type label; ``unknown`` without a Sandbox."""
    if sandbox is None:
        return LAUNCH_TYPE_UNKNOWN
    labels = meta(sandbox).get("labels") or {}
    return (
        c.LAUNCH_TYPE_WARM
        if labels.get(c.LABEL_LAUNCH_TYPE) == c.LAUNCH_TYPE_WARM
        else (c.LAUNCH_TYPE_COLD)
    )


def template_name_of(sandbox: Obj | None) -> str:
    """The Sandbox's ``sandbox-template-ref`` annotation, or ``__unknown__``."""
    if sandbox is None:
        return UNKNOWN_TEMPLATE
    annotations = meta(sandbox).get("annotations") or {}
    return str(annotations.get(c.ANNOTATION_SANDBOX_TEMPLATE_REF) or "") or UNKNOWN_TEMPLATE


def whole_millis(delta: dt.timedelta) -> int:
    """A duration in whole milliseconds, truncated toward zero like Go's ``Milliseconds()``."""
    micros = delta // dt.timedelta(microseconds=1)
    millis = abs(micros) // 1000
    return millis if micros >= 0 else -millis


@dataclass(frozen=True, slots=True)
class _Collectors:
    claim_startup: Histogram
    controller_startup: Histogram
    client_startup: Histogram
    creation: Histogram
    creation_total: Counter


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, _Collectors] = (
    weakref.WeakKeyDictionary()
)


def _register(registry: CollectorRegistry) -> _Collectors:
    existing = _BY_REGISTRY.get(registry)
    if existing is not None:
        return existing
    collectors = _Collectors(
        claim_startup=Histogram(
            CLAIM_STARTUP_LATENCY,
            _HELP_CLAIM_STARTUP,
            _STARTUP_LABELS,
            buckets=STARTUP_BUCKETS,
            registry=registry,
        ),
        controller_startup=Histogram(
            CLAIM_CONTROLLER_STARTUP_LATENCY,
            _HELP_CONTROLLER_STARTUP,
            _STARTUP_LABELS,
            buckets=STARTUP_BUCKETS,
            registry=registry,
        ),
        client_startup=Histogram(
            CLIENT_CLAIM_STARTUP_LATENCY,
            _HELP_CLIENT_STARTUP,
            _STARTUP_LABELS,
            buckets=STARTUP_BUCKETS,
            registry=registry,
        ),
        creation=Histogram(
            SANDBOX_CREATION_LATENCY,
            _HELP_CREATION,
            _CREATION_LABELS,
            buckets=CREATION_BUCKETS,
            registry=registry,
        ),
        creation_total=Counter(
            # prometheus_client appends "_total" to counter names itself.
            CLAIM_CREATION_TOTAL.removesuffix("_total"),
            _HELP_COUNTER,
            _COUNTER_LABELS,
            registry=registry,
        ),
    )
    _BY_REGISTRY[registry] = collectors
    return collectors


class ClaimMetrics:
    """The claim controller's metrics, registered once per registry.

    Constructing it again on the same registry (several managers sharing one, as in tests)
    reuses the registered collectors instead of failing on duplicate names.

    Args:
        registry: Where to register (the manager's, served at ``/metrics``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._m = _register(registry)

    def record_creation(
        self,
        *,
        namespace: str,
        sandbox_template: str,
        launch_type: str,
        warmpool_name: str,
        pod_condition: str,
        created_by: str,
    ) -> None:
        """Count one claim served: a cold create or a warm adoption.

        Args:
            namespace: The claim's namespace.
            sandbox_template: The template name (cold) or the adopted Sandbox's
                ``sandbox-template-ref`` annotation (warm; ``__unknown__`` if missing).
            launch_type: ``cold`` or ``warm``.
            warmpool_name: The claim's ``spec.warmPoolRef.name`` (cold) or the adopted
                Sandbox's pool (warm).
            pod_condition: ``ready`` or ``not_ready`` (always ``not_ready`` for cold).
            created_by: The claim's ``created-by`` label; normalized here to the allow-list.
        """
        self._m.creation_total.labels(
            namespace,
            sandbox_template,
            launch_type,
            warmpool_name,
            pod_condition,
            c.normalize_created_by(created_by),
        ).inc()

    def observe_first_ready(
        self, claim: Obj, sandbox: Obj | None = None, *, now: dt.datetime
    ) -> None:
        """Observe the latency histograms at the claim's first Ready=True.

        Each histogram is skipped on its own when its start time is unusable:

        - claim startup: annotation ``webhook-first-observed-at`` missing, not RFC 3339, or in
          the future;
        - controller startup: ``controller-first-observed-at`` missing, not RFC 3339, or in
          the future (upstream would observe a negative value; a clock step is the only cause);
        - client startup: ``client-first-requested-at`` missing, not RFC 3339, or negative
          after truncation to whole milliseconds (as upstream: -0.4 ms counts as 0);
        - Sandbox creation: no Sandbox, no creationTimestamp, Ready not True or without a
          transition time, or the transition before the creation.

        Labels: ``launch_type`` (``warm``/``cold`` from the Sandbox, ``unknown`` without one)
        and ``sandbox_template`` (the Sandbox's ``sandbox-template-ref`` or ``__unknown__``).

        Args:
            claim: The claim (its annotations are read).
            sandbox: The claim's Sandbox, if any.
            now: The current time (timezone-aware).
        """
        launch_type = launch_type_of(sandbox)
        template = template_name_of(sandbox)
        annotations: dict[str, Any] = meta(claim).get("annotations") or {}

        for annotation, histogram, name in (
            (c.ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT, self._m.claim_startup, CLAIM_STARTUP_LATENCY),
            (
                c.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT,
                self._m.controller_startup,
                CLAIM_CONTROLLER_STARTUP_LATENCY,
            ),
        ):
            start = parse_time_or_none(annotations.get(annotation))
            if start is None or now < start:
                log.debug("claim %s: no usable %s, %s skipped", _key(claim), annotation, name)
                continue
            histogram.labels(launch_type, template).observe(float(whole_millis(now - start)))

        requested = parse_time_or_none(annotations.get(c.ANNOTATION_CLIENT_FIRST_REQUESTED_AT))
        if requested is not None and (millis := whole_millis(now - requested)) >= 0:
            self._m.client_startup.labels(launch_type, template).observe(float(millis))

        creation = _creation_latency(sandbox)
        if creation is not None and sandbox is not None:
            namespace = str(meta(sandbox).get("namespace") or "")
            self._m.creation.labels(namespace, launch_type, template).observe(float(creation))


def _key(obj: Obj) -> str:
    m = meta(obj)
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


def _creation_latency(sandbox: Obj | None) -> int | None:
    """Sandbox Ready transition time minus creationTimestamp, in whole ms (None: skip)."""
    if sandbox is None:
        return None
    created = parse_time_or_none(meta(sandbox).get("creationTimestamp"))
    if created is None:
        return None
    status = sandbox.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions or ():
        if isinstance(condition, dict) and condition.get("type") == c.CONDITION_READY:
            if condition.get("status") != "True":
                return None
            ready_at = parse_time_or_none(condition.get("lastTransitionTime"))
            if ready_at is None or ready_at < created:
                return None
            return whole_millis(ready_at - created)
    return None
