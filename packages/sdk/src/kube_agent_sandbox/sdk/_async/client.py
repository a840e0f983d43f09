"""AsyncSandboxClient: create or claim sandboxes, wait on them, run commands and move files.

It stays one module: :class:`AsyncSandboxClient` is one class whose methods share its lazily
opened API connection, default namespace and the record of what it created (removed on
exit), and ``scripts/unasync_sdk.py`` generates one ``_sync`` file per ``_async`` file.

This is the hand-written source; ``_sync/client.py`` (``SandboxClient``) is generated from it by
``scripts/unasync_sdk.py``. Waits watch the object (no polling) and read the Ready condition's
status; every wait has a typed timeout; the client removes what it created when used as a
context manager.
"""

from __future__ import annotations

import builtins
import datetime
import getpass
import logging
import queue
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, BinaryIO

from httpx_ws import AsyncWebSocketSession
from wsproto.events import BytesMessage, CloseConnection

from kube_agent_sandbox.api import constants as api_constants
from kube_agent_sandbox.api import heartbeat
from kube_agent_sandbox.sdk import builders, execproto, metrics, readiness
from kube_agent_sandbox.sdk._async import _backend
from kube_agent_sandbox.sdk._async.api import AsyncKubeApi, WatchExpiredError
from kube_agent_sandbox.sdk.config import ClusterConfig
from kube_agent_sandbox.sdk.constants import LEASES, PODS, SANDBOX_CLAIMS, SANDBOXES, Resource
from kube_agent_sandbox.sdk.errors import (
    ConflictError,
    ExecFailedError,
    ExecTimeoutError,
    NotFoundError,
    SandboxDeletedError,
    SandboxError,
    SandboxTimeoutError,
)
from kube_agent_sandbox.sdk.execproto import ExecResult, FileEntry
from kube_agent_sandbox.sdk.paths import exec_params, resource_label, resource_path

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
STDIN_CHUNK = 256 * 1024
DEFAULT_READY_TIMEOUT = 180.0


class AsyncExecSession:
    """An open exec stream: write stdin, read ``(channel, data)`` until the command ends.

    Attributes:
        exit_code: set once the error channel reported the end of the command.
    """

    def __init__(self, ws: AsyncWebSocketSession) -> None:
        self._ws = ws
        self.exit_code: int | None = None
        self.can_close_stdin = ws.subprotocol == execproto.PROTOCOL_V5

    async def write(self, data: bytes) -> None:
        """Send ``data`` to the command's stdin."""
        for start in range(0, len(data), STDIN_CHUNK):
            await self._ws.send_bytes(
                execproto.frame(execproto.STDIN, data[start : start + STDIN_CHUNK])
            )

    async def close_stdin(self) -> None:
        """Signal end of input (v5 protocol; a no-op on v4 servers)."""
        if self.can_close_stdin:
            await self._ws.send_bytes(execproto.close_stdin_frame())

    async def resize(self, width: int, height: int) -> None:
        """Resize the remote terminal (``tty`` sessions)."""
        await self._ws.send_bytes(execproto.resize_frame(width, height))

    async def read(self, timeout: float | None = None) -> tuple[int, bytes] | None:
        """The next stdout/stderr chunk, or ``None`` when the command ended.

        Raises:
            TimeoutError: nothing arrived within ``timeout`` seconds.
            ExecFailedError: the command could not run.
        """
        while True:
            try:
                event = await self._ws.receive(timeout)
            except queue.Empty as err:
                raise TimeoutError("no output") from err
            if isinstance(event, CloseConnection):
                return None
            if not isinstance(event, BytesMessage):
                continue
            channel, payload = execproto.split(bytes(event.data))
            if channel == execproto.ERROR:
                self.exit_code = execproto.exit_code(payload)
                return None
            if channel in (execproto.STDOUT, execproto.STDERR) and payload:
                return channel, payload


