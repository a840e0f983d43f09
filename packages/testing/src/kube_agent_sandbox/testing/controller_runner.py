"""Run a controller against the test cluster under a chosen identity.

Integration tests run the controller in-process (an async callable on its own event loop in a
thread) or as a command, but never as the cluster admin: the runner creates a ServiceAccount,
applies the RBAC manifests it is given, binds the named ClusterRoles, mints a token with the
TokenRequest API (``kubectl create token``) and writes a kubeconfig for that identity. So the
controller's real RBAC is exercised by every integration test. Everything the runner started
or created is stopped or deleted by :meth:`ControllerRunner.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kube_agent_sandbox.testing.access import ClusterAccess, ManifestSource, load_manifests
from kube_agent_sandbox.testing.kubeconfig import read_server_and_ca, write_kubeconfig
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor

_log = logging.getLogger(__name__)

AsyncTarget = Callable[[Path], Awaitable[Any]]
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class Identity:
    """A ServiceAccount identity with a kubeconfig that authenticates as it."""

    namespace: str
    name: str
    kubeconfig: Path

    @property
    def username(self) -> str:
        """The Kubernetes user name of the service account."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"


class RunningController:
    """An async callable running on its own event loop in a daemon thread."""

    def __init__(self, name: str, target: AsyncTarget, kubeconfig: Path) -> None:
        """Start ``target(kubeconfig)`` in a new thread.

        Args:
            name: Name for the thread and messages.
            target: Coroutine function taking the kubeconfig path.
            kubeconfig: Kubeconfig of the identity to run as.
        """
        self.name = name
        self.error: BaseException | None = None
        self._error_raised = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(target, kubeconfig), name=f"controller-{name}", daemon=True
        )
        self._thread.start()
        self._started.wait()

    def _run(self, target: AsyncTarget, kubeconfig: Path) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def main() -> None:
            self._task = asyncio.current_task()
            self._started.set()
            await target(kubeconfig)

        try:
            loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass
        except BaseException as err:  # reported to the test through .error / stop()
            self.error = err
            _log.exception("controller %s failed", self.name)
        finally:
            self._started.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def alive(self) -> bool:
        """Whether the controller is still running."""
        return self._thread.is_alive()

    def stop(self, *, timeout: float = 30.0) -> None:
        """Cancel the controller's task and wait for its thread to end.

        Args:
            timeout: Seconds to wait for the thread.

        Raises:
            TimeoutError: If the controller does not stop in time.
            BaseException: Whatever the controller raised, other than cancellation (only
                the first time ``stop`` is called).
        """
        loop, task = self._loop, self._task
        if loop is not None and task is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # loop closed meanwhile
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"controller {self.name} did not stop within {timeout:.0f}s")
        if self.error is not None and not self._error_raised:
            self._error_raised = True  # raise once: a later close() must not raise it again
            raise self.error


