"""What the console shows of one tenant namespace, built from the gateway's informer caches.

One row per sandbox: a gateway sandbox (its SandboxClaim, and the Sandbox and Pod bound to it),
a warm pool's member waiting for a claim, or a Sandbox made without the gateway (kubectl, the
SDK). Beside the rows, the namespace's warm pools. Everything comes from memory: the console's
poll never lists the cluster.

Each row says which actions it allows: ``actions`` maps an action to None (allowed) or the
reason it is not, which the page shows next to the disabled button.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.gateway.controlplane.models import parse_time, rfc3339, template_id
from kube_agent_sandbox.gateway.index import SandboxIndex, condition, condition_true, is_suspended

KIND_GATEWAY: Final = "gateway"
"""A sandbox created through the gateway (the row's id is its E2B id, the claim's name)."""
KIND_POOL_MEMBER: Final = "pool-member"
"""A warm pool's Sandbox no claim has adopted yet (the pool owns it: no actions)."""
KIND_SANDBOX: Final = "sandbox"
"""A Sandbox made without the gateway (the row's id is its name)."""

ACTIONS: Final = ("suspend", "resume", "snapshot", "delete")
NOT_GATEWAY_SNAPSHOT: Final = (
    "Not created through the gateway: snapshot it with the SDK or `agent-sandbox snapshot create`."
)
POOL_OWNED: Final = "A warm pool member: the pool manages it until a claim adopts it."
NOT_GATEWAY_DELETE: Final = "Not created through the gateway: delete it with kubectl or the SDK."
DELETING: Final = "Being deleted."

LastSeen = Callable[[str, str], datetime | None]
"""``(namespace, Sandbox name)`` -> the last activity this gateway saw, or None."""


