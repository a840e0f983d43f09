# Generated from _async/client.py by scripts/unasync_sdk.py: do not edit.
"""SandboxClient: create or claim sandboxes, wait on them, run commands and move files.

The client class is assembled from one part per concern, each its own module: ``objects``
(connection, default namespace, record of created objects, generic calls and waits),
``sandboxes``, ``claims``, ``exec`` (commands and logs) and ``files``. This module holds the
client itself with the calls that return handles, and the handles: :class:`AsyncSandbox` with
its ``commands`` and ``files``.

This is the hand-written source; ``_sync/client.py`` (``SandboxClient``) is generated from it by
``scripts/unasync_sdk.py``, as every module of this folder is. The client removes what it
created when used as a context manager.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kube_agent_sandbox.sdk import builders, readiness
from kube_agent_sandbox.sdk._sync.claims import ClaimCalls
from kube_agent_sandbox.sdk._sync.files import FileCalls
from kube_agent_sandbox.sdk._sync.objects import DEFAULT_READY_TIMEOUT, Obj
from kube_agent_sandbox.sdk._sync.sandboxes import SandboxCalls
from kube_agent_sandbox.sdk._sync.snapshots import DEFAULT_SNAPSHOT_TIMEOUT, SnapshotCalls
from kube_agent_sandbox.sdk.constants import (
    SANDBOX_CLAIMS,
    SANDBOXES,
    SNAPSHOT_ANNOTATION,
    SNAPSHOT_PULL_SECRET_ANNOTATION,
    SNAPSHOT_WARM_POOL_ANNOTATION,
    TRACE_CONTEXT_ANNOTATION,
)
from kube_agent_sandbox.sdk.errors import SnapshotUnavailableError
from kube_agent_sandbox.sdk.execproto import ExecResult, FileEntry


class Sandbox:
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
        client: SandboxClient,
        name: str,
        *,
        namespace: str,
        claim_name: str | None = None,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.claim_name = claim_name
        self.commands = CommandExecutor(self)
        self.files = Filesystem(self)

    @property
    def sandbox_id(self) -> str:
        """Upstream's name for :attr:`name`."""
        return self.name

    def get(self) -> Obj:
        """The Sandbox object as the API has it now."""
        return self.client.get(self.name, namespace=self.namespace)

    def status(self) -> readiness.Readiness:
        """Its Ready condition (status, reason, message)."""
        return readiness.sandbox_readiness(self.get())

    def exec(self, command: Sequence[str], **kwargs: Any) -> ExecResult:
        """Run ``command`` (an argv list); see :meth:`SandboxClient.exec`."""
        return self.client.exec(self.name, command, namespace=self.namespace, **kwargs)

    def suspend(self, *, wait: bool = True, timeout: float = DEFAULT_READY_TIMEOUT) -> Obj:
        """Suspend it (its Pod is removed, PVCs kept)."""
        return self.client.suspend(self.name, namespace=self.namespace, wait=wait, timeout=timeout)

    def resume(self, *, wait: bool = True, timeout: float = DEFAULT_READY_TIMEOUT) -> Obj:
        """Resume it and (by default) wait until Ready."""
        return self.client.resume(self.name, namespace=self.namespace, wait=wait, timeout=timeout)

    def snapshot(
        self,
        name: str | None = None,
        *,
        wait: bool = True,
        timeout: float = DEFAULT_SNAPSHOT_TIMEOUT,
        **options: Any,
    ) -> Obj:
        """Snapshot its files (it keeps running); see :meth:`SandboxClient.create_snapshot`."""
        return self.client.create_snapshot(
            self.name, name=name, namespace=self.namespace, wait=wait, timeout=timeout, **options
        )

    def keepalive(self, *, holder: str | None = None) -> Obj | None:
        """Count as activity now: renew its idle-shutdown heartbeat Lease.

        See :meth:`SandboxClient.keepalive`.
        """
        return self.client.keepalive(self.name, namespace=self.namespace, holder=holder)

    def terminate(self, *, wait: bool = False, timeout: float = 60.0) -> None:
        """Delete the claim it came from (the controller removes the rest), else the Sandbox.

        Idempotent: deleting something already gone is not an error.
        """
        if self.claim_name:
            self.client.delete_claim(
                self.claim_name,
                namespace=self.namespace,
                wait=wait,
                timeout=timeout,
                missing_ok=True,
            )
        else:
            self.client.delete(
                self.name, namespace=self.namespace, wait=wait, timeout=timeout, missing_ok=True
            )


