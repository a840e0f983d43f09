"""Builders and waits shared by the extensions profile's tests (templates, pools, claims).

The extension tests all need the same three objects (a SandboxTemplate, a SandboxWarmPool on
it, SandboxClaims on the pool) and the same questions (which Sandboxes are a pool's members,
when is a claim Ready with a given reason). Keeping them here lets each test state only what
it checks. Every label, annotation and reason is written literally from the spec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube

Obj = dict[str, Any]

SANDBOX_API = "agents.x-k8s.io/v1beta1"
EXT_API = "extensions.agents.x-k8s.io/v1beta1"
EXT_ALPHA_API = "extensions.agents.x-k8s.io/v1alpha1"

WARM_POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox"
TEMPLATE_REF_HASH_LABEL = "agents.x-k8s.io/sandbox-template-ref-hash"
LAUNCH_TYPE_LABEL = "agents.x-k8s.io/launch-type"
CREATED_BY_LABEL = "agents.x-k8s.io/created-by"
POD_TEMPLATE_HASH_LABEL = "agents.x-k8s.io/sandbox-pod-template-hash"
TEMPLATE_HASH_LABEL = "agents.x-k8s.io/sandbox-template-hash"
CLAIM_UID_LABEL = "agents.x-k8s.io/claim-uid"
NAME_HASH_LABEL = "agents.x-k8s.io/sandbox-name-hash"
TEMPLATE_REF_ANNOTATION = "agents.x-k8s.io/sandbox-template-ref"
POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name"
SANDBOX_NAME_ANNOTATION = "agents.x-k8s.io/sandbox-name"
FIRST_OBSERVED_ANNOTATION = "agents.x-k8s.io/controller-first-observed-at"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"


def owner(kind: str, obj: Mapping[str, Any], api_version: str = EXT_API) -> Obj:
    """The controller ownerReference (``controller: true``) to ``obj``."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def create_template(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    image: str,
    labels: Mapping[str, str] | None = None,
    container_extra: Mapping[str, Any] | None = None,
    **spec: Any,
) -> Obj:
    """Create a SandboxTemplate whose pod has one container ``main`` of ``image``."""
    main = m.container(image=image, **dict(container_extra or {}))
    template = m.pod_template(containers=[main], labels=labels)
    body = m.extension_object("SandboxTemplate", name, podTemplate=template, **spec)
    return kube.create(body, namespace=namespace)


def create_pool(
    kube: Kube,
    namespace: str,
    name: str,
    template: str,
    *,
    replicas: int | None = 1,
    strategy: str | None = None,
) -> Obj:
    """Create a SandboxWarmPool on ``template`` (``replicas=None`` leaves the field out)."""
    spec: Obj = {"sandboxTemplateRef": {"name": template}}
    if replicas is not None:
        spec["replicas"] = replicas
    if strategy is not None:
        spec["updateStrategy"] = {"type": strategy}
    return kube.create(m.extension_object("SandboxWarmPool", name, **spec), namespace=namespace)


