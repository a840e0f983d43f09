"""One local ``sandboxd`` and code interpreter per kwok pod, as a real pod has its own envd.

kwok pods run nothing, so the suites that drive the gateway run the sandbox daemons locally.
One daemon shared by every pod would let two sandboxes see each other's files and processes,
and a test with several sandboxes would not mean what it says. :class:`PodDaemons` watches a
namespace's pods and gives each pod with an IP its own daemons, each with its own home folder,
listening on the pod's own loopback address (``127.x.y.z``, from a hash of its UID: a new pod
may get a deleted pod's IP), which the gateway's ``--pod-address-override=loopback`` reaches.
Every pod's daemons use the same two local ports (``envd_port``, ``interpreter_port``: the gateway's
``--pod-port-map``), so the map stays static while the addresses tell pods apart. Every pod
gets an interpreter, whatever its template: the suites use it as any sandbox's user server on
port 49999 too (public traffic), and it starts in a fraction of a second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from kube_agent_sandbox.gateway.index import loopback_address
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor

__all__ = ["PodDaemon", "PodDaemons"]

_log = logging.getLogger(__name__)


@dataclass
class PodDaemon:
    """The daemons of one pod."""

    pod: str
    uid: str
    address: str
    home: Path
    processes: list[ManagedProcess] = field(default_factory=list)


class PodDaemons:
    """Start and stop each pod's daemons as the pods of ``namespace`` come and go.

    Args:
        cluster: The cluster whose pods are watched (admin client).
        namespace: The namespace of the sandbox pods.
        root: Parent of the pods' home folders (``<root>/<pod>-<uid prefix>``).
        supervisor: Starts the daemons and stops what is left at the end.
        interpreter_module: ``python -m`` module of the code interpreter.
        interval: Seconds between two listings of the namespace's pods.
    """

    def __init__(
        self,
        cluster: ClusterAccess,
        namespace: str,
        root: Path,
        *,
        supervisor: ProcessSupervisor,
        interpreter_module: str,
        interval: float = 0.2,
    ) -> None:
        self.namespace = namespace
        self.root = root
        self.supervisor = supervisor
        self.interpreter_module = interpreter_module
        self.interval = interval
        self.envd_port = free_port()
        self.interpreter_port = free_port()
        # A client of its own: the watching thread must not share the fixtures' connections.
        self._core = client.CoreV1Api(client.ApiClient(cluster.client_configuration()))
        self._daemons: dict[str, PodDaemon] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-daemons", daemon=True)
        self.started = 0
        """How many pods got daemons so far."""

    def __enter__(self) -> PodDaemons:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)
        with self._lock:
            daemons, self._daemons = list(self._daemons.values()), {}
        for daemon in daemons:
            self._stop(daemon)
        self._core.api_client.close()

    def daemons(self) -> list[PodDaemon]:
        """The pods that have daemons now."""
        with self._lock:
            return list(self._daemons.values())

    def __iter__(self) -> Iterator[PodDaemon]:
        return iter(self.daemons())

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.sync()
            except Exception:
                _log.exception("listing the pods of %s failed; trying again", self.namespace)
            self._stopping.wait(self.interval)

    def sync(self) -> None:
        """One pass: stop the daemons of pods gone, start those of new pods with an IP."""
        # Raw JSON: plain dicts, as the gateway's caches hold them.
        response: Any = self._core.list_namespaced_pod(self.namespace, _preload_content=False)
        pods: list[dict[str, Any]] = json.loads(response.data)["items"]
        live = {
            str(pod["metadata"]["uid"]): pod
            for pod in pods
            if not pod["metadata"].get("deletionTimestamp")
            and (pod.get("status") or {}).get("podIP")
        }
        with self._lock:
            gone = [d for uid, d in self._daemons.items() if uid not in live]
            for daemon in gone:
                del self._daemons[daemon.uid]
        # Stopped first (their ports and memory): the gateway reaches a new pod elsewhere.
        for daemon in gone:
            self._stop(daemon)
        for uid, pod in live.items():
            with self._lock:
                known = uid in self._daemons
            if not known and not self._stopping.is_set():
                daemon = self._start(pod)
                with self._lock:
                    self._daemons[uid] = daemon

    def _start(self, pod: Mapping[str, Any]) -> PodDaemon:
        name, uid = str(pod["metadata"]["name"]), str(pod["metadata"]["uid"])
        daemon = PodDaemon(
            pod=name,
            uid=uid,
            address=loopback_address(uid),
            home=self.root / f"{name}-{uid[:8]}",
        )
        daemon.home.mkdir(parents=True, exist_ok=True)
        # The daemon's own user is root here (no ``user`` account): its home is $HOME.
        env = {**os.environ, "HOME": str(daemon.home)}
        wanted = [
            ("sandboxd", "kube_agent_sandbox.sandboxd", self.envd_port),
            ("interpreter", self.interpreter_module, self.interpreter_port),
        ]
        for kind, module, port in wanted:
            argv = [sys.executable, "-m", module, "--host", daemon.address, "--port", str(port)]
            if kind == "sandboxd":
                argv.append("--no-forward")
            process = self.supervisor.start(
                f"{kind}-{name}-{uid[:8]}", argv, env=env, cwd=daemon.home
            )
            daemon.processes.append(process)
        self.started += 1
        _log.info("daemons of pod %s on %s", name, daemon.address)
        return daemon

    def _stop(self, daemon: PodDaemon) -> None:
        for process in daemon.processes:
            with contextlib.suppress(KeyError):  # stop_all() took it already
                self.supervisor.stop(process.name, grace=5)
