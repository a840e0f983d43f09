"""Which Sandboxes of a pool count, which are stale, and which are stuck (upstream's
filterActiveSandboxes, isSandboxStale).

Pure decisions on cached objects; the reconciler performs the writes they call for. Staleness
is memoized per distinct ``sandbox-template-hash`` label value within one pass, so a pool of
thousands of members built from a few template versions does a handful of semantic
comparisons, not thousands.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj, controller_ref, meta
from kube_agent_sandbox.extensions.common.blueprint import blueprint_matches, template_ref_hash

__all__ = [
    "StalenessCheck",
    "StuckVerdict",
    "creation_time",
    "deletion_order",
    "is_orphan",
    "is_ready",
    "is_terminating",
    "is_unschedulable",
    "made_by_pool",
    "pod_name_of",
    "stuck_verdict",
]

_UNSCHEDULABLE = "Unschedulable"
_POD_SCHEDULED = "PodScheduled"


def is_terminating(obj: Obj) -> bool:
    """True once the object has a deletionTimestamp."""
    return bool(meta(obj).get("deletionTimestamp"))


def is_orphan(obj: Obj) -> bool:
    """True when no ownerReference is a controller."""
    return controller_ref(obj) is None


def is_ready(sandbox: Obj) -> bool:
    """True when the Sandbox's ``Ready`` condition is ``True``."""
    for cond in (sandbox.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == c.CONDITION_READY:
            return cond.get("status") == "True"
    return False


def creation_time(obj: Obj) -> dt.datetime | None:
    """``metadata.creationTimestamp`` as an aware datetime (None when absent or malformed)."""
    raw = meta(obj).get("creationTimestamp")
    if not raw:
        return None
    try:
        parsed = dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def made_by_pool(sandbox: Obj) -> bool:
    """True when a warm pool created ``sandbox`` (``created-by: controller``), False for a
    Sandbox it adopted (an orphan made by someone else)."""
    labels = meta(sandbox).get("labels") or {}
    return labels.get(c.LABEL_CREATED_BY) == c.CREATED_BY_CONTROLLER


def deletion_order(sandboxes: list[Obj]) -> list[Obj]:
    """Which excess members go first: not Ready before Ready, then newest first.

    Those two keys are upstream's. ``creationTimestamp`` counts whole seconds, so members made
    within one second tie, and upstream leaves the tie to its (unstable) sort; here, and only
    there, a member the pool created goes before one it adopted, then names decide. The tie is
    the usual case of an adopted orphan: a pool whose first pass ran before its cache showed
    the orphan creates a member, adopts the orphan on a later pass and trims one of the two;
    keeping the orphan keeps what its author prepared, instead of letting the order in which
    the cache happens to list them choose.
    """
    epoch = dt.datetime.min.replace(tzinfo=dt.UTC)

    def key(sb: Obj) -> tuple[bool, float, bool, str]:
        created = creation_time(sb) or epoch
        return (
            is_ready(sb),
            -(created - epoch).total_seconds(),
            not made_by_pool(sb),
            str(meta(sb).get("name") or ""),
        )

    return sorted(sandboxes, key=key)


def is_unschedulable(pod: Obj | None) -> bool:
    """True when ``pod`` is alive and its ``PodScheduled`` condition is False/Unschedulable."""
    if pod is None or is_terminating(pod):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == _POD_SCHEDULED:
            return cond.get("status") == "False" and cond.get("reason") == _UNSCHEDULABLE
    return False


class StuckVerdict(enum.Enum):
    """What the stuck pass does with one active member."""

    KEEP = "keep"
    """Ready, or too young to judge."""
    HOLD = "hold"
    """Past the grace period but unschedulable: a replacement would be too, so keep it."""
    STUCK = "stuck"
    """Past the grace period and not progressing: delete it."""


def stuck_verdict(
    sandbox: Obj,
    *,
    pod_of: Callable[[Obj], Obj | None],
    now: dt.datetime,
    grace: float,
) -> tuple[StuckVerdict, float | None]:
    """Judge a member for the stuck pass (grace from the flag).

    Args:
        sandbox: The active member.
        pod_of: Looks up a member's pod in the cache (only called past the grace period).
        now: The current time.
        grace: The readiness grace period in seconds.

    Returns:
        The verdict and, for a young not-Ready member, the seconds until it should be judged
        again (``grace - age + 2``, before jitter).
    """
    if is_ready(sandbox):
        return StuckVerdict.KEEP, None
    created = creation_time(sandbox)
    if created is None:
        return StuckVerdict.KEEP, None
    age = (now - created).total_seconds()
    if age <= grace:
        return StuckVerdict.KEEP, grace - age + 2.0
    if is_unschedulable(pod_of(sandbox)):
        return StuckVerdict.HOLD, None
    return StuckVerdict.STUCK, None


def pod_name_of(sandbox: Obj) -> str:
    """The name of a member's pod: the ``pod-name`` annotation, else the Sandbox's name."""
    m = meta(sandbox)
    annotations = m.get("annotations") or {}
    return str(annotations.get(c.ANNOTATION_POD_NAME) or m.get("name") or "")


@dataclass
class StalenessCheck:
    """``isSandboxStale`` for one pass over one pool.

    Args:
        template: The pool's SandboxTemplate.
        template_name: Its name (the pool's ``sandboxTemplateRef.name``).
        blueprint_hash: Its blueprint hash (``""`` if it could not be computed).
    """

    template: Obj
    template_name: str
    blueprint_hash: str
    comparisons: int = 0
    """Semantic comparisons done (observability and tests)."""
    _ref_hash: str = field(init=False)
    _memo: dict[str, bool] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._ref_hash = template_ref_hash(self.template_name)

    def _compare(self, sandbox: Obj) -> bool:
        self.comparisons += 1
        return not blueprint_matches(self.template, sandbox.get("spec") or {})

    def is_stale(self, sandbox: Obj) -> bool:
        """True when ``sandbox`` no longer matches what the template makes."""
        labels = meta(sandbox).get("labels") or {}
        if labels.get(c.LABEL_SANDBOX_TEMPLATE_REF_HASH) != self._ref_hash:
            return True
        if is_orphan(sandbox):
            return self._compare(sandbox)
        label_hash = str(labels.get(c.LABEL_SANDBOX_TEMPLATE_HASH) or "")
        if label_hash and label_hash == self.blueprint_hash:
            return False
        if not self.blueprint_hash:
            return False
        if not label_hash:
            return self._compare(sandbox)
        cached = self._memo.get(label_hash)
        if cached is None:
            cached = self._memo[label_hash] = self._compare(sandbox)
        return cached