class AsyncSandbox:
    """A handle on one Sandbox (returned by create and claim calls; upstream's ``Sandbox``).

    Attributes:
        name: the Sandbox's name (upstream's ``sandbox_id``).
        namespace: its namespace.
        claim_name: the SandboxClaim it was claimed through, if any.
        commands: ``run`` commands in it.
        files: read and write its files.
    """

    def __init__(
        self,
        client: AsyncSandboxClient,
        name: str,
        *,
        namespace: str,
        claim_name: str | None = None,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.claim_name = claim_name
        self.commands = AsyncCommandExecutor(self)
        self.files = AsyncFilesystem(self)

    @property
    def sandbox_id(self) -> str:
        """Upstream's name for :attr:`name`."""
        return self.name

    async def get(self) -> Obj:
        """The Sandbox object as the API has it now."""
        return await self.client.get(self.name, namespace=self.namespace)

    async def status(self) -> readiness.Readiness:
        """Its Ready condition (status, reason, message)."""
        return readiness.sandbox_readiness(await self.get())

    async def exec(self, command: Sequence[str], **kwargs: Any) -> ExecResult:
        """Run ``command`` (an argv list); see :meth:`AsyncSandboxClient.exec`."""
        return await self.client.exec(self.name, command, namespace=self.namespace, **kwargs)

    async def suspend(self, *, wait: bool = True, timeout: float = DEFAULT_READY_TIMEOUT) -> Obj:
        """Suspend it (its Pod is removed, PVCs kept)."""
        return await self.client.suspend(
            self.name, namespace=self.namespace, wait=wait, timeout=timeout
        )

    async def resume(self, *, wait: bool = True, timeout: float = DEFAULT_READY_TIMEOUT) -> Obj:
        """Resume it and (by default) wait until Ready."""
        return await self.client.resume(
            self.name, namespace=self.namespace, wait=wait, timeout=timeout
        )

    async def keepalive(self, *, holder: str | None = None) -> Obj | None:
        """Count as activity now: renew its idle-shutdown heartbeat Lease.

        See :meth:`AsyncSandboxClient.keepalive`.
        """
        return await self.client.keepalive(self.name, namespace=self.namespace, holder=holder)

    async def terminate(self, *, wait: bool = False, timeout: float = 60.0) -> None:
        """Delete the claim it came from (the controller removes the rest), else the Sandbox.

        Idempotent: deleting something already gone is not an error.
        """
        if self.claim_name:
            await self.client.delete_claim(
                self.claim_name,
                namespace=self.namespace,
                wait=wait,
                timeout=timeout,
                missing_ok=True,
            )
        else:
            await self.client.delete(
                self.name, namespace=self.namespace, wait=wait, timeout=timeout, missing_ok=True
            )


class AsyncCommandExecutor:
    """``sandbox.commands`` (upstream's ``CommandExecutor``)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def run(
        self, command: str, timeout: float = 60.0, *, stdin: bytes | None = None
    ) -> ExecResult:
        """Run a shell command line (``sh -c``) and collect its output.

        Args:
            command: the command line.
            timeout: seconds before :class:`ExecTimeoutError`; the command (and what it
                started) is then killed.
            stdin: bytes to feed it.
        """
        return await self._sandbox.exec(
            ["sh", "-c", command], timeout=timeout, stdin=stdin, kill_on_timeout=True
        )


class AsyncFilesystem:
    """``sandbox.files`` (upstream's ``Filesystem``), over the exec API (any image with sh)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def read(self, path: str, timeout: float = 60.0) -> bytes:
        """The file's bytes."""
        s = self._sandbox
        return await s.client.read_file(s.name, path, namespace=s.namespace, timeout=timeout)

    async def write(self, path: str, content: bytes | str, timeout: float = 60.0) -> None:
        """Create or replace the file (parent directories are created)."""
        s = self._sandbox
        await s.client.write_file(s.name, path, content, namespace=s.namespace, timeout=timeout)

    async def list(self, path: str, timeout: float = 60.0) -> builtins.list[FileEntry]:
        """The entries of a directory."""
        s = self._sandbox
        return await s.client.list_files(s.name, path, namespace=s.namespace, timeout=timeout)

    async def exists(self, path: str, timeout: float = 60.0) -> bool:
        """Whether the path exists."""
        s = self._sandbox
        return await s.client.file_exists(s.name, path, namespace=s.namespace, timeout=timeout)

    async def delete(self, path: str, *, recursive: bool = False, timeout: float = 60.0) -> None:
        """Remove a file (or, with ``recursive``, a directory tree)."""
        s = self._sandbox
        await s.client.delete_file(
            s.name, path, namespace=s.namespace, recursive=recursive, timeout=timeout
        )


class AsyncSandboxClient:
    """Client of Agent Sandbox for asyncio programs.

    Args:
        config: the cluster connection; by default in-cluster config inside a Pod, else the
            kubeconfig (loaded on first use, off the event loop).
        namespace: default namespace of every call (else the config's).
        context: kubeconfig context to use when ``config`` is not given.
        timeout: seconds for one API request.

    Use it as ``async with AsyncSandboxClient() as client:``: on exit everything the client
    created (Sandboxes, claims) is deleted and connections are closed.
    """

    def __init__(
        self,
        config: ClusterConfig | None = None,
        *,
        namespace: str | None = None,
        context: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._config = config
        self._context = context
        self._namespace = namespace
        self._timeout = timeout
        self._api: AsyncKubeApi | None = None
        self._created: list[tuple[Resource, str, str]] = []

    async def __aenter__(self) -> AsyncSandboxClient:
        await self.api()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.delete_all()
        finally:
            await self.close()

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

    # --- Sandboxes ------------------------------------------------------------------------

    def sandbox(
        self, name: str, *, namespace: str | None = None, claim_name: str | None = None
    ) -> AsyncSandbox:
        """A handle on an existing Sandbox (no API call)."""
        return AsyncSandbox(self, name, namespace=self._ns(namespace), claim_name=claim_name)

    async def create_sandbox(
        self,
        source: builders.SandboxSource,
        *,
        name: str | None = None,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        shutdown_after_seconds: int | None = None,
        wait: bool = True,
        timeout: float = DEFAULT_READY_TIMEOUT,
    ) -> AsyncSandbox:
        """Create a Sandbox from a model, a dict or a YAML manifest (text or path).

        Args:
            source: the Sandbox.
            name: its name (else the manifest's, else ``sandbox-<random>``).
            namespace: its namespace (else the manifest's, else the client's).
            labels: extra labels.
            shutdown_after_seconds: expire it that many seconds from now.
            wait: wait until Ready.
            timeout: seconds to wait.

        Raises:
            ValueError: invalid source.
            SandboxTimeoutError: not Ready in time.
            SandboxFailedError: it finished or expired instead.
        """
        body = builders.sandbox_body(
            Path(source) if isinstance(source, Path) else source,
            name=name,
            labels=labels,
            shutdown_after_seconds=shutdown_after_seconds,
        )
        ns = self._ns(namespace or body["metadata"].get("namespace"))
        body["metadata"]["namespace"] = ns
        created = await self._request("POST", SANDBOXES, ns, verb="create", body=body)
        created_name = str(created["metadata"]["name"])
        self._track(SANDBOXES, ns, created_name)
        handle = AsyncSandbox(self, created_name, namespace=ns)
        if wait:
            await self.wait_ready(created_name, namespace=ns, timeout=timeout)
        return handle

    async def get(self, name: str, *, namespace: str | None = None) -> Obj:
        """The Sandbox object.

        Raises:
            NotFoundError: no such Sandbox.
        """
        return await self._get(SANDBOXES, name, namespace=self._ns(namespace))

    async def list_sandboxes(
        self, *, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        """Sandboxes of a namespace (optionally filtered by labels)."""
        return await self._list(
            SANDBOXES, namespace=self._ns(namespace), label_selector=label_selector
        )

    async def watch(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        resource_version: str = "0",
        timeout: float = 300.0,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Sandbox events ``(ADDED|MODIFIED|DELETED, object)`` for ``timeout`` seconds."""
        api = await self.api()
        params = {"resourceVersion": resource_version}
        if label_selector:
            params["labelSelector"] = label_selector
        async for kind, obj in api.watch(
            resource_path(SANDBOXES, self._ns(namespace)),
            resource=resource_label(SANDBOXES),
            params=params,
            timeout=timeout,
        ):
            if kind != "BOOKMARK":
                yield kind, obj

    async def wait_ready(
        self, name: str, *, namespace: str | None = None, timeout: float = DEFAULT_READY_TIMEOUT
    ) -> Obj:
        """Watch the Sandbox until its Ready condition is True.

        Raises:
            SandboxTimeoutError: not Ready in time (the message has the last reason).
            SandboxFailedError: finished or expired.
            SandboxDeletedError: deleted while waiting.
            NotFoundError: no such Sandbox.
        """

        def done(obj: Obj) -> bool:
            state = readiness.sandbox_readiness(obj)
            if state.failure is not None:
                raise state.failure
            return state.ready

        return await self._wait(
            SANDBOXES, name, namespace=self._ns(namespace), timeout=timeout, done=done, what="Ready"
        )

    async def delete(
        self,
        name: str,
        *,
        namespace: str | None = None,
        wait: bool = False,
        timeout: float = 60.0,
        missing_ok: bool = False,
    ) -> None:
        """Delete a Sandbox (its Pod, Service and PVCs go with it).

        Args:
            name: the Sandbox.
            namespace: its namespace.
            wait: return only once it is gone.
            timeout: seconds to wait.
            missing_ok: a missing Sandbox is not an error.
        """
        await self._delete(
            SANDBOXES,
            name,
            namespace=self._ns(namespace),
            missing_ok=missing_ok,
            wait=wait,
            timeout=timeout,
        )

    async def wait_deleted(
        self,
        name: str,
        *,
        namespace: str | None = None,
        claim: bool = False,
        timeout: float = 60.0,
    ) -> None:
        """Watch a Sandbox (or, with ``claim``, a SandboxClaim) until it is gone.

        Raises:
            SandboxTimeoutError: still there after ``timeout``.
        """
        resource = SANDBOX_CLAIMS if claim else SANDBOXES
        await self._wait_gone(resource, name, namespace=self._ns(namespace), timeout=timeout)

    async def suspend(
        self,
        name: str,
        *,
        namespace: str | None = None,
        wait: bool = True,
        timeout: float = DEFAULT_READY_TIMEOUT,
    ) -> Obj:
        """Set ``operatingMode: Suspended``; with ``wait``, until the Suspended condition is True.

        A Sandbox already suspended is left alone and no latency is recorded.
        """
        return await self._set_operating_mode(
            name, "Suspended", namespace=namespace, wait=wait, timeout=timeout
        )

    async def resume(
        self,
        name: str,
        *,
        namespace: str | None = None,
        wait: bool = True,
        timeout: float = DEFAULT_READY_TIMEOUT,
    ) -> Obj:
        """Set ``operatingMode: Running``; with ``wait``, until Ready.

        A Sandbox already running is left alone and no latency is recorded.
        """
        return await self._set_operating_mode(
            name, "Running", namespace=namespace, wait=wait, timeout=timeout
        )

    async def _set_operating_mode(
        self, name: str, mode: str, *, namespace: str | None, wait: bool, timeout: float
    ) -> Obj:
        """Patch ``operatingMode`` (a no-op when already there) and time it in its histogram."""
        ns = self._ns(namespace)
        current = await self.get(name, namespace=ns)
        if (current.get("spec") or {}).get("operatingMode", "Running") == mode:
            return current
        histogram = metrics.SUSPEND_LATENCY if mode == "Suspended" else metrics.RESUME_LATENCY
        started = time.monotonic()
        success = False
        try:
            obj = await self._patch(
                SANDBOXES, name, builders.operating_mode_patch(mode), namespace=ns
            )
            if wait and mode == "Suspended":
                obj = await self._wait(
                    SANDBOXES,
                    name,
                    namespace=ns,
                    timeout=timeout,
                    done=readiness.is_suspended,
                    what="Suspended",
                )
            elif wait:
                obj = await self.wait_ready(name, namespace=ns, timeout=timeout)
            success = True
            return obj
        finally:
            metrics.observe(histogram, started=started, ended=time.monotonic(), success=success)

    async def keepalive(
        self, name: str, *, namespace: str | None = None, holder: str | None = None
    ) -> Obj | None:
        """Count as activity now: renew the Sandbox's idle-shutdown heartbeat Lease.

        A Sandbox with ``kube-agent-sandbox.io/idle-timeout`` is suspended (or deleted) by the
        idle reconciler once its heartbeat Lease (same name) is older than the timeout; the
        gateway renews it on traffic, and a client working without traffic (a long local
        computation between two calls) calls this. One merge patch of ``spec.renewTime``
        normally; the Lease is created (owned by the Sandbox) when missing. A Sandbox without
        an idle timeout has nothing to renew: nothing is written and None is returned.

        Needs ``get`` on sandboxes and ``get``/``create``/``patch`` on
        ``coordination.k8s.io`` leases in the namespace.

        Args:
            name: The Sandbox.
            namespace: Its namespace (the client's default when None).
            holder: ``spec.holderIdentity`` (default ``sdk:<user>@<host>``).

        Returns:
            The Lease as written, or None when the Sandbox has no idle timeout.

        Raises:
            NotFoundError: No such Sandbox.
        """
        ns = self._ns(namespace)
        who = holder or _default_holder()
        now = datetime.datetime.now(datetime.UTC)
        patch = {
            "metadata": {"labels": {api_constants.LABEL_HEARTBEAT: "true"}},
            "spec": {"holderIdentity": who, "renewTime": heartbeat.format_micro_time(now)},
        }
        for _ in range(2):
            try:
                return await self._patch(LEASES, name, patch, namespace=ns)
            except NotFoundError:
                pass
            sandbox = await self.get(name, namespace=ns)
            annotations = (sandbox.get("metadata") or {}).get("annotations") or {}
            idle = heartbeat.duration_seconds(
                annotations.get(api_constants.ANNOTATION_IDLE_TIMEOUT)
            )
            if idle is None:
                return None
            body = heartbeat.lease_body(sandbox, holder=who, duration_seconds=round(idle), now=now)
            try:
                return await self._request("POST", LEASES, ns, verb="create", body=body)
            except ConflictError:
                continue  # created meanwhile by another writer: renew it
        raise SandboxError(f"heartbeat Lease {ns}/{name} could not be renewed")

    async def set_shutdown_time(
        self,
        name: str,
        when: datetime.datetime | None,
        *,
        namespace: str | None = None,
        policy: str | None = None,
    ) -> Obj:
        """Set (or with ``None`` clear) ``spec.shutdownTime``; optionally the policy."""
        patch = builders.shutdown_patch(when, policy=policy)
        return await self._patch(SANDBOXES, name, patch, namespace=self._ns(namespace))

    async def extend_shutdown(
        self, name: str, seconds: float, *, namespace: str | None = None
    ) -> Obj:
        """Push ``spec.shutdownTime`` ``seconds`` later (from now if unset or past)."""
        ns = self._ns(namespace)
        current = await self.get(name, namespace=ns)
        when = builders.extended_shutdown_time(current, seconds)
        return await self.set_shutdown_time(name, when, namespace=ns)

    # --- Claims ---------------------------------------------------------------------------

    async def claim_sandbox(
        self,
        warm_pool: str,
        *,
        namespace: str | None = None,
        timeout: float = DEFAULT_READY_TIMEOUT,
        wait: bool = True,
        **options: Any,
    ) -> AsyncSandbox:
        """Claim a Sandbox from a SandboxWarmPool (upstream's ``create_sandbox(warmpool)``).

        Args:
            warm_pool: the pool (it names the SandboxTemplate).
            namespace: where the claim lives.
            timeout: seconds to wait for Ready.
            wait: wait until the claim is Ready and bound.
            **options: :func:`~kube_agent_sandbox.sdk.builders.claim_body` options (``name``,
                ``labels``, ``annotations``, ``env``, ``pod_labels``, ``pod_annotations``,
                ``shutdown_after_seconds``, ``shutdown_time``, ``shutdown_policy``,
                ``ttl_seconds_after_finished``, ``volume_claim_templates``).

        Returns:
            A handle on the bound Sandbox (``claim_name`` set). Without ``wait`` its name is
            the claim's until bound.

        Raises:
            SandboxTemplateNotFoundError, SandboxWarmPoolNotFoundError,
            SandboxClaimFailedError: the claim failed (it is deleted).
            SandboxTimeoutError: not Ready in time (the claim is deleted).
        """
        ns = self._ns(namespace)
        body = builders.claim_body(warm_pool, namespace=ns, **options)
        created = await self._request("POST", SANDBOX_CLAIMS, ns, verb="create", body=body)
        name = str(created["metadata"]["name"])
        self._track(SANDBOX_CLAIMS, ns, name)
        if not wait:
            return AsyncSandbox(self, name, namespace=ns, claim_name=name)
        try:
            claim = await self.wait_claim_ready(name, namespace=ns, timeout=timeout)
        except BaseException:
            await self._delete(SANDBOX_CLAIMS, name, namespace=ns, missing_ok=True)
            raise
        bound = readiness.bound_sandbox_name(claim) or name
        return AsyncSandbox(self, bound, namespace=ns, claim_name=name)

    async def create_claim(
        self, warm_pool: str, *, namespace: str | None = None, **options: Any
    ) -> Obj:
        """Create a SandboxClaim and return it as created (no wait, not tracked)."""
        ns = self._ns(namespace)
        body = builders.claim_body(warm_pool, namespace=ns, **options)
        return await self._request("POST", SANDBOX_CLAIMS, ns, verb="create", body=body)

    async def get_claim(self, name: str, *, namespace: str | None = None) -> Obj:
        """The SandboxClaim object."""
        return await self._get(SANDBOX_CLAIMS, name, namespace=self._ns(namespace))

    async def list_claims(
        self, *, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        """SandboxClaims of a namespace."""
        return await self._list(
            SANDBOX_CLAIMS, namespace=self._ns(namespace), label_selector=label_selector
        )

    async def wait_claim_ready(
        self, name: str, *, namespace: str | None = None, timeout: float = DEFAULT_READY_TIMEOUT
    ) -> Obj:
        """Watch a claim until Ready=True with a bound Sandbox (fails fast on terminal reasons)."""

        def done(obj: Obj) -> bool:
            state = readiness.claim_readiness(obj)
            if state.failure is not None:
                raise state.failure
            return state.ready

        return await self._wait(
            SANDBOX_CLAIMS,
            name,
            namespace=self._ns(namespace),
            timeout=timeout,
            done=done,
            what="Ready",
        )

    async def delete_claim(
        self,
        name: str,
        *,
        namespace: str | None = None,
        wait: bool = False,
        timeout: float = 60.0,
        missing_ok: bool = False,
    ) -> None:
        """Delete a SandboxClaim (the controller removes its Sandbox)."""
        await self._delete(
            SANDBOX_CLAIMS,
            name,
            namespace=self._ns(namespace),
            missing_ok=missing_ok,
            wait=wait,
            timeout=timeout,
        )

    # --- inside the sandbox ---------------------------------------------------------------

    async def _pod(self, name: str, namespace: str) -> str:
        return readiness.pod_name(await self.get(name, namespace=namespace))

    @asynccontextmanager
    async def exec_session(
        self,
        name: str,
        command: Sequence[str],
        *,
        namespace: str | None = None,
        container: str | None = None,
        stdin: bool = False,
        tty: bool = False,
    ) -> AsyncIterator[AsyncExecSession]:
        """An open exec stream to the Sandbox's Pod (for streaming and interactive use)."""
        ns = self._ns(namespace)
        pod = await self._pod(name, ns)
        api = await self.api()
        params = exec_params(list(command), container=container, stdin=stdin, tty=tty)
        async with api.websocket(
            resource_path(PODS, ns, pod, "exec"),
            resource="pods/exec",
            params=params,
            subprotocols=execproto.SUBPROTOCOLS,
        ) as ws:
            yield AsyncExecSession(ws)

    async def exec(
        self,
        name: str,
        command: Sequence[str],
        *,
        namespace: str | None = None,
        container: str | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = 60.0,
        on_output: Callable[[int, bytes], None] | None = None,
        kill_on_timeout: bool = False,
    ) -> ExecResult:
        """Run ``command`` (argv) in the Sandbox through the Kubernetes exec API.

        Args:
            name: the Sandbox.
            command: argv (use ``["sh", "-c", "..."]`` for a command line).
            namespace: its namespace.
            container: the container (default: the Pod's first).
            stdin: input for the command.
            timeout: seconds; ``None`` waits forever.
            on_output: called with ``(1 or 2, chunk)`` as output arrives (streaming).
            kill_on_timeout: run the command under ``sh`` so its PID is known, and kill it
                and its descendants when it outlives ``timeout`` (the image needs ``sh``).

        Returns:
            stdout, stderr and the exit code.

        Raises:
            ExecTimeoutError: the command outlived ``timeout``: the stream is closed and
                control returns. The exec API cannot signal a process, so without
                ``kill_on_timeout`` the command may keep running in the container.
            ExecFailedError: the command could not run (e.g. not found).
            PermissionDeniedError: no ``create`` on ``pods/exec``.
        """
        data = stdin.encode() if isinstance(stdin, str) else stdin
        deadline = None if timeout is None else time.monotonic() + timeout
        argv = list(command)
        prefix = execproto.PidPrefix() if kill_on_timeout else None
        out: list[bytes] = []
        err: list[bytes] = []
        timed_out = False
        async with self.exec_session(
            name,
            execproto.killable(argv) if kill_on_timeout else argv,
            namespace=namespace,
            container=container,
            stdin=data is not None,
        ) as session:
            if data is not None:
                await session.write(data)
                await session.close_stdin()
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    timed_out = True
                    break
                try:
                    chunk = await session.read(remaining)
                except TimeoutError:
                    continue
                if chunk is None:
                    break
                channel, payload = chunk
                if channel == execproto.STDERR and prefix is not None:
                    payload = prefix.feed(payload)
                    if not payload:
                        continue
                (out if channel == execproto.STDOUT else err).append(payload)
                if on_output is not None:
                    on_output(channel, payload)
        if timed_out:
            if prefix is not None and prefix.pid:
                await self._kill(name, prefix.pid, namespace=namespace, container=container)
            raise ExecTimeoutError(
                f"command {argv!r} still running after {timeout:g}s"
                + (" (killed)" if prefix is not None and prefix.pid else ""),
                stdout=b"".join(out),
                stderr=b"".join(err),
            )
        if session.exit_code is None:
            raise ExecFailedError(f"exec stream of {argv!r} ended without an exit status")
        return ExecResult(session.exit_code, b"".join(out), b"".join(err))

    async def _kill(
        self, name: str, pid: str, *, namespace: str | None, container: str | None
    ) -> None:
        """Kill a timed-out command and its descendants (best effort, errors logged)."""
        if not pid.isdigit():
            return
        try:
            await self.exec(
                name,
                ["sh", "-c", execproto.KILL_TREE_SCRIPT, "sh", pid],
                namespace=namespace,
                container=container,
                timeout=15,
            )
        except SandboxError as err:
            logger.warning("could not kill timed-out command (pid %s) in %s: %s", pid, name, err)

    async def run(
        self, name: str, command: str, *, namespace: str | None = None, timeout: float = 60.0
    ) -> ExecResult:
        """Run a shell command line (``sh -c command``)."""
        return await self.exec(
            name, ["sh", "-c", command], namespace=namespace, timeout=timeout, kill_on_timeout=True
        )

    async def read_file(
        self, name: str, path: str, *, namespace: str | None = None, timeout: float | None = 300.0
    ) -> bytes:
        """The bytes of ``path`` in the Sandbox (binary safe).

        Raises:
            NotFoundError: no such file.
        """
        result = await self.exec(name, ["cat", "--", path], namespace=namespace, timeout=timeout)
        _check_file_result(result, path)
        return result.stdout_bytes

    async def download(
        self,
        name: str,
        path: str,
        target: BinaryIO,
        *,
        namespace: str | None = None,
        timeout: float | None = 600.0,
    ) -> int:
        """Stream ``path`` into ``target`` without holding it in memory; returns bytes copied."""
        copied = 0

        def sink(channel: int, chunk: bytes) -> None:
            nonlocal copied
            if channel == execproto.STDOUT:
                target.write(chunk)
                copied += len(chunk)

        result = await self._exec_streaming(name, ["cat", "--", path], namespace, timeout, sink)
        _check_file_result(result, path)
        return copied

    async def _exec_streaming(
        self,
        name: str,
        command: list[str],
        namespace: str | None,
        timeout: float | None,
        sink: Callable[[int, bytes], None],
    ) -> ExecResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        err: list[bytes] = []
        async with self.exec_session(name, command, namespace=namespace) as session:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise ExecTimeoutError(f"{command!r} still running after {timeout:g}s")
                try:
                    chunk = await session.read(remaining)
                except TimeoutError:
                    continue
                if chunk is None:
                    break
                if chunk[0] == execproto.STDERR:
                    err.append(chunk[1])
                sink(chunk[0], chunk[1])
        if session.exit_code is None:
            raise ExecFailedError(f"exec stream of {command!r} ended without an exit status")
        return ExecResult(session.exit_code, b"", b"".join(err))

    async def write_file(
        self,
        name: str,
        path: str,
        content: bytes | str | BinaryIO,
        *,
        namespace: str | None = None,
        size: int | None = None,
        timeout: float | None = 600.0,
    ) -> None:
        """Create or replace ``path`` with ``content`` (bytes, text or a binary file object).

        A file object is streamed in chunks; its ``size`` is taken from ``seek``/``tell`` when
        not given. The remote side reads exactly that many bytes (``head -c``), so it works on
        servers without the v5 exec protocol too.
        """
        if isinstance(content, str):
            content = content.encode()
        if isinstance(content, bytes | bytearray):
            stream: BinaryIO | None = None
            total = len(content)
        else:
            stream = content
            if size is None:
                here = stream.tell()
                stream.seek(0, 2)
                size = stream.tell() - here
                stream.seek(here)
            total = size
        command = ["sh", "-c", execproto.WRITE_SCRIPT, "sh", str(total), path]
        deadline = None if timeout is None else time.monotonic() + timeout
        err: list[bytes] = []
        async with self.exec_session(name, command, namespace=namespace, stdin=True) as session:
            if stream is None:
                await session.write(bytes(content))  # type: ignore[arg-type]
            else:
                while chunk := stream.read(STDIN_CHUNK):
                    await session.write(chunk)
            await session.close_stdin()
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise ExecTimeoutError(f"writing {path} still running after {timeout:g}s")
                try:
                    chunk_read = await session.read(remaining)
                except TimeoutError:
                    continue
                if chunk_read is None:
                    break
                if chunk_read[0] == execproto.STDERR:
                    err.append(chunk_read[1])
        code = session.exit_code
        if code != 0:
            message = b"".join(err).decode("utf-8", "replace").strip()
            raise ExecFailedError(f"cannot write {path}: {message or f'exit code {code}'}")

    async def list_files(
        self, name: str, path: str, *, namespace: str | None = None, timeout: float | None = 60.0
    ) -> list[FileEntry]:
        """The entries of directory ``path``.

        Raises:
            NotFoundError: no such directory.
        """
        result = await self.exec(
            name,
            ["sh", "-c", execproto.LIST_SCRIPT, "sh", path],
            namespace=namespace,
            timeout=timeout,
        )
        if result.exit_code == 2:
            raise NotFoundError(f"no such directory: {path}", 404, reason="NotFound")
        if result.exit_code != 0:
            raise ExecFailedError(f"cannot list {path}: {result.stderr.strip()}")
        return execproto.parse_listing(result.stdout)

    async def file_exists(
        self, name: str, path: str, *, namespace: str | None = None, timeout: float | None = 60.0
    ) -> bool:
        """Whether ``path`` exists in the Sandbox."""
        result = await self.exec(name, ["test", "-e", path], namespace=namespace, timeout=timeout)
        return result.exit_code == 0

    async def delete_file(
        self,
        name: str,
        path: str,
        *,
        namespace: str | None = None,
        recursive: bool = False,
        timeout: float | None = 60.0,
    ) -> None:
        """Remove ``path`` (a directory tree only with ``recursive``).

        Raises:
            NotFoundError: no such file.
        """
        if not await self.file_exists(name, path, namespace=namespace, timeout=timeout):
            raise NotFoundError(f"no such file: {path}", 404, reason="NotFound")
        command = ["rm", "-rf", "--", path] if recursive else ["rm", "-f", "--", path]
        result = await self.exec(name, command, namespace=namespace, timeout=timeout)
        if result.exit_code != 0:
            raise ExecFailedError(f"cannot delete {path}: {result.stderr.strip()}")

    async def logs(
        self,
        name: str,
        *,
        namespace: str | None = None,
        container: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
    ) -> AsyncIterator[str]:
        """Lines of the Sandbox Pod's log."""
        ns = self._ns(namespace)
        pod = await self._pod(name, ns)
        params = {"follow": "true" if follow else "false"}
        if container:
            params["container"] = container
        if tail_lines is not None:
            params["tailLines"] = str(tail_lines)
        api = await self.api()
        async for line in api.stream_lines(
            resource_path(PODS, ns, pod, "log"), resource="pods/log", params=params
        ):
            yield line


def _default_holder() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"sdk:{user}@{socket.gethostname()}"


def _check_file_result(result: ExecResult, path: str) -> None:
    if result.exit_code == 0:
        return
    message = result.stderr.strip()
    if "No such file" in message or "not found" in message.lower():
        raise NotFoundError(f"no such file: {path}", 404, reason="NotFound")
    raise ExecFailedError(f"cannot read {path}: {message or f'exit code {result.exit_code}'}")


def _last_state(obj: Obj) -> str:
    cond = readiness.condition(obj, "Ready")
    if not cond:
        return " (no Ready condition yet)"
    return f" (Ready={cond.get('status')} {cond.get('reason') or ''}: {cond.get('message') or ''})"