def _meta(obj: Obj | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


def _pool_owner(sandbox: Obj) -> str | None:
    for ref in _meta(sandbox).get("ownerReferences") or ():
        if ref.get("kind") == "SandboxWarmPool":
            return str(ref.get("name") or "")
    return None


def _pool_template(pool: Obj | None) -> str:
    spec = (pool or {}).get("spec") or {}
    return str((spec.get("sandboxTemplateRef") or {}).get("name", ""))


def _state(sandbox: Obj | None, *, deleting: bool, ready: bool) -> str:
    if deleting:
        return "Deleting"
    if sandbox is None:
        return "Pending"
    if is_suspended(sandbox):
        return "Suspended" if condition_true(sandbox, c.CONDITION_SUSPENDED) else "Suspending"
    return "Running" if ready else "Starting"


def _reason(*objs: Obj | None) -> str:
    """The first not-True Ready condition's reason and message (why a row is not Running)."""
    for obj in objs:
        cond = condition(obj, c.CONDITION_READY)
        if cond is not None and cond.get("status") != "True":
            text = ": ".join(str(p) for p in (cond.get("reason"), cond.get("message")) if p)
            if text:
                return text
    return ""


def _active_at(sandbox: Obj | None, created: str, last_seen: LastSeen) -> str:
    """When the sandbox was last active: seen traffic, else its Ready transition, else creation."""
    moments = [parse_time(created)]
    if sandbox is not None:
        meta = _meta(sandbox)
        moments.append(last_seen(str(meta.get("namespace", "")), str(meta.get("name", ""))))
        ready = condition(sandbox, c.CONDITION_READY)
        if ready is not None and ready.get("status") == "True":
            moments.append(parse_time(ready.get("lastTransitionTime")))
    known = [m for m in moments if m is not None]
    return rfc3339(max(known)) if known else ""


def _actions(
    state: str, *, suspend_resume: bool, delete: str | None, snapshot: str | None = None
) -> dict[str, str | None]:
    """Why each action is refused (None: allowed); a snapshot needs a running container."""
    if state == "Deleting":
        return dict.fromkeys(ACTIONS, DELETING)
    running = state in ("Running", "Starting")
    suspended = state in ("Suspended", "Suspending")
    return {
        "suspend": None if suspend_resume and running else "Not running.",
        "resume": None if suspend_resume and suspended else "Not suspended.",
        "snapshot": snapshot or (None if state == "Running" else "Not running."),
        "delete": delete,
    }


def sandbox_rows(index: SandboxIndex, namespace: str, last_seen: LastSeen) -> list[dict[str, Any]]:
    """The namespace's sandboxes, newest first."""
    rows: list[dict[str, Any]] = []
    bound: set[str] = set()
    for claim in index.claims.list(namespace):
        record = index.record(claim)
        sandbox = record.sandbox
        if sandbox is not None:
            bound.add(str(_meta(sandbox)["name"]))
        deleting = bool(_meta(claim).get("deletionTimestamp"))
        state = _state(sandbox, deleting=deleting, ready=record.ready)
        created = str(_meta(claim).get("creationTimestamp") or "")
        rows.append(
            {
                "id": record.sandbox_id,
                "kind": KIND_GATEWAY,
                "claim": record.sandbox_id,
                "sandbox": _meta(sandbox).get("name"),
                "pod": _meta(record.pod).get("name"),
                "pool": ((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name"),
                "template": template_id(record),
                "state": state,
                "reason": "" if state == "Running" else _reason(claim, sandbox),
                "created": created,
                "activeAt": _active_at(sandbox, created, last_seen),
                "actions": _actions(state, suspend_resume=sandbox is not None, delete=None),
            }
        )
    for sandbox in index.sandboxes.list(namespace):
        meta = _meta(sandbox)
        name = str(meta.get("name", ""))
        if name in bound:
            continue
        pool = _pool_owner(sandbox)
        pod = index.pod_of(sandbox)
        state = _state(
            sandbox,
            deleting=bool(meta.get("deletionTimestamp")),
            ready=condition_true(sandbox, c.CONDITION_READY),
        )
        created = str(meta.get("creationTimestamp") or "")
        actions: dict[str, str | None]
        template = ""
        if pool is not None:
            template = _pool_template(index.warm_pool(namespace, pool))
            actions = dict.fromkeys(ACTIONS, POOL_OWNED)
        else:
            actions = _actions(
                state,
                suspend_resume=True,
                delete=NOT_GATEWAY_DELETE,
                snapshot=NOT_GATEWAY_SNAPSHOT,
            )
        rows.append(
            {
                "id": name,
                "kind": KIND_SANDBOX if pool is None else KIND_POOL_MEMBER,
                "claim": None,
                "sandbox": name,
                "pod": _meta(pod).get("name"),
                "pool": pool,
                "template": template,
                "state": state,
                "reason": "" if state == "Running" else _reason(sandbox),
                "created": created,
                "activeAt": _active_at(sandbox, created, last_seen),
                "actions": actions,
            }
        )
    rows.sort(key=lambda r: (r["created"], r["id"]), reverse=True)
    return rows


def pool_rows(index: SandboxIndex, namespace: str) -> list[dict[str, Any]]:
    """The namespace's warm pools, by name."""
    if index.warm_pools is None:
        return []
    rows: list[dict[str, Any]] = []
    for pool in index.warm_pools.list(namespace):
        spec = pool.get("spec") or {}
        status = pool.get("status") or {}
        wanted = int(spec.get("replicas") or 0)
        ready = int(status.get("readyReplicas") or 0)
        rows.append(
            {
                "name": str(_meta(pool).get("name", "")),
                "template": _pool_template(pool),
                "replicas": wanted,
                "ready": ready,
                "state": "Ready" if ready >= wanted else "Filling",
                "created": str(_meta(pool).get("creationTimestamp") or ""),
            }
        )
    rows.sort(key=lambda r: r["name"])
    return rows


def snapshot(index: SandboxIndex, namespace: str, last_seen: LastSeen) -> dict[str, Any]:
    """Everything the page shows of ``namespace`` (the body of ``GET /console/api/state``)."""
    return {
        "namespace": namespace,
        "sandboxes": sandbox_rows(index, namespace, last_seen),
        "pools": pool_rows(index, namespace),
    }
