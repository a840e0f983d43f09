"""The in-memory queue of adoptable warm Sandboxes per pool, and the watch that feeds it
(upstream's candidate queue, extensions/controllers/queue).

It stays one module of about 400 lines: the queue and the watch handlers that feed it share
one rule (what the feeder queues as adoptable is what a pick may hand out) and the queue's
private entry and heap bookkeeping.

Claims pick warm Sandboxes from here instead of listing the pool's Sandboxes on every pass.
It sits on the hot path (hundreds of claims per second against pools of thousands), so a pick
never scans the keys nor the nodes: each pool keeps one heap per node, ordered by queue
position, and ranks the nodes by key count and head position in lazily cleaned heaps, so
every operation costs O(log n) amortized.

Upstream's pick is "NodeSpread": when any queued Sandbox is scheduled, take one from the node
with the most queued Sandboxes (ties go to the key queued earliest), else the FIFO head. Entries
are not removed when a Sandbox stops being adoptable; the consumer re-validates what it pops.

Concurrency: every operation is synchronous (no ``await`` inside), so the many reconcile
workers of one event loop never see a half-done operation and a popped key is handed out once.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from dataclasses import dataclass
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import EventHandler, Obj, controller_ref, group_of, meta

log = logging.getLogger(__name__)

_UNSCHEDULED: Final = ""
# A node's heap is rebuilt once its stale entries outnumber its live ones by this margin.
_COMPACT_SLACK: Final = 16


@dataclass(frozen=True, slots=True)
class WarmKey:
    """One queued warm Sandbox: its namespace, name and the node it was last seen on.

    Attributes:
        namespace: The Sandbox's namespace (the queue's namespace).
        name: The Sandbox's name.
        node_name: ``status.nodeName`` when queued or last updated; ``""`` when unscheduled.
    """

    namespace: str
    name: str
    node_name: str = ""


@dataclass(slots=True)
class _Entry:
    seq: int
    node: str


@dataclass(slots=True)
class _NodeBucket:
    # (seq, name) pairs; stale pairs (key gone, moved or re-queued) are dropped lazily.
    heap: list[tuple[int, str]]
    live: int = 0


class _PoolQueue:
    """One pool's keys: per-node heaps in queue order, and the nodes ranked for NodeSpread.

    ``levels[n]`` is a heap of ``(head seq, node)`` for scheduled nodes that held ``n`` keys
    when the entry was pushed; an entry is current while the node still has ``n`` keys and
    that head. Every change of a node pushes its new state, stale entries are skipped when
    they surface, and the whole ranking is rebuilt once stale entries dominate. So the pick
    (the earliest head among the nodes with the most keys) costs O(log n) amortized.
    """

    __slots__ = ("buckets", "entries", "level_entries", "levels", "max_level")

    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}
        self.buckets: dict[str, _NodeBucket] = {}
        self.levels: dict[int, list[tuple[int, str]]] = {}
        self.level_entries = 0
        self.max_level = 0

    def add(self, name: str, seq: int, node: str) -> None:
        entry = _Entry(seq=seq, node=node)
        self.entries[name] = entry
        self._enter(name, entry)

    def move(self, name: str, node: str) -> None:
        entry = self.entries[name]
        old = entry.node
        entry.node = node  # first, so the old bucket already sees this key as gone
        self._leave(old)
        self._enter(name, entry)

    def discard(self, name: str) -> bool:
        entry = self.entries.pop(name, None)
        if entry is None:
            return False
        self._leave(entry.node)
        return True

    def pick(self) -> tuple[str, str] | None:
        """The NodeSpread choice as ``(name, node)``, without removing it."""
        while self.max_level > 0:
            heap = self.levels.get(self.max_level)
            while heap:
                head_seq, node = heap[0]
                bucket = self.buckets.get(node)
                if bucket is not None and bucket.live == self.max_level:
                    seq, name = self._head(node, bucket)
                    if seq == head_seq:
                        return name, node
                heapq.heappop(heap)
                self.level_entries -= 1
            self.levels.pop(self.max_level, None)
            self.max_level -= 1
        unscheduled = self.buckets.get(_UNSCHEDULED)
        if unscheduled is None:
            return None
        return self._head(_UNSCHEDULED, unscheduled)[1], _UNSCHEDULED

    def _enter(self, name: str, entry: _Entry) -> None:
        node = entry.node
        bucket = self.buckets.get(node)
        if bucket is None:
            bucket = _NodeBucket(heap=[])
            self.buckets[node] = bucket
        heapq.heappush(bucket.heap, (entry.seq, name))
        bucket.live += 1
        if node != _UNSCHEDULED:
            self._rank(node, bucket)

    def _leave(self, node: str) -> None:
        bucket = self.buckets[node]
        bucket.live -= 1
        if bucket.live == 0:
            del self.buckets[node]
            return
        if len(bucket.heap) > 2 * bucket.live + _COMPACT_SLACK:
            entries = self.entries
            bucket.heap = sorted(
                {(seq, name) for seq, name in bucket.heap if _is_live(entries.get(name), seq, node)}
            )
        if node != _UNSCHEDULED:
            self._rank(node, bucket)

    def _rank(self, node: str, bucket: _NodeBucket) -> None:
        level = bucket.live
        heapq.heappush(self.levels.setdefault(level, []), (self._head(node, bucket)[0], node))
        self.level_entries += 1
        if level > self.max_level:
            self.max_level = level
        if self.level_entries > 4 * len(self.buckets) + _COMPACT_SLACK:
            self._rerank()

    def _rerank(self) -> None:
        levels: dict[int, list[tuple[int, str]]] = {}
        for node, bucket in self.buckets.items():
            if node != _UNSCHEDULED:
                levels.setdefault(bucket.live, []).append((self._head(node, bucket)[0], node))
        for heap in levels.values():
            heapq.heapify(heap)
        self.levels = levels
        self.level_entries = sum(len(heap) for heap in levels.values())
        self.max_level = max(levels, default=0)

    def _head(self, node: str, bucket: _NodeBucket) -> tuple[int, str]:
        heap = bucket.heap
        entries = self.entries
        while True:
            seq, name = heap[0]
            if _is_live(entries.get(name), seq, node):
                return seq, name
            heapq.heappop(heap)


def _is_live(entry: _Entry | None, seq: int, node: str) -> bool:
    return entry is not None and entry.seq == seq and entry.node == node


class WarmQueue:
    """FIFO queues of warm Sandbox keys, one per ``(namespace, pool)``, deduplicated by name.

    Queue position is a global sequence number: a new key gets the next one (the tail), an
    existing key keeps its position when re-pushed (only its node name changes), and a key
    popped and pushed back goes to the tail.
    """

    def __init__(self) -> None:
        self._queues: dict[tuple[str, str], _PoolQueue] = {}
        self._seq = itertools.count()

    # --- writes -------------------------------------------------------------------------------

    def push(self, namespace: str, pool: str, name: str, node_name: str = "") -> None:
        """Queue a Sandbox at the tail, or update the node name of an already queued one.

        Args:
            namespace: The Sandbox's (and the pool's) namespace.
            pool: The SandboxWarmPool's name.
            name: The Sandbox's name.
            node_name: Its ``status.nodeName`` (``""`` when unscheduled).
        """
        queue = self._queues.get((namespace, pool))
        if queue is None:
            queue = _PoolQueue()
            self._queues[(namespace, pool)] = queue
        entry = queue.entries.get(name)
        if entry is None:
            queue.add(name, next(self._seq), node_name)
        elif entry.node != node_name:
            queue.move(name, node_name)

    def push_back(self, namespace: str, pool: str, key: WarmKey) -> None:
        """Return a popped key to the queue (at the tail), with its possibly updated node name.

        A key re-queued meanwhile by the feeder keeps its place; only its node name changes.

        Args:
            namespace: The pool's namespace.
            pool: The SandboxWarmPool's name.
            key: The key, as popped or with ``node_name`` refreshed from the Sandbox.
        """
        self.push(namespace, pool, key.name, key.node_name)

    def remove(self, namespace: str, pool: str, name: str) -> None:
        """Forget a queued Sandbox (no-op when absent)."""
        queue = self._queues.get((namespace, pool))
        if queue is not None and queue.discard(name) and not queue.entries:
            del self._queues[(namespace, pool)]

    def drop_pool(self, namespace: str, pool: str) -> None:
        """Forget a pool's whole queue (its SandboxWarmPool was deleted)."""
        self._queues.pop((namespace, pool), None)

    def pop(self, namespace: str, pool: str) -> WarmKey | None:
        """Take one key out of the pool's queue by NodeSpread, or None when it is empty.

        NodeSpread: if any queued key has a node name, choose among the keys on the node with
        the most queued keys, ties going to the key queued earliest; if none is scheduled,
        take the FIFO head.
        """
        queue = self._queues.get((namespace, pool))
        if queue is None:
            return None
        picked = queue.pick()
        if picked is None:  # pragma: no cover - a queue with entries always has a pick
            return None
        name, node = picked
        self.remove(namespace, pool, name)
        return WarmKey(namespace, name, node)

    # --- reads --------------------------------------------------------------------------------

    def size(self, namespace: str, pool: str) -> int:
        """How many keys the pool's queue holds."""
        queue = self._queues.get((namespace, pool))
        return 0 if queue is None else len(queue.entries)

    def contains(self, namespace: str, pool: str, name: str) -> bool:
        """True when the Sandbox ``name`` is queued for the pool."""
        queue = self._queues.get((namespace, pool))
        return queue is not None and name in queue.entries

    def keys(self, namespace: str, pool: str) -> list[WarmKey]:
        """The pool's keys in queue order (a copy; for diagnostics and tests, O(n log n))."""
        queue = self._queues.get((namespace, pool))
        if queue is None:
            return []
        ordered = sorted(queue.entries.items(), key=lambda item: item[1].seq)
        return [WarmKey(namespace, name, entry.node) for name, entry in ordered]

    def pools(self) -> list[tuple[str, str]]:
        """The ``(namespace, pool)`` pairs that have a non-empty queue."""
        return list(self._queues)


