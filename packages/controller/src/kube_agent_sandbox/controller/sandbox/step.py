"""What the steps of a Sandbox reconcile share: their inputs.

Each step (PVCs, Pod, Service, expiry clean-up) is a function in its own module that reads
children from the caches in :class:`StepContext`, writes through its client (the runtime's
``create_or_fetch`` and ``delete_child``) and raises a
:class:`~kube_agent_sandbox.controller.runtime.ReconcileError` when something fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kube_agent_sandbox.controller.runtime import Client, Reader
from kube_agent_sandbox.controller.sandbox.ownwrites import PodNameWrites
from kube_agent_sandbox.controller.tracing import Tracer


@dataclass(frozen=True, slots=True)
class StepContext:
    """The client, caches and settings every step of a reconcile reads.

    Attributes:
        client: Writes (and live reads on AlreadyExists) against the API server.
        pods: Cache of Pods (with the name-hash index).
        services: Cache of Services.
        pvcs: Cache of PersistentVolumeClaims.
        tracer: Receives the steps' spans and events.
        cluster_domain: DNS domain of the cluster, for ``status.serviceFQDN``.
        pod_names: The pod-name annotations this controller wrote (read-your-writes).
        keep_state: This process runs the extensions' state keeper, so a suspended Sandbox
            that opts in keeps its Pod until the keeper reports its state saved (keepstate.py);
            the snapshot resolver runs beside it, so a Sandbox created from a snapshot gets no
            Pod until its image is resolved (fromsnapshot.py).
    """

    client: Client
    pods: Reader
    services: Reader
    pvcs: Reader
    tracer: Tracer
    cluster_domain: str
    pod_names: PodNameWrites = field(default_factory=PodNameWrites)
    keep_state: bool = False