class CommandExecutor:
    """``sandbox.commands`` (upstream's ``CommandExecutor``)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def run(self, command: str, timeout: float = 60.0, *, stdin: bytes | None = None) -> ExecResult:
        """Run a shell command line (``sh -c``) and collect its output.

        Args:
            command: the command line.
            timeout: seconds before :class:`ExecTimeoutError`; the command (and what it
                started) is then killed.
            stdin: bytes to feed it.
        """
        s = self._sandbox
        return s.client.run(s.name, command, namespace=s.namespace, timeout=timeout, stdin=stdin)


class Filesystem:
    """``sandbox.files`` (upstream's ``Filesystem``), over the exec API (any image with sh)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def read(self, path: str, timeout: float = 60.0) -> bytes:
        """The file's bytes."""
        s = self._sandbox
        return s.client.read_file(s.name, path, namespace=s.namespace, timeout=timeout)

    def write(self, path: str, content: bytes | str, timeout: float = 60.0) -> None:
        """Create or replace the file (parent directories are created)."""
        s = self._sandbox
        s.client.write_file(s.name, path, content, namespace=s.namespace, timeout=timeout)

    def list(self, path: str, timeout: float = 60.0) -> builtins.list[FileEntry]:
        """The entries of a directory."""
        s = self._sandbox
        return s.client.list_files(s.name, path, namespace=s.namespace, timeout=timeout)

    def exists(self, path: str, timeout: float = 60.0) -> bool:
        """Whether the path exists."""
        s = self._sandbox
        return s.client.file_exists(s.name, path, namespace=s.namespace, timeout=timeout)

    def delete(self, path: str, *, recursive: bool = False, timeout: float = 60.0) -> None:
        """Remove a file (or, with ``recursive``, a directory tree)."""
        s = self._sandbox
        s.client.delete_file(
            s.name, path, namespace=s.namespace, recursive=recursive, timeout=timeout
        )


class SandboxClient(SandboxCalls, ClaimCalls, FileCalls, SnapshotCalls):
    """Client of Agent Sandbox for blocking (synchronous) programs.

    Args:
        config: the cluster connection; by default in-cluster config inside a Pod, else the
            kubeconfig (loaded on first use).
        namespace: default namespace of every call (else the config's).
        context: kubeconfig context to use when ``config`` is not given.
        timeout: seconds for one API request.

    Use it as ``with SandboxClient() as client:``: on exit everything the client
    created (Sandboxes, claims) is deleted and connections are closed.
    """

    def __enter__(self) -> SandboxClient:
        self.api()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.delete_all()
        finally:
            self.close()

    def sandbox(
        self, name: str, *, namespace: str | None = None, claim_name: str | None = None
    ) -> Sandbox:
        """A handle on an existing Sandbox (no API call)."""
        return Sandbox(self, name, namespace=self._ns(namespace), claim_name=claim_name)

    def create_sandbox(
        self,
        source: builders.SandboxSource,
        *,
        name: str | None = None,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        shutdown_after_seconds: int | None = None,
        wait: bool = True,
        timeout: float = DEFAULT_READY_TIMEOUT,
    ) -> Sandbox:
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
        with self._tracer.span("create_sandbox"):
            _annotate_trace_context(body, self._tracer.trace_context())
            created = self._request("POST", SANDBOXES, ns, verb="create", body=body)
            created_name = str(created["metadata"]["name"])
            self._tracer.set_attributes({"sandbox.name": created_name})
            self._track(SANDBOXES, ns, created_name)
            handle = Sandbox(self, created_name, namespace=ns)
            if wait:
                with self._tracer.span("wait_for_sandbox_ready"):
                    self.wait_ready(created_name, namespace=ns, timeout=timeout)
        return handle

    def claim_sandbox(
        self,
        warm_pool: str,
        *,
        namespace: str | None = None,
        timeout: float = DEFAULT_READY_TIMEOUT,
        wait: bool = True,
        **options: Any,
    ) -> Sandbox:
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
        with self._tracer.span("claim_sandbox", {"sandbox.warm_pool": warm_pool}):
            with self._tracer.span("create_claim"):
                _annotate_trace_context(body, self._tracer.trace_context())
                created = self._request("POST", SANDBOX_CLAIMS, ns, verb="create", body=body)
                name = str(created["metadata"]["name"])
                self._tracer.set_attributes({"sandbox.claim.name": name})
            self._track(SANDBOX_CLAIMS, ns, name)
            if not wait:
                return Sandbox(self, name, namespace=ns, claim_name=name)
            try:
                with self._tracer.span("wait_for_claim_ready", {"sandbox.claim.name": name}):
                    claim = self.wait_claim_ready(name, namespace=ns, timeout=timeout)
            except BaseException:
                self._delete(SANDBOX_CLAIMS, name, namespace=ns, missing_ok=True)
                raise
            bound = readiness.bound_sandbox_name(claim) or name
            self._tracer.set_attributes({"sandbox.name": bound})
        return Sandbox(self, bound, namespace=ns, claim_name=name)

    def claim_from_snapshot(
        self,
        snapshot: str,
        *,
        namespace: str | None = None,
        warm_pool: str | None = None,
        pull_secret: str | None = None,
        timeout: float = DEFAULT_READY_TIMEOUT,
        wait: bool = True,
        **options: Any,
    ) -> Sandbox:
        """Claim a new Sandbox that runs a snapshot's image (a cold start of the template).

        Args:
            snapshot: the SandboxSnapshot (same namespace).
            namespace: where it and the claim live.
            warm_pool: the pool (hence template) to claim from; by default the one the
                snapshot recorded from its source's claim.
            pull_secret: a ``kubernetes.io/dockerconfigjson`` Secret to pull the image with.
            timeout: seconds to wait for Ready (the snapshot may still be committing).
            wait: wait until the claim is Ready and bound.
            **options: as :meth:`claim_sandbox` (``annotations`` are merged).

        Raises:
            NotFoundError: no such snapshot.
            SnapshotUnavailableError: no pool given and the snapshot records none.
            SandboxClaimFailedError, SandboxTimeoutError: as :meth:`claim_sandbox`.
        """
        ns = self._ns(namespace)
        obj = self.get_snapshot(snapshot, namespace=ns)
        recorded = ((obj.get("metadata") or {}).get("annotations") or {}).get(
            SNAPSHOT_WARM_POOL_ANNOTATION
        )
        pool = warm_pool or recorded
        if not pool:
            raise SnapshotUnavailableError(
                f"snapshot {ns}/{snapshot} records no warm pool ({SNAPSHOT_WARM_POOL_ANNOTATION}):"
                " name the pool whose template it runs with (warm_pool=...)"
            )
        annotations = {**(options.pop("annotations", None) or {}), SNAPSHOT_ANNOTATION: snapshot}
        if pull_secret:
            annotations[SNAPSHOT_PULL_SECRET_ANNOTATION] = pull_secret
        return self.claim_sandbox(
            str(pool), namespace=ns, timeout=timeout, wait=wait, annotations=annotations, **options
        )


def _annotate_trace_context(body: Obj, trace_context: str) -> None:
    """Write the W3C context (tracing on) into the ``opentelemetry.io/trace-context``
    annotation of the object about to be created, where its controller continues the trace."""
    if trace_context:
        meta = body.setdefault("metadata", {})
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            TRACE_CONTEXT_ANNOTATION: trace_context,
        }