# --- feeding the queue from Sandbox events ----------------------------------------------------


def _is_pool_ref(ref: Obj | None) -> bool:
    return (
        ref is not None
        and ref.get("kind") == c.KIND_SANDBOX_WARM_POOL
        and group_of(str(ref.get("apiVersion", ""))) == c.EXTENSIONS_GROUP
    )


def warm_pool_name(sandbox: Obj) -> str:
    """The SandboxWarmPool a Sandbox belongs to, by owner reference (any version).

    The controller reference wins; otherwise any SandboxWarmPool owner reference counts.

    Returns:
        The pool's name, or ``""`` when no SandboxWarmPool owns the Sandbox.
    """
    ref = controller_ref(sandbox)
    if ref is not None and _is_pool_ref(ref):
        return str(ref.get("name") or "")
    for other in meta(sandbox).get("ownerReferences") or ():
        if isinstance(other, dict) and _is_pool_ref(other):
            return str(other.get("name") or "")
    return ""


def is_adoptable(sandbox: Obj) -> bool:
    """Whether a claim may adopt the Sandbox, judged on static facts only (upstream's getCandidate).

    Adoptable: not being deleted, labelled ``warm-pool-sandbox`` and ``sandbox-template-ref-hash``
    and controlled by a SandboxWarmPool of the extensions group (any version).
    """
    m = meta(sandbox)
    if m.get("deletionTimestamp"):
        return False
    labels = m.get("labels") or {}
    if c.LABEL_WARM_POOL_SANDBOX not in labels or c.LABEL_SANDBOX_TEMPLATE_REF_HASH not in labels:
        return False
    return _is_pool_ref(controller_ref(sandbox))


