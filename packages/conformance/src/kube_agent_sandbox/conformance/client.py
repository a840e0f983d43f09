"""A small synchronous Kubernetes API client for the conformance tests.

It stays one module: :class:`Kube` is one class whose verbs and waits share one API client
and its private discovery cache, and the conformance tests import it from one place.

The tests need raw REST semantics (merge patches of the main resource and of the status
subresource, server-side Table printing, response warnings, exact error bodies) on plain dict
objects, across any served version of the Agent Sandbox kinds. The ``kubernetes`` package is used
only for what it does well: loading a kubeconfig (certificates, tokens, exec plugins) and
sending authenticated requests. Waits poll briefly: simple, and correct against any apiserver.
"""

from __future__ import annotations

import builtins
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from kube_agent_sandbox.conformance.resources import KNOWN_RESOURCES, Resource

_log = logging.getLogger(__name__)

Obj = dict[str, Any]
T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io"
DEFAULT_TIMEOUT = 60.0
POLL_INTERVAL = 0.2


class ApiError(Exception):
    """A non-2xx answer of the API server, with its decoded ``Status`` body."""

    def __init__(self, status: int, body: Any, *, method: str, path: str) -> None:
        """Keep the answer.

        Args:
            status: HTTP status code.
            body: Decoded JSON body (a ``Status`` object), or the raw text.
            method: Request method.
            path: Request path.
        """
        self.status = status
        self.body = body
        message = body.get("message", "") if isinstance(body, dict) else str(body)
        self.message: str = message
        self.reason: str = body.get("reason", "") if isinstance(body, dict) else ""
        super().__init__(f"{method} {path}: {status} {self.reason}: {message}")


@dataclass
class Response:
    """A decoded API answer: status, headers (lower-cased names) and JSON body."""

    status: int
    headers: dict[str, str]
    body: Any
    warnings: list[str] = field(default_factory=list)


def load_api_client(kubeconfig: str | Path | None = None) -> Any:
    """An authenticated ``kubernetes`` ApiClient.

    Args:
        kubeconfig: Path of a kubeconfig; ``None`` uses ``$KUBECONFIG``/``~/.kube/config``, or
            the in-cluster service account when there is none.

    Returns:
        The client.
    """
    if kubeconfig is None:
        try:
            return k8s_config.new_client_from_config()  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException:
            configuration = k8s_client.Configuration()
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            return k8s_client.ApiClient(configuration)
    return k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )


def ref(obj: Mapping[str, Any]) -> tuple[str, str, str, str | None]:
    """``(apiVersion, kind, name, namespace)`` of an object."""
    meta = obj.get("metadata") or {}
    return obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")


def _without_managed_fields(obj: Obj | None) -> Obj | None:
    """A copy of ``obj`` without ``metadata.managedFields`` (noise in failure messages)."""
    if obj is None:
        return None
    metadata = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    return {**obj, "metadata": metadata}


