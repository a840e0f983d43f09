"""Creating an object owned by a claim or Sandbox whose name an earlier sandbox used.

A sandbox id comes back when an ``Idempotency-Key`` is used again after its sandbox is gone
(:mod:`kube_agent_sandbox.gateway.controlplane.create`). Objects named after the id (the
``<id>-env`` Secret, the egress NetworkPolicy) may then still exist for a moment, owned by the
gone claim or Sandbox and waiting for garbage collection: they are taken over, not counted.
"""

from __future__ import annotations

from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj, Resource


def owner_uids(obj: Obj) -> set[str]:
    """The uids of ``obj``'s owner references."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(ref.get("uid")) for ref in refs if isinstance(ref, dict)}


async def create_owned(api: Client, resource: Resource, namespace: str, body: Obj) -> bool:
    """Create ``body``; one of that name with other owners is replaced by it.

    Returns:
        False if an object of that name with the same owners was there (nothing written).

    Raises:
        ApiError: the API server refused the create, read or replace.
    """
    try:
        await api.create(resource, namespace, body)
    except ApiError as exc:
        if not exc.already_exists:
            raise
    else:
        return True
    name = body["metadata"]["name"]
    try:
        existing = await api.get(resource, namespace, name)
    except ApiError as exc:
        if not exc.not_found:
            raise
        await api.create(resource, namespace, body)  # collected in the meantime
        return True
    if owner_uids(existing) == owner_uids(body):
        return False
    version = existing["metadata"]["resourceVersion"]
    replacement = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
    await api.update(resource, namespace, name, replacement)
    return True