def adoptable_pool(sandbox: Obj) -> str | None:
    """The pool of an adoptable Sandbox (its controller reference's name), else None."""
    if not is_adoptable(sandbox):
        return None
    ref = controller_ref(sandbox)
    name = str(ref.get("name") or "") if ref is not None else ""
    return name or None


def node_name(sandbox: Obj) -> str:
    """``status.nodeName`` of a Sandbox (``""`` when unscheduled)."""
    status = sandbox.get("status")
    return str(status.get("nodeName") or "") if isinstance(status, dict) else ""


def feed_upsert(queue: WarmQueue, old: Obj | None, new: Obj) -> bool:
    """Apply a Sandbox create (``old`` None) or update to the queue, as upstream does.

    The Sandbox is pushed (or its node name refreshed) when it became adoptable, or is
    adoptable and its pool or its node changed. Nothing is removed here: a Sandbox that stops
    being adoptable stays queued until deleted, and consumers re-validate what they pop.

    Returns:
        True when the queue was written.
    """
    if not is_adoptable(new):
        return False
    old_obj: Obj = old if old is not None else {}
    new_pool = warm_pool_name(new)
    new_node = node_name(new)
    if (
        is_adoptable(old_obj)
        and warm_pool_name(old_obj) == new_pool
        and node_name(old_obj) == new_node
    ):
        return False
    if not new_pool:
        return False
    m = meta(new)
    queue.push(str(m.get("namespace") or ""), new_pool, str(m.get("name") or ""), new_node)
    log.debug("queued warm sandbox %s/%s of pool %s", m.get("namespace"), m.get("name"), new_pool)
    return True


def feed_delete(queue: WarmQueue, sandbox: Obj) -> bool:
    """Apply a Sandbox delete: forget it in the queue of the pool that owned it.

    Returns:
        True when the Sandbox had a pool (whether or not it was queued).
    """
    pool = warm_pool_name(sandbox)
    if not pool:
        return False
    m = meta(sandbox)
    queue.remove(str(m.get("namespace") or ""), pool, str(m.get("name") or ""))
    return True


def sandbox_feeder(queue: WarmQueue) -> EventHandler:
    """Informer callbacks that keep ``queue`` in step with the Sandbox cache.

    The initial list arrives as adds, so the queue is rebuilt after a restart.
    """

    def on_add(obj: Obj) -> None:
        feed_upsert(queue, None, obj)

    def on_update(old: Obj, new: Obj) -> None:
        feed_upsert(queue, old, new)

    def on_delete(obj: Obj) -> None:
        feed_delete(queue, obj)

    return EventHandler(on_add=on_add, on_update=on_update, on_delete=on_delete)


def warm_pool_dropper(queue: WarmQueue) -> EventHandler:
    """Informer callbacks on SandboxWarmPools: a deleted pool's queue is dropped."""

    def on_delete(obj: Obj) -> None:
        m = meta(obj)
        queue.drop_pool(str(m.get("namespace") or ""), str(m.get("name") or ""))

    return EventHandler(on_delete=on_delete)