def create_claim(
    kube: Kube,
    namespace: str,
    name: str,
    pool: str,
    *,
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> Obj:
    """Create a SandboxClaim on ``pool``; ``spec`` fields are given verbatim."""
    body = m.extension_object("SandboxClaim", name, warmPoolRef={"name": pool}, **spec)
    if labels:
        body["metadata"]["labels"] = dict(labels)
    return kube.create(body, namespace=namespace)


def is_ready(obj: Mapping[str, Any] | None) -> bool:
    """Whether the object's Ready condition is True."""
    return m.has_condition(obj, "Ready", "True")


def deleting(obj: Mapping[str, Any]) -> bool:
    """Whether the object has a deletionTimestamp."""
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def members(kube: Kube, namespace: str, pool: str) -> list[Obj]:
    """The pool's live members: Sandboxes labelled ``warm-pool-sandbox=NameHash(pool)``."""
    selector = f"{WARM_POOL_LABEL}={m.name_hash(pool)}"
    found = kube.list(SANDBOX_API, "Sandbox", namespace, label_selector=selector)
    return [sb for sb in found if not deleting(sb)]


def wait_members(
    kube: Kube,
    namespace: str,
    pool: str,
    count: int,
    *,
    ready: bool = True,
    check: Callable[[Obj], bool] = lambda _: True,
    timeout: float | None = None,
) -> list[Obj]:
    """Wait until the pool has exactly ``count`` live members, all passing ``check``.

    Args:
        kube: API client.
        namespace: Namespace.
        pool: Pool name.
        count: Members wanted.
        ready: Also require every member to be Ready.
        check: Extra test each member must pass.
        timeout: Seconds (default: the client's).

    Returns:
        The members.
    """
    last: list[list[Obj]] = [[]]

    def probe() -> tuple[list[Obj]] | None:
        found = members(kube, namespace, pool)
        last[0] = found
        if len(found) != count or not all(check(sb) for sb in found):
            return None
        if ready and not all(is_ready(sb) for sb in found):
            return None
        return (found,)

    (result,) = kube.wait_until(
        probe,
        timeout=timeout,
        what=f"{count} {'Ready ' if ready else ''}members of pool {pool}",
        describe=lambda: [
            {"name": sb["metadata"]["name"], "conditions": m.conditions(sb)} for sb in last[0]
        ],
    )
    return result


def wait_claim(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    status: str,
    reason: str | None = None,
    timeout: float | None = None,
) -> Obj:
    """Wait until the claim's Ready condition has ``status`` (and ``reason`` when given)."""
    found = kube.wait_for(
        EXT_API,
        "SandboxClaim",
        name,
        namespace,
        lambda obj: m.has_condition(obj, "Ready", status, reason),
        timeout=timeout,
        what=f"claim {name} Ready={status} {reason or ''}",
    )
    assert found is not None
    return found


def get_sandbox(kube: Kube, namespace: str, name: str) -> Obj:
    """Read a Sandbox (v1beta1)."""
    return kube.get(SANDBOX_API, "Sandbox", name, namespace)


def pod_spec(sandbox: Mapping[str, Any]) -> Obj:
    """``spec.podTemplate.spec`` of a Sandbox or SandboxTemplate."""
    spec: Obj = sandbox["spec"]["podTemplate"]["spec"]
    return spec


def pod_metadata(sandbox: Mapping[str, Any]) -> Obj:
    """``spec.podTemplate.metadata`` of a Sandbox or SandboxTemplate (empty when absent)."""
    meta: Obj = sandbox["spec"]["podTemplate"].get("metadata") or {}
    return meta


def image_of(sandbox: Mapping[str, Any]) -> str:
    """Image of the first container of a Sandbox's pod template."""
    return str(pod_spec(sandbox)["containers"][0]["image"])


def system_keys(values: Mapping[str, str]) -> set[str]:
    """The keys under the system-reserved ``agents.x-k8s.io/`` prefix.

    See docs/concepts/compatibility.md.
    """
    return {k for k in values if k.startswith("agents.x-k8s.io/")}


def event_summaries(kube: Kube, obj: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(type, reason, action, note)`` of the events regarding ``obj``, oldest first."""
    return [
        (e.get("type", ""), e.get("reason", ""), e.get("action", ""), e.get("note", ""))
        for e in kube.events_for(obj)
    ]


def wait_event(
    kube: Kube,
    obj: Mapping[str, Any],
    reason: str,
    *,
    note: str | None = None,
    timeout: float | None = None,
) -> Obj:
    """Wait for an ``events.k8s.io`` Event with ``reason`` (and ``note``, when given)
    regarding ``obj``; return it.

    Controllers write Events from a queue after the change they report, so a test waits for
    the very Event it checks instead of reading the list once.
    """

    def probe() -> Obj | None:
        for event in kube.events_for(obj):
            if event.get("reason") == reason and note in (None, event.get("note")):
                return event
        return None

    wanted = reason if note is None else f"{reason} ({note!r})"
    found: Obj = kube.wait_until(
        probe,
        timeout=timeout,
        what=f"a {wanted} event for {obj['kind']} {obj['metadata']['name']}",
        describe=lambda: event_summaries(kube, obj),
    )
    return found


def sandboxes_controlled_by(kube: Kube, namespace: str, uid: str) -> list[Obj]:
    """Live Sandboxes whose controller reference points at ``uid``."""
    return [
        sb
        for sb in kube.list(SANDBOX_API, "Sandbox", namespace)
        if not deleting(sb) and (m.controller_ref(sb) or {}).get("uid") == uid
    ]


def names(objs: Sequence[Mapping[str, Any]]) -> set[str]:
    """The names of some objects."""
    return {o["metadata"]["name"] for o in objs}


def selector_of(pool: str) -> str:
    """``status.selector`` of a pool."""
    return f"agents.x-k8s.io/warm-pool-sandbox={m.name_hash(pool)}"


def pool_status(kube: Kube, namespace: str, pool: str) -> Obj:
    """The pool's status (empty when absent)."""
    status: Obj = kube.get(EXT_API, "SandboxWarmPool", pool, namespace).get("status") or {}
    return status


def wait_status(kube: Kube, namespace: str, pool: str, **want: object) -> Obj:
    """Wait until the pool status has the given values (0 also matches an absent count)."""

    def matches(obj: Obj | None) -> bool:
        status = (obj or {}).get("status") or {}
        for key, value in want.items():
            got = status.get(key)
            if got != value and not (value == 0 and got is None):
                return False
        return True

    found = kube.wait_for(
        EXT_API, "SandboxWarmPool", pool, namespace, matches, what=f"pool status {want}"
    )
    assert found is not None
    status: Obj = found["status"]
    return status
