# Generated from _async/sandboxes.py by scripts/unasync_sdk.py: do not edit.
"""AsyncSandboxCalls: read, list, watch, wait for, suspend, resume, keep alive, expire and
delete Sandboxes (creating one, which returns a handle, is on the client itself).

Hand-written source: ``_sync/sandboxes.py`` is generated from it by ``scripts/unasync_sdk.py``.
"""

from __future__ import annotations

import datetime
import getpass
import socket
import time
from collections.abc import Iterator

from kube_agent_sandbox.api import constants as api_constants
from kube_agent_sandbox.api import heartbeat
from kube_agent_sandbox.sdk import builders, readiness
from kube_agent_sandbox.sdk._sync.objects import DEFAULT_READY_TIMEOUT, Obj, ObjectCalls
from kube_agent_sandbox.sdk.constants import LEASES, SANDBOX_CLAIMS, SANDBOXES
from kube_agent_sandbox.sdk.errors import ConflictError, NotFoundError, SandboxError
from kube_agent_sandbox.sdk.paths import resource_label, resource_path


class SandboxCalls(ObjectCalls):
    """The Sandbox calls of :class:`~kube_agent_sandbox.sdk.SandboxClient`."""

    def get(self, name: str, *, namespace: str | None = None) -> Obj:
        """The Sandbox object.

        Raises:
            NotFoundError: no such Sandbox.
        """
        return self._get(SANDBOXES, name, namespace=self._ns(namespace))

    def list_sandboxes(
        self, *, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        """Sandboxes of a namespace (optionally filtered by labels)."""
        return self._list(SANDBOXES, namespace=self._ns(namespace), label_selector=label_selector)

    def watch(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        resource_version: str = "0",
        timeout: float = 300.0,
    ) -> Iterator[tuple[str, Obj]]:
        """Sandbox events ``(ADDED|MODIFIED|DELETED, object)`` for ``timeout`` seconds."""
        api = self.api()
        params = {"resourceVersion": resource_version}
        if label_selector:
            params["labelSelector"] = label_selector
        for kind, obj in api.watch(
            resource_path(SANDBOXES, self._ns(namespace)),
            resource=resource_label(SANDBOXES),
            params=params,
            timeout=timeout,
        ):
            if kind != "BOOKMARK":
                yield kind, obj

    def wait_ready(
        self, name: str, *, namespace: str | None = None, timeout: float = DEFAULT_READY_TIMEOUT
    ) -> Obj:
        """Watch the Sandbox until its Ready condition is True.

        Raises:
            SandboxTimeoutError: not Ready in time (the message has the last reason).
            SandboxFailedError: finished or expired.
            SandboxDeletedError: deleted while waiting.
            NotFoundError: no such Sandbox.
        """
        return self._wait_ready(
            SANDBOXES,
            name,
            namespace=self._ns(namespace),
            timeout=timeout,
            readiness_of=readiness.sandbox_readiness,
        )

    def delete(
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
        with self._tracer.span("delete_sandbox", {"sandbox.name": name}):
            self._delete(
                SANDBOXES,
                name,
                namespace=self._ns(namespace),
                missing_ok=missing_ok,
                wait=wait,
                timeout=timeout,
            )

    def wait_deleted(
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
        self._wait_gone(resource, name, namespace=self._ns(namespace), timeout=timeout)

    def suspend(
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
        return self._set_operating_mode(
            name, "Suspended", namespace=namespace, wait=wait, timeout=timeout
        )

    def resume(
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
        return self._set_operating_mode(
            name, "Running", namespace=namespace, wait=wait, timeout=timeout
        )

    def _set_operating_mode(
        self, name: str, mode: str, *, namespace: str | None, wait: bool, timeout: float
    ) -> Obj:
        """Patch ``operatingMode`` (a no-op when already there) and time it in its histogram."""
        ns = self._ns(namespace)
        current = self.get(name, namespace=ns)
        if (current.get("spec") or {}).get("operatingMode", "Running") == mode:
            return current
        # prometheus_client loads with the first timed call (or get_metrics), not with the SDK.
        from kube_agent_sandbox.sdk import metrics

        histogram = metrics.SUSPEND_LATENCY if mode == "Suspended" else metrics.RESUME_LATENCY
        started = time.monotonic()
        success = False
        try:
            obj = self._patch(SANDBOXES, name, builders.operating_mode_patch(mode), namespace=ns)
            if wait and mode == "Suspended":
                obj = self._wait(
                    SANDBOXES,
                    name,
                    namespace=ns,
                    timeout=timeout,
                    done=readiness.is_suspended,
                    what="Suspended",
                )
            elif wait:
                obj = self.wait_ready(name, namespace=ns, timeout=timeout)
            success = True
            return obj
        finally:
            metrics.observe(histogram, started=started, ended=time.monotonic(), success=success)

    def keepalive(
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
                return self._patch(LEASES, name, patch, namespace=ns)
            except NotFoundError:
                pass
            sandbox = self.get(name, namespace=ns)
            annotations = (sandbox.get("metadata") or {}).get("annotations") or {}
            idle = heartbeat.duration_seconds(
                annotations.get(api_constants.ANNOTATION_IDLE_TIMEOUT)
            )
            if idle is None:
                return None
            body = heartbeat.lease_body(sandbox, holder=who, duration_seconds=round(idle), now=now)
            try:
                return self._request("POST", LEASES, ns, verb="create", body=body)
            except ConflictError:
                continue  # created meanwhile by another writer: renew it
        raise SandboxError(f"heartbeat Lease {ns}/{name} could not be renewed")

    def set_shutdown_time(
        self,
        name: str,
        when: datetime.datetime | None,
        *,
        namespace: str | None = None,
        policy: str | None = None,
    ) -> Obj:
        """Set (or with ``None`` clear) ``spec.shutdownTime``; optionally the policy."""
        patch = builders.shutdown_patch(when, policy=policy)
        return self._patch(SANDBOXES, name, patch, namespace=self._ns(namespace))

    def extend_shutdown(self, name: str, seconds: float, *, namespace: str | None = None) -> Obj:
        """Push ``spec.shutdownTime`` ``seconds`` later (from now if unset or past)."""
        ns = self._ns(namespace)
        current = self.get(name, namespace=ns)
        when = builders.extended_shutdown_time(current, seconds)
        return self.set_shutdown_time(name, when, namespace=ns)


def _default_holder() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"sdk:{user}@{socket.gethostname()}"