class Kube:
    """Plain-dict access to the Kubernetes API: CRUD, merge patches, tables, events, waits."""

    def __init__(self, api: Any, *, default_timeout: float = DEFAULT_TIMEOUT) -> None:
        """Wrap an authenticated client.

        Args:
            api: The ``kubernetes`` ApiClient (see :func:`load_api_client`).
            default_timeout: Seconds a wait lasts when the caller gives none.
        """
        self._api = api
        self.default_timeout = default_timeout
        self._discovered: dict[tuple[str, str], Resource] = {}

    # -- plumbing -------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Iterable[tuple[str, str]] = (),
        content_type: str = "application/json",
        accept: str = "application/json",
        expect_error: bool = False,
    ) -> Response:
        """Send one request and decode the answer.

        Args:
            method: HTTP method.
            path: Path below the server URL (``/api/v1/...``).
            body: JSON-serialisable body.
            query: Query parameters.
            content_type: Content-Type of the body.
            accept: Accept header.
            expect_error: Return error answers instead of raising.

        Returns:
            The decoded response.

        Raises:
            ApiError: On a non-2xx answer (unless ``expect_error``).
        """
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        _method, url, headers, _body, _post = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        raw = self._api.call_api(method, url, header_params=headers, body=body)
        data = raw.read()
        try:
            decoded: Any = json.loads(data) if data else None
        except ValueError:
            decoded = data.decode(errors="replace") if isinstance(data, bytes) else data
        response_headers = {k.lower(): v for k, v in raw.headers.items()}
        warnings = [w.strip() for w in raw.headers.get_all("Warning") or []]
        if raw.status >= 300 and not expect_error:
            raise ApiError(raw.status, decoded, method=method, path=path)
        return Response(raw.status, response_headers, decoded, warnings)

    def resource(self, api_version: str, kind: str) -> Resource:
        """The REST resource of a kind (known table first, then API discovery).

        Args:
            api_version: ``group/version`` or ``v1``.
            kind: Kind name.

        Returns:
            The resource.

        Raises:
            LookupError: If the API server serves no such kind.
        """
        key = (api_version, kind)
        found = KNOWN_RESOURCES.get(key) or self._discovered.get(key)
        if found is not None:
            return found
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        for item in self.request("GET", prefix).body.get("resources", []):
            if item.get("kind") == kind and "/" not in item["name"]:
                found = Resource(api_version, kind, item["name"], bool(item.get("namespaced")))
                self._discovered[key] = found
                return found
        raise LookupError(f"{api_version} {kind} is not served")

    def _path(
        self,
        api_version: str,
        kind: str,
        name: str | None,
        namespace: str | None,
        subresource: str | None = None,
    ) -> str:
        path = self.resource(api_version, kind).path(namespace, name)
        return f"{path}/{subresource}" if subresource else path

    # -- CRUD -----------------------------------------------------------------------------

    def create(self, obj: Mapping[str, Any], *, namespace: str | None = None) -> Obj:
        """Create an object (its ``metadata.namespace`` or ``namespace``).

        Args:
            obj: The manifest.
            namespace: Namespace when the manifest names none.

        Returns:
            The created object as the server returned it.
        """
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or namespace
        path = self._path(obj["apiVersion"], obj["kind"], None, ns)
        created: Obj = self.request("POST", path, body=dict(obj)).body
        return created

    def get(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Obj:
        """Read one object.

        Raises:
            ApiError: If it does not exist (404) or cannot be read.
        """
        found: Obj = self.request(
            "GET", self._path(api_version, kind, name, namespace, subresource)
        ).body
        return found

    def get_or_none(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """Read one object; ``None`` when it does not exist."""
        try:
            return self.get(api_version, kind, name, namespace)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """List objects (in a namespace, or cluster-wide for cluster-scoped kinds).

        Returns:
            The items (each with ``apiVersion`` and ``kind`` filled in).
        """
        query = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        body = self.request("GET", self._path(api_version, kind, None, namespace), query=query).body
        items: list[Obj] = body.get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> Obj:
        """Apply an RFC 7386 JSON merge patch (``subresource="status"`` for the status).

        Returns:
            The patched object.
        """
        path = self._path(api_version, kind, name, namespace, subresource)
        patched: Obj = self.request("PATCH", path, body=dict(patch), content_type=MERGE_PATCH).body
        return patched

    def patch_status(
        self, api_version: str, kind: str, name: str, namespace: str | None, status: Any
    ) -> Obj:
        """Merge-patch the status subresource with ``{"status": status}``."""
        return self.patch(
            api_version, kind, name, namespace, {"status": status}, subresource="status"
        )

    def replace(self, obj: Mapping[str, Any]) -> Obj:
        """PUT a whole object (resourceVersion-locked when it carries one)."""
        api_version, kind, name, namespace = ref(obj)
        path = self._path(api_version, kind, name, namespace)
        replaced: Obj = self.request("PUT", path, body=dict(obj)).body
        return replaced

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
        grace_period_seconds: int | None = None,
        missing_ok: bool = True,
    ) -> None:
        """Delete an object.

        Args:
            api_version: ``group/version``.
            kind: Kind.
            name: Name.
            namespace: Namespace.
            propagation: ``Background``, ``Foreground`` or ``Orphan``.
            grace_period_seconds: Grace period (pods).
            missing_ok: Treat 404 as success.
        """
        body: dict[str, Any] = {"propagationPolicy": propagation}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        response = self.request(
            "DELETE",
            self._path(api_version, kind, name, namespace),
            body=body,
            expect_error=True,
        )
        if response.status == 404 and missing_ok:
            return
        if response.status >= 300:
            raise ApiError(response.status, response.body, method="DELETE", path=name)

    def table(
        self, api_version: str, kind: str, namespace: str | None, name: str | None = None
    ) -> Obj:
        """Server-side printing: the ``meta.k8s.io/v1`` Table of a collection or one object."""
        path = self._path(api_version, kind, name, namespace)
        table: Obj = self.request("GET", path, accept=TABLE_ACCEPT).body
        return table

    def pod_log(self, name: str, namespace: str, *, container: str | None = None) -> str:
        """The log of a pod's container as text (``GET pods/<name>/log``)."""
        path = self._path("v1", "Pod", name, namespace, "log")
        query = [("container", container)] if container else []
        _method, url, headers, _body, _post = self._api.param_serialize(
            method="GET", resource_path=path, query_params=query, auth_settings=["BearerToken"]
        )
        raw = self._api.call_api("GET", url, header_params=headers)
        data = raw.read()
        text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
        if raw.status >= 300:
            raise ApiError(raw.status, text, method="GET", path=path)
        return text

    def events_for(self, obj: Mapping[str, Any]) -> builtins.list[Obj]:
        """``events.k8s.io/v1`` Events regarding an object (matched by UID), oldest first.

        Events written through the core/v1 API are included: both APIs share one storage.
        """
        meta = obj["metadata"]
        events = self.list("events.k8s.io/v1", "Event", meta.get("namespace"))
        mine = [e for e in events if (e.get("regarding") or {}).get("uid") == meta.get("uid")]
        return sorted(
            mine,
            key=lambda e: (
                e.get("eventTime") or e.get("deprecatedLastTimestamp") or "",
                e["metadata"].get("creationTimestamp") or "",
            ),
        )

    # -- waiting --------------------------------------------------------------------------

    def wait_until(
        self,
        check: Callable[[], T | None],
        *,
        timeout: float | None = None,
        what: str = "condition",
        describe: Callable[[], Any] | None = None,
    ) -> T:
        """Poll ``check`` until it returns something truthy; return that.

        Args:
            check: Called repeatedly; ``ApiError`` 404 counts as "not yet".
            timeout: Seconds (default: the client's default timeout).
            what: Description for the failure message.
            describe: Called on timeout to add context (e.g. the last object) to the message.

        Returns:
            The first truthy result.

        Raises:
            AssertionError: On timeout.
        """
        deadline = time.monotonic() + (self.default_timeout if timeout is None else timeout)
        while True:
            try:
                result = check()
            except ApiError as err:
                if err.status != 404:
                    raise
                result = None
            if result:
                return result
            if time.monotonic() >= deadline:
                context = f"\nlast seen: {json.dumps(describe(), indent=1)}" if describe else ""
                raise AssertionError(f"timed out waiting for {what}{context}")
            time.sleep(POLL_INTERVAL)

    def wait_for(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        predicate: Callable[[Obj | None], bool],
        *,
        timeout: float | None = None,
        what: str | None = None,
    ) -> Obj | None:
        """Poll an object until ``predicate(obj)`` holds (``obj`` is ``None`` while missing).

        Returns:
            The object that satisfied the predicate (``None`` if its absence did).

        Raises:
            AssertionError: On timeout, with the last object seen.
        """
        last: list[Obj | None] = [None]

        def check() -> tuple[Obj | None] | None:
            obj = self.get_or_none(api_version, kind, name, namespace)
            last[0] = obj
            return (obj,) if predicate(obj) else None

        found = self.wait_until(
            check,
            timeout=timeout,
            what=what or f"{kind} {namespace}/{name}",
            describe=lambda: _without_managed_fields(last[0]),
        )
        assert found is not None  # wait_until returns only truthy results
        return found[0]

    def wait_gone(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Wait until an object no longer exists."""
        self.wait_for(
            api_version,
            kind,
            name,
            namespace,
            lambda obj: obj is None,
            timeout=timeout,
            what=f"{kind} {namespace}/{name} to be gone",
        )

    def consistently(
        self,
        check: Callable[[], bool],
        *,
        seconds: float,
        what: str = "condition",
    ) -> None:
        """Assert that ``check`` holds every time it is polled for ``seconds``.

        Raises:
            AssertionError: The first time it does not hold.
        """
        deadline = time.monotonic() + seconds
        while True:
            if not check():
                raise AssertionError(f"expected to hold for {seconds:.0f}s: {what}")
            if time.monotonic() >= deadline:
                return
            time.sleep(POLL_INTERVAL)

    def server_version(self) -> str:
        """The API server's ``gitVersion``."""
        version: str = self.request("GET", "/version").body.get("gitVersion", "")
        return version

    def close(self) -> None:
        """Release the connection pool."""
        self._api.close()
