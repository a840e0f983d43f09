"""Waiting for objects by watching them, never by polling.

A test waits for a condition by its boolean ``status`` (``"True"``/``"False"``), not by the
condition merely being present, and for deletion by the watch's DELETED event (or the object
being gone at the start). Both list once to learn the current state and resource version,
then watch from there, re-listing if the watch expires (HTTP 410).

State inside the test's own process (an informer cache, a recording reconciler, the fake API)
has no watch: :func:`eventually` is the one helper for it, so tests do not each write their
own loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectRef:
    """Identifies one object: API version, kind, name and (for namespaced kinds) namespace."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None

    @classmethod
    def of(cls, obj: ObjectRef | Mapping[str, Any]) -> ObjectRef:
        """An ObjectRef from a manifest or object dict (or an ObjectRef, returned as is).

        Args:
            obj: An ObjectRef or a mapping with apiVersion, kind and metadata.name.

        Returns:
            The reference.

        Raises:
            ValueError: If the mapping lacks apiVersion, kind or metadata.name.
        """
        if isinstance(obj, ObjectRef):
            return obj
        metadata = obj.get("metadata") or {}
        api_version, kind, name = obj.get("apiVersion"), obj.get("kind"), metadata.get("name")
        if not api_version or not kind or not name:
            raise ValueError("an object reference needs apiVersion, kind and metadata.name")
        return cls(str(api_version), str(kind), str(name), metadata.get("namespace"))

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


class WaitTimeoutError(TimeoutError):
    """The awaited state was not reached in time; carries the last seen object."""

    def __init__(self, message: str, last_seen: Mapping[str, Any] | None) -> None:
        """Record the message and the last version of the object seen.

        Args:
            message: What was awaited.
            last_seen: Last object state seen by the watch, if any.
        """
        super().__init__(message)
        self.last_seen = last_seen


def condition_status(obj: Mapping[str, Any] | None, condition_type: str) -> str | None:
    """The ``status`` of condition ``condition_type`` in ``obj.status.conditions``.

    Args:
        obj: An object dict, or None.
        condition_type: Condition type, e.g. ``Ready``.

    Returns:
        ``"True"``, ``"False"``, ``"Unknown"``, or None when the condition is absent.
    """
    if not obj:
        return None
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == condition_type:
            status = condition.get("status")
            return None if status is None else str(status)
    return None


_DYNAMIC: weakref.WeakKeyDictionary[client.ApiClient, dynamic.DynamicClient] = (
    weakref.WeakKeyDictionary()
)


def dynamic_client(api_client: client.ApiClient) -> dynamic.DynamicClient:
    """A DynamicClient for ``api_client``, cached so discovery runs once per client.

    Args:
        api_client: Client for the cluster.

    Returns:
        The shared DynamicClient (it re-discovers by itself when a kind is unknown).
    """
    dyn = _DYNAMIC.get(api_client)
    if dyn is None:
        dyn = dynamic.DynamicClient(api_client)  # type: ignore[no-untyped-call]
        _DYNAMIC[api_client] = dyn
    return dyn


def _resource(dyn: dynamic.DynamicClient, ref: ObjectRef) -> Any:
    return dyn.resources.get(api_version=ref.api_version, kind=ref.kind)


def _watch_until(
    api_client: client.ApiClient,
    ref: ObjectRef,
    done: Callable[[dict[str, Any] | None], bool],
    *,
    timeout: float,
    what: str,
) -> dict[str, Any] | None:
    """List ``ref`` then watch it until ``done(object or None-if-deleted)`` is true."""
    dyn = dynamic_client(api_client)
    resource = _resource(dyn, ref)
    selector = f"metadata.name={ref.name}"
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while True:
        listing = resource.get(namespace=ref.namespace, field_selector=selector).to_dict()
        items = listing.get("items") or []
        last = items[0] if items else None
        if done(last):
            return last
        version = listing["metadata"]["resourceVersion"]
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeoutError(f"timed out after {timeout:.0f}s waiting for {what}", last)
            try:
                for event in dyn.watch(  # type: ignore[no-untyped-call]
                    resource,
                    namespace=ref.namespace,
                    field_selector=selector,
                    resource_version=version,
                    timeout=max(1, int(remaining)),
                ):
                    raw: dict[str, Any] = event["raw_object"]
                    kind = event["type"]
                    if kind == "ERROR":
                        raise ApiException(status=raw.get("code", 500), reason=raw.get("message"))
                    version = (raw.get("metadata") or {}).get("resourceVersion", version)
                    if kind == "BOOKMARK":
                        continue
                    last = None if kind == "DELETED" else raw
                    if done(last):
                        return last
            except ApiException as err:
                if err.status == 410:  # watch window expired: list again
                    _log.debug("watch of %s expired; re-listing", ref)
                    break
                raise