class ControllerRunner:
    """Creates identities and runs controllers as them; cleans everything up on close."""

    def __init__(self, access: ClusterAccess, workdir: Path) -> None:
        """Prepare a runner.

        Args:
            access: The cluster (its admin kubeconfig creates the identities).
            workdir: Directory for kubeconfigs and command logs.
        """
        self._access = access
        self._workdir = workdir
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._supervisor = ProcessSupervisor(workdir / "logs")
        self._controllers: list[RunningController] = []
        self._cluster_objects: list[tuple[str, str]] = []  # (kind, name) to delete on close

    def identity(
        self,
        name: str,
        *,
        namespace: str,
        cluster_roles: Sequence[str] = (),
        roles: Sequence[str] = (),
        rbac: ManifestSource | None = None,
        token_duration: str = "24h",
    ) -> Identity:
        """Create a ServiceAccount with the given rights and a kubeconfig for it.

        Args:
            name: ServiceAccount name.
            namespace: Its namespace (created when missing).
            cluster_roles: ClusterRoles bound cluster-wide (ClusterRoleBinding).
            roles: Roles in ``namespace`` bound to it (RoleBinding).
            rbac: ClusterRole/Role manifests to apply first (e.g. the generated controller
                RBAC); namespaced ones land in ``namespace`` unless they name one.
            token_duration: Lifetime of the minted token (kubectl duration syntax).

        Returns:
            The identity and its kubeconfig.

        Raises:
            ValueError: If a name is not a valid Kubernetes name.
            KubectlError: If the cluster rejects an object.
        """
        for value in (name, namespace, *cluster_roles, *roles):
            if not _NAME.match(value.replace(":", "-").replace(".", "-")):
                raise ValueError(f"not a valid Kubernetes name: {value!r}")
        access = self._access
        if access.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            access.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            self._cluster_objects.append(("namespace", namespace))
        if rbac is not None:
            objects = load_manifests(rbac)
            access.apply(objects, namespace=namespace)
            for obj in objects:
                if obj.get("kind") in ("ClusterRole", "ClusterRoleBinding"):
                    self._cluster_objects.append((obj["kind"], obj["metadata"]["name"]))
        subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
        objects = [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": namespace},
            }
        ]
        for role in cluster_roles:
            binding = f"{namespace}.{name}.{role.replace(':', '.')}"
            objects.append(
                _binding("ClusterRoleBinding", binding, None, "ClusterRole", role, subject)
            )
            self._cluster_objects.append(("ClusterRoleBinding", binding))
        for role in roles:
            binding = f"{name}.{role}"
            objects.append(_binding("RoleBinding", binding, namespace, "Role", role, subject))
        access.apply(objects)
        token = access.kubectl(
            "create", "token", name, "--namespace", namespace, f"--duration={token_duration}"
        ).stdout.strip()
        server, ca = read_server_and_ca(access.kubeconfig)
        kubeconfig = write_kubeconfig(
            self._workdir / f"{namespace}.{name}.kubeconfig",
            server=server,
            ca_pem=ca,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=token,
            namespace=namespace,
        )
        return Identity(namespace=namespace, name=name, kubeconfig=kubeconfig)

    def bind_in_namespace(
        self, identity: Identity, cluster_role: str, namespace: str, *, name: str | None = None
    ) -> None:
        """Bind ``cluster_role`` to ``identity`` in ``namespace`` only (a RoleBinding).

        The RoleBinding (``name``, or one made of the identity and role) goes with its
        namespace; the namespace must exist.
        """
        subject = {"kind": "ServiceAccount", "name": identity.name, "namespace": identity.namespace}
        binding = name or f"{identity.namespace}.{identity.name}.{cluster_role.replace(':', '.')}"
        self._access.apply(
            _binding("RoleBinding", binding, namespace, "ClusterRole", cluster_role, subject)
        )

    def start(
        self, target: AsyncTarget, *, identity: Identity, name: str = "controller"
    ) -> RunningController:
        """Run ``await target(identity.kubeconfig)`` in-process until :meth:`close`.

        Args:
            target: Coroutine function taking the kubeconfig path (e.g. the controller's main).
            identity: Who the controller runs as.
            name: Name for messages.

        Returns:
            The running controller (``stop()`` it to end it early and re-raise its error).
        """
        controller = RunningController(name, target, identity.kubeconfig)
        self._controllers.append(controller)
        return controller

    def start_command(
        self,
        argv: Sequence[str],
        *,
        identity: Identity,
        name: str = "controller",
        env: Mapping[str, str] | None = None,
    ) -> ManagedProcess:
        """Run a command with ``KUBECONFIG`` set to the identity's kubeconfig.

        ``{kubeconfig}`` in an argument is replaced by the kubeconfig path.

        Args:
            argv: Program and arguments.
            identity: Who the command runs as.
            name: Log file name (``<name>.log`` in the runner's log directory).
            env: Extra environment variables.

        Returns:
            The started process (stopped by :meth:`close`).
        """
        path = str(identity.kubeconfig)
        full_env = dict(os.environ, KUBECONFIG=path, **(env or {}))
        command = [arg.replace("{kubeconfig}", path) for arg in argv]
        return self._supervisor.start(name, command, env=full_env)

    def close(self) -> None:
        """Stop every controller and command, then delete the cluster-scoped objects created.

        Raises:
            BaseException: The first error a controller raised, after everything is cleaned up.
        """
        errors: list[BaseException] = []
        for controller in reversed(self._controllers):
            try:
                controller.stop()
            except BaseException as err:
                errors.append(err)
        self._controllers.clear()
        self._supervisor.stop_all()
        for kind, name in reversed(self._cluster_objects):
            self._access.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")
        self._cluster_objects.clear()
        if errors:
            raise errors[0]


def _binding(
    kind: str,
    name: str,
    namespace: str | None,
    role_kind: str,
    role: str,
    subject: Mapping[str, str],
) -> dict[str, Any]:
    metadata: dict[str, str] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [dict(subject)],
    }
