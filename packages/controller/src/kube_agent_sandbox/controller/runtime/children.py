"""Create-or-fetch and delete of a controller's children, the one copy of those API patterns.

Every controller treats AlreadyExists (its cache is behind: read the live object), NotFound on
delete (already gone) and the UID precondition (never delete a successor of the same name) the
same way, and turns every other failure into a
:class:`~kube_agent_sandbox.controller.runtime.errors.ReconcileError` for its pass.
"""

from __future__ import annotations

from kube_agent_sandbox.controller.runtime.errors import wrap
from kube_agent_sandbox.controller.runtime.objects import name_of, namespace_of, uid_of
from kube_agent_sandbox.controller.runtime.types import ApiError, Client, Obj, Resource


async def create_or_fetch(
    client: Client, resource: Resource, body: Obj, *, field_manager: str, fetch_error: str
) -> tuple[Obj, bool]:
    """Create a child; on AlreadyExists (the cache is behind) read the live object instead.

    Args:
        client: The API client.
        resource: The child's kind.
        body: The object to create.
        field_manager: The field manager the create is made as.
        fetch_error: Prefix of the error when the live read fails.

    Returns:
        The created or the live object, and whether it was created.

    Raises:
        ReconcileError: the create failed otherwise, or the live read failed.
    """
    namespace, name = namespace_of(body), name_of(body)
    try:
        created = await client.create(resource, namespace, body, field_manager=field_manager)
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
        ReconcileError: the delete failed.
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
