"""AsyncObjectCalls: the client's connection, its default namespace, the record of what it
created (removed on exit), and the generic object calls every other part is built on: request,
get, list, patch, delete, and watch one object until a condition holds.

Waits watch the object (no polling) and read the Ready condition's status; every wait has a
typed timeout. Hand-written source: ``_sync/objects.py`` is generated from it by
``scripts/unasync_sdk.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kube_agent_sandbox.sdk import builders, readiness
from kube_agent_sandbox.sdk._async import _backend
from kube_agent_sandbox.sdk._async.api import AsyncKubeApi, WatchExpiredError
from kube_agent_sandbox.sdk.config import ClusterConfig
from kube_agent_sandbox.sdk.constants import Resource
from kube_agent_sandbox.sdk.errors import (
    NotFoundError,
    SandboxDeletedError,
    SandboxError,
    SandboxTimeoutError,
)
from kube_agent_sandbox.sdk.paths import resource_label, resource_path
from kube_agent_sandbox.sdk.tracing import SandboxTracerConfig, tracer_for

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_READY_TIMEOUT = 180.0


class AsyncObjectCalls:
    """The state and generic object calls shared by :class:`AsyncSandboxClient`'s parts.

    Not used alone: :class:`~kube_agent_sandbox.sdk.AsyncSandboxClient` documents the
    constructor's arguments.
    """

    def __init__(
        self,
        config: ClusterConfig | None = None,
        *,
        namespace: str | None = None,
        context: str | None = None,
        timeout: float = 30.0,
        tracer_config: SandboxTracerConfig | None = None,
    ) -> None:
        self._config = config
        self._tracer = tracer_for(tracer_config)
        self._context = context
        self._namespace = namespace
        self._timeout = timeout
        self._api: AsyncKubeApi | None = None
        self._created: list[tuple[Resource, str, str]] = []

    async def api(self) -> AsyncKubeApi:
        """The transport (connects on first use)."""
        if self._api is None:
            if self._config is None:
                self._config = await _backend.load_config(self._context)
            self._api = AsyncKubeApi(self._config, timeout=self._timeout)
        return self._api

    @property
    def namespace(self) -> str:
        """The default namespace (the config's unless one was given)."""
        if self._namespace:
            return self._namespace
        return self._config.namespace if self._config is not None else "default"

    def _ns(self, namespace: str | None) -> str:
        return builders.validate_namespace(namespace or self.namespace)

    async def close(self) -> None:
        """Close connections (created objects stay; see :meth:`delete_all`)."""
        if self._api is not None:
            await self._api.aclose()
            self._api = None

    async def delete_all(self) -> None:
        """Delete every object this client created and still tracks (errors are logged)."""
        while self._created:
            resource, namespace, name = self._created.pop()
            try:
                await self._delete(resource, name, namespace=namespace, missing_ok=True)
            except SandboxError as err:
                logger.warning("could not delete %s %s/%s: %s", resource.kind, namespace, name, err)

    def _track(self, resource: Resource, namespace: str, name: str) -> None:
        self._created.append((resource, namespace, name))

    def _untrack(self, resource: Resource, namespace: str, name: str) -> None:
        key = (resource, namespace, name)
        if key in self._created:
            self._created.remove(key)

    # --- generic object calls -------------------------------------------------------------

    async def _request(
        self,
        method: str,
        resource: Resource,
        namespace: str,
        name: str | None = None,
        *,
        verb: str,
        subresource: str | None = None,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        api = await self.api()
        return await api.request(
            method,
            resource_path(resource, namespace, name, subresource),
            verb=verb,
            resource=resource_label(resource, subresource),
            params=params,
            body=body,
            content_type=content_type,
        )

    async def _get(self, resource: Resource, name: str, *, namespace: str) -> Obj:
        return await self._request("GET", resource, namespace, name, verb="get")

    async def _list(
        self, resource: Resource, *, namespace: str, label_selector: str | None
    ) -> list[Obj]:
        params = {"labelSelector": label_selector} if label_selector else None
        answer = await self._request("GET", resource, namespace, verb="list", params=params)
        return list(answer.get("items") or [])

    async def _patch(self, resource: Resource, name: str, patch: Obj, *, namespace: str) -> Obj:
        return await self._request(
            "PATCH", resource, namespace, name, verb="patch", body=patch, content_type=MERGE_PATCH
        )

    async def _delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str,
        missing_ok: bool = False,
        wait: bool = False,
        timeout: float = 60.0,
    ) -> None:
        try:
            await self._request(
                "DELETE",
                resource,
                namespace,
                name,
                verb="delete",
                body={"propagationPolicy": "Background"},
            )
        except NotFoundError:
            self._untrack(resource, namespace, name)
            if not missing_ok:
                raise
            return
        self._untrack(resource, namespace, name)
        if wait:
            await self._wait_gone(resource, name, namespace=namespace, timeout=timeout)

    async def _wait(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str,
        timeout: float,
        done: Callable[[Obj], bool],
        what: str,
    ) -> Obj:
        """Watch one object until ``done(obj)`` (which may raise to fail the wait)."""
        api = await self.api()
        deadline = time.monotonic() + timeout
        path = resource_path(resource, namespace)
        label = resource_label(resource)
        obj = await self._get(resource, name, namespace=namespace)
        while True:
            if done(obj):
                return obj
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxTimeoutError(
                    f"{resource.kind} {namespace}/{name} not {what} after {timeout:g}s"
                    + _last_state(obj)
                )
            params = {
                "fieldSelector": f"metadata.name={name}",
                "resourceVersion": str((obj.get("metadata") or {}).get("resourceVersion") or "0"),
            }
            try:
                async for kind, event_obj in api.watch(
                    path, resource=label, params=params, timeout=remaining
                ):
                    if kind == "DELETED":
                        raise SandboxDeletedError(
                            f"{resource.kind} {namespace}/{name} was deleted while waiting",
                            reason="Deleted",
                        )
                    if kind == "BOOKMARK":
                        obj.setdefault("metadata", {})["resourceVersion"] = (
                            event_obj.get("metadata") or {}
                        ).get("resourceVersion")
                        continue
                    obj = event_obj
                    if done(obj):
                        return obj
            except WatchExpiredError:
                obj = await self._get(resource, name, namespace=namespace)

    async def _wait_ready(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str,
        timeout: float,
        readiness_of: Callable[[Obj], readiness.Readiness],
    ) -> Obj:
        """Watch one object until ``readiness_of(obj)`` is ready; raise its failure at once."""

        def done(obj: Obj) -> bool:
            state = readiness_of(obj)
            if state.failure is not None:
                raise state.failure
            return state.ready

        return await self._wait(
            resource, name, namespace=namespace, timeout=timeout, done=done, what="Ready"
        )

    async def _wait_gone(
        self, resource: Resource, name: str, *, namespace: str, timeout: float
    ) -> None:
        try:
            await self._wait(
                resource,
                name,
                namespace=namespace,
                timeout=timeout,
                done=lambda _obj: False,
                what="deleted",
            )
        except (SandboxDeletedError, NotFoundError):
            return


def _last_state(obj: Obj) -> str:
    cond = readiness.condition(obj, "Ready")
    if not cond:
        return " (no Ready condition yet)"
    return f" (Ready={cond.get('status')} {cond.get('reason') or ''}: {cond.get('message') or ''})"
