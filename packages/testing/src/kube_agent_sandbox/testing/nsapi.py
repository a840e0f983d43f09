"""One namespace-bound API helper for the async integration tests.

Integration tests of several packages drive the real kube-apiserver through the controller
runtime's :class:`ApiClient`, always inside the test's own namespace, and wait for the
controllers by polling with a bound. This module holds that helper once, so each test module
only adds its kind-specific builders and waits (by subclassing :class:`NamespaceApi`).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ApiError,
    Obj,
    Resource,
    load_kubeconfig,
)

_log = logging.getLogger(__name__)

T = TypeVar("T")

EVENTS = Resource(group="events.k8s.io", version="v1", plural="events", kind="Event")
"""The ``events.k8s.io/v1`` Events the controllers record."""


@dataclass
class NamespaceApi:
    """An API client bound to one namespace, with bounded polling.

    Subclasses (plain or ``@dataclass``) may add fields and override the class attributes.

    Attributes:
        client: The client every request goes through.
        namespace: The namespace of every request.
        poll: Seconds between two probes of :meth:`until`.
        wait: Seconds :meth:`until` polls at the most (a generous bound for a loaded machine,
            never asserted on).
    """

    client: ApiClient
    namespace: str

    poll: ClassVar[float] = 0.1
    wait: ClassVar[float] = 90.0

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, kubeconfig: str | os.PathLike[str], namespace: str, **fields: Any
    ) -> AsyncIterator[Self]:
        """An instance on a new client from ``kubeconfig``, closed on exit.

        Args:
            kubeconfig: Path of the kubeconfig file (e.g. the ``cluster`` fixture's).
            namespace: The namespace of every request.
            **fields: The further fields of a subclass.

        Yields:
            The instance.
        """
        async with ApiClient(load_kubeconfig(os.fspath(kubeconfig))) as client:
            yield cls(client, namespace, **fields)

    async def create(self, resource: Resource, body: Obj) -> Obj:
        """Create an object; ``apiVersion`` and ``kind`` default to the resource's.

        Args:
            resource: What to create.
            body: The object (``metadata`` and ``spec``; a given ``apiVersion``/``kind`` wins).

        Returns:
            The created object as the server returned it.
        """
        body = {"apiVersion": resource.api_version, "kind": resource.kind, **body}
        return await self.client.create(resource, self.namespace, body)

    async def get(self, resource: Resource, name: str) -> Obj | None:
        """The named object, or None when the server answers 404 (any other error raises)."""
        try:
            return await self.client.get(resource, self.namespace, name)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def list(
        self, resource: Resource, *, label_selector: str | None = None
    ) -> builtins.list[Obj]:
        """The items of the namespace's objects of ``resource`` (optionally label-selected)."""
        listed = await self.client.list(resource, self.namespace, label_selector=label_selector)
        return builtins.list(listed.get("items") or [])

    async def patch(self, resource: Resource, name: str, patch: Obj) -> Obj:
        """Merge-patch the named object and return it."""
        return await self.client.patch(resource, self.namespace, name, patch)

    async def delete(self, resource: Resource, name: str) -> bool:
        """Delete the named object; False when it was already gone (404), else True."""
        try:
            await self.client.delete(resource, self.namespace, name)
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        return True

    async def until(self, probe: Callable[[], Awaitable[T | None]], what: str) -> T:
        """Poll ``probe`` until it returns something truthy (bounded; never a timing check).

        Args:
            probe: Called every :attr:`poll` seconds; its first truthy result is returned.
            what: What is waited for, for the error message.

        Returns:
            The first truthy result of ``probe``.

        Raises:
            AssertionError: when ``probe`` gave nothing truthy within :attr:`wait` seconds;
                the message names ``what`` and the last value seen.
        """
        last: T | None = None
        for _ in range(max(1, int(self.wait / self.poll))):
            last = await probe()
            if last:
                return last
            await asyncio.sleep(self.poll)
        _log.info("gave up waiting for %s after %.1f s", what, self.wait)
        raise AssertionError(f"gave up waiting for {what}; last seen: {last!r}")

    async def until_gone(self, resource: Resource, name: str) -> None:
        """Wait until the named object no longer exists."""

        async def probe() -> bool:
            return await self.get(resource, name) is None

        await self.until(probe, f"{resource.plural}/{name} to be deleted")

    async def events_regarding(self, kind: str, name: str) -> builtins.list[Obj]:
        """The namespace's ``events.k8s.io`` Events whose ``regarding`` is ``kind``/``name``."""
        return [
            e
            for e in await self.list(EVENTS)
            if (e.get("regarding") or {}).get("name") == name
            and (e.get("regarding") or {}).get("kind") == kind
        ]