def wait_for_condition(
    api_client: client.ApiClient,
    obj: ObjectRef | Mapping[str, Any],
    condition_type: str,
    *,
    status: str = "True",
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Wait until the object's condition ``condition_type`` has status ``status``.

    Args:
        api_client: Client for the cluster.
        obj: The object (reference or manifest dict with apiVersion, kind, metadata.name).
        condition_type: Condition type, e.g. ``Ready``.
        status: Awaited status string: ``"True"``, ``"False"`` or ``"Unknown"``.
        timeout: Seconds before giving up.

    Returns:
        The object as it was when the condition matched.

    Raises:
        ValueError: If ``status`` is not a condition status.
        WaitTimeoutError: If the condition does not reach ``status`` in time (or the object
            is deleted meanwhile and never comes back).
    """
    if status not in ("True", "False", "Unknown"):
        raise ValueError(f"condition status must be True, False or Unknown, not {status!r}")
    ref = ObjectRef.of(obj)
    found = _watch_until(
        api_client,
        ref,
        lambda o: condition_status(o, condition_type) == status,
        timeout=timeout,
        what=f"{ref} condition {condition_type}={status}",
    )
    assert found is not None  # done() is only true for a present object
    return found


def wait_for_deletion(
    api_client: client.ApiClient,
    obj: ObjectRef | Mapping[str, Any],
    *,
    timeout: float = 60.0,
) -> None:
    """Wait until the object no longer exists.

    Args:
        api_client: Client for the cluster.
        obj: The object (reference or manifest dict).
        timeout: Seconds before giving up.

    Raises:
        WaitTimeoutError: If the object still exists after ``timeout`` seconds.
    """
    ref = ObjectRef.of(obj)
    _watch_until(api_client, ref, lambda o: o is None, timeout=timeout, what=f"{ref} deleted")


def wait_for_object(
    api_client: client.ApiClient,
    obj: ObjectRef | Mapping[str, Any],
    predicate: Callable[[dict[str, Any]], bool],
    *,
    timeout: float = 60.0,
    what: str = "predicate",
) -> dict[str, Any]:
    """Wait until the object exists and ``predicate(object)`` is true.

    Args:
        api_client: Client for the cluster.
        obj: The object (reference or manifest dict).
        predicate: Test on the object dict.
        timeout: Seconds before giving up.
        what: Description for the timeout message.

    Returns:
        The object as it was when the predicate held.

    Raises:
        WaitTimeoutError: If the predicate does not hold in time.
    """
    ref = ObjectRef.of(obj)
    found = _watch_until(
        api_client,
        ref,
        lambda o: o is not None and predicate(o),
        timeout=timeout,
        what=f"{ref}: {what}",
    )
    assert found is not None
    return found


async def eventually(
    check: Callable[[], object],
    *,
    within: float = 10.0,
    what: str = "condition",
    interval: float = 0.005,
) -> None:
    """Wait until ``check()`` is truthy, for state in this process (caches, fakes, recorders).

    The event loop runs between checks, so the tasks that change the state make progress.
    Objects on an API server are awaited with the watch-based waits of this module instead.

    Args:
        check: Returns a truthy value once the awaited state is reached; it is called at once,
            then every ``interval`` seconds. Its exceptions propagate (a broken check fails
            the test instead of timing out).
        within: Seconds before giving up.
        what: Description for the timeout message.
        interval: Seconds between checks.

    Raises:
        WaitTimeoutError: If ``check`` is still falsy after ``within`` seconds.
    """
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(f"timed out after {within:g}s waiting for {what}", None)
        await asyncio.sleep(interval)
