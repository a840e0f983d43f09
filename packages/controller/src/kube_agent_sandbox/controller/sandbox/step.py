"""What the steps of a Sandbox reconcile share: their inputs and the create and delete calls.

Each step (PVCs, Pod, Service, expiry clean-up) is a function in its own module that reads
children from the caches in :class:`StepContext`, writes through its client and raises a
:class:`~kube_agent_sandbox.controller.sandbox.errors.ChildError` when something fails. The
create-or-fetch and delete calls below are the only copies of those API patterns, so every
step treats AlreadyExists, NotFound and the UID precondition the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime.objects import name_of, namespace_of
from kube_agent_sandbox.controller.runtime.types import ApiError, Client, Obj, Reader, Resource
from kube_agent_sandbox.controller.sandbox.errors import wrap
from kube_agent_sandbox.controller.tracing import Tracer


@dataclass(frozen=True, slots=True)
class StepContext:
    """The client, caches and settings every step of a reconcile reads.

    Attributes:
        client: Writes (and live reads on AlreadyExists) against the API server.
        pods: Cache of Pods (with the name-hash index).
        services: Cache of Services.
        pvcs: Cache of PersistentVolumeClaims.
        tracer: Receives the steps' spans and events.
        cluster_domain: DNS domain of the cluster, for ``status.serviceFQDN``.
    """

    client: Client
    pods: Reader
    services: Reader
    pvcs: Reader
    tracer: Tracer
    cluster_domain: str


def meta(obj: Obj) -> dict[str, Any]:
    """The object's metadata, created empty when missing (for in-place edits)."""
    metadata: dict[str, Any] = obj.setdefault("metadata", {})
    return metadata


def uid_of(obj: Obj) -> str | None:
    """The object's UID, None when it has none (not yet created)."""
    uid = obj.get("metadata", {}).get("uid")
    return str(uid) if uid else None


def resource_version_of(obj: Obj) -> str | None:
    """The object's resourceVersion, None when it has none."""
    rv = obj.get("metadata", {}).get("resourceVersion")
    return str(rv) if rv else None


def is_terminating(obj: Obj) -> bool:
    """Whether the object has a deletionTimestamp."""
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


async def create_or_fetch(
    client: Client, resource: Resource, body: Obj, *, fetch_error: str
) -> tuple[Obj, bool]:
    """Create a child; on AlreadyExists (the cache is behind) read the live object instead.

    Args:
        client: The API client.
        resource: The child's kind.
        body: The object to create (with field owner ``sandbox-controller``).
        fetch_error: Prefix of the error when the live read fails.

    Returns:
        The created or the live object, and whether it was created.

    Raises:
        ChildError: the create failed otherwise, or the live read failed.
    """
    namespace, name = namespace_of(body), name_of(body)
    try:
        created = await client.create(
            resource, namespace, body, field_manager=c.FIELD_OWNER_SANDBOX_CONTROLLER
        )
    except ApiError as exc:
        if not exc.already_exists:
            raise wrap(exc) from exc
    except Exception as exc:
        raise wrap(exc) from exc
    else:
        return created, True
    try:
        return await client.get(resource, namespace, name), False
    except Exception as exc:
        raise wrap(exc, fetch_error) from exc


async def delete_child(client: Client, resource: Resource, obj: Obj, *, error: str) -> bool:
    """Delete an object with its UID as precondition; NotFound means it is already gone.

    Args:
        client: The API client.
        resource: The object's kind.
        obj: The object as read (its UID guards against deleting a successor).
        error: Prefix of the error when the delete fails.

    Returns:
        True when deleted now, False when it was already gone.

    Raises:
        ChildError: the delete failed.
    """
    uid = uid_of(obj)
    try:
        await client.delete(
            resource,
            namespace_of(obj),
            name_of(obj),
            preconditions={"uid": uid} if uid else None,
        )
    except ApiError as exc:
        if exc.not_found:
            return False
        raise wrap(exc, error) from exc
    except Exception as exc:
        raise wrap(exc, error) from exc
    return True
