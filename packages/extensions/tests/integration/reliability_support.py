"""Shared pieces of the reliability tests: controller processes, metrics, trackers, checkers.

The reliability tests (leader failover, conflicts, API server restart and compaction) run the
controller as users do, ``python -m kube_agent_sandbox.controller --extensions``, so they can
SIGKILL it or read its ``/metrics``. They watch what the controllers do with a test-side
informer (every Ready transition and every Sandbox a claim was ever bound to) and, at the end,
compare the namespace with what must hold: each claim Ready and bound to one Sandbox it
controls, each Sandbox controlled by an existing claim or pool, one Pod per Sandbox.
Not a test module: the tests import it (``conftest.py`` puts this directory on ``sys.path``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import ApiClient, EventHandler, Informer, Obj
from kube_agent_sandbox.testing.access import ClusterAccess, load_manifests
from kube_agent_sandbox.testing.controller_runner import ControllerRunner, Identity
from kube_agent_sandbox.testing.kwok import kwok_node
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess
from kube_agent_sandbox.testing.waiting import ObjectRef

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[4]
RBAC = REPO / "manifests" / "rbac"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


async def until(
    what: str,
    probe: Callable[[], Awaitable[Any]],
    *,
    seconds: float,
    poll: float = 0.2,
    between: Callable[[], object] | None = None,
) -> Any:
    """Await ``probe()`` until it returns something truthy, and return that.

    The probes read the API server (or several processes' metrics) in ways no single watch
    covers, so this polls; ``between`` runs after each miss (e.g. restarting a dead replica).

    Raises:
        AssertionError: naming ``what`` when ``seconds`` pass first.
    """
    deadline = time.monotonic() + seconds
    while True:
        value = await probe()
        if value:
            return value
        if between is not None:
            between()
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {seconds:.0f}s")
        await asyncio.sleep(poll)


def controller_identity(runner: ControllerRunner, namespace: str) -> Identity:
    """The controller's ServiceAccount, bound only to the two generated ClusterRoles."""
    return runner.identity(
        "agent-sandbox-controller",
        namespace=namespace,
        cluster_roles=["agent-sandbox-controller", "agent-sandbox-controller-extensions"],
        rbac=[
            *load_manifests(RBAC / "role.generated.yaml"),
            *load_manifests(RBAC / "extensions" / "role.generated.yaml"),
        ],
    )


def leader_election_flow_schema(namespace: str, service_account: str) -> dict[str, Any]:
    """A FlowSchema putting the controller's Lease requests in the ``leader-election`` level.

    API Priority and Fairness sorts a service account's requests into ``workload-low`` by
    default, where a controller's Lease renewals queue behind its own reconcile traffic; under
    load they then miss the renew deadline and the leader steps down. kube-controller-manager's
    renewals get the ``leader-election`` priority level; this gives the controller's the same.
    """
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": f"agent-sandbox-leader-election-{namespace}"[:63]},
        "spec": {
            "priorityLevelConfiguration": {"name": "leader-election"},
            "matchingPrecedence": 200,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "serviceAccount": {"name": service_account, "namespace": namespace},
                        }
                    ],
                    "resourceRules": [
                        {
                            "verbs": ["get", "create", "update"],
                            "apiGroups": ["coordination.k8s.io"],
                            "resources": ["leases"],
                            "namespaces": ["*"],
                        }
                    ],
                }
            ],
        },
    }


@dataclass
class ControllerProcess:
    """One ``agent-sandbox-controller --extensions`` process and its metrics endpoint."""

    name: str
    process: ManagedProcess
    metrics_port: int

    @property
    def metrics_url(self) -> str:
        """Its ``/metrics`` URL."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


def start_controller(
    runner: ControllerRunner,
    identity: Identity,
    *,
    name: str,
    flags: Sequence[str] = (),
) -> ControllerProcess:
    """Start the controller command (webhook off, metrics on a free port) as ``identity``."""
    metrics_port = free_port()
    argv = [
        sys.executable,
        "-m",
        "kube_agent_sandbox.controller",
        "--kubeconfig={kubeconfig}",
        "--extensions",
        "--enable-webhook=false",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--health-probe-bind-address=0",
        *flags,
    ]
    process = runner.start_command(argv, identity=identity, name=name)
    return ControllerProcess(name, process, metrics_port)


async def scrape(url: str, *, seconds: float = 5.0) -> dict[str, float] | None:
    """Prometheus samples (``name{labels}`` -> value) of ``url``; None if it does not answer."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as session,
            session.get(url) as response,
        ):
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None
    samples: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples


def metric_sum(samples: Mapping[str, float], metric: str, /, **labels: str) -> float:
    """Sum of the samples of ``metric`` whose labels include ``labels``."""
    total = 0.0
    for key, value in samples.items():
        base, _, rest = key.partition("{")
        if base != metric:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


def template(name: str) -> Obj:
    """A SandboxTemplate whose pods kwok runs."""
    pod = {"spec": {"containers": [{"name": "agent", "image": "agent:latest"}]}}
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_TEMPLATE,
        "metadata": {"name": name},
        "spec": {"podTemplate": pod},
    }


def warm_pool(name: str, template_name: str, replicas: int) -> Obj:
    """A SandboxWarmPool of ``replicas`` Sandboxes of ``template_name``."""
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_WARM_POOL,
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template_name}},
    }


def claim(name: str, pool: str) -> Obj:
    """A SandboxClaim served from ``pool``."""
    return {
        "apiVersion": c.EXTENSIONS_API_VERSION,
        "kind": c.KIND_SANDBOX_CLAIM,
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": pool}},
    }


async def create_all(
    api: ApiClient, namespace: str, objects: Sequence[tuple[Any, Obj]], *, parallel: int = 16
) -> None:
    """Create ``(resource, body)`` pairs, ``parallel`` at a time."""
    gate = asyncio.Semaphore(parallel)

    async def one(resource: Any, body: Obj) -> None:
        async with gate:
            await api.create(resource, namespace, body)

    await asyncio.gather(*(one(r, b) for r, b in objects))


async def setup_pool(api: ApiClient, namespace: str, *, pool: str, replicas: int) -> None:
    """Create the template ``tpl`` and the pool ``pool`` of ``replicas``."""
    await api.create(SANDBOX_TEMPLATES, namespace, template("tpl"))
    await api.create(SANDBOX_WARM_POOLS, namespace, warm_pool(pool, "tpl", replicas))


def _quantity(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def add_pod_room(cluster: ClusterAccess, *, pods: int, prefix: str) -> list[str]:
    """Add kwok nodes until the schedulable nodes have room for ``pods`` more Pods.

    The local cluster starts with two kwok nodes of 110 Pods each: 220 Pods in all, fewer than
    a 500-claim burst and its warm pool need. Pods beyond that stay Pending ("Too many pods"),
    their Sandboxes and claims never become Ready, and the burst looks merely slow. A real
    cluster is sized for its load; so is this one, with extra nodes named ``<prefix>-<i>``.

    Returns:
        The names of the nodes added (remove them with :func:`remove_nodes`).
    """
    resources = cluster.dynamic().resources
    nodes = resources.get(api_version="v1", kind="Node")
    pod_api = resources.get(api_version="v1", kind="Pod")
    free = 0
    for node in nodes.get().to_dict()["items"]:
        if (node.get("spec") or {}).get("unschedulable") or node["metadata"].get(
            "deletionTimestamp"
        ):
            continue
        used = pod_api.get(
            field_selector=f"spec.nodeName={node['metadata']['name']},"
            "status.phase!=Succeeded,status.phase!=Failed"
        ).to_dict()["items"]
        allocatable = ((node.get("status") or {}).get("allocatable") or {}).get("pods")
        free += max(_quantity(allocatable) - len(used), 0)
    per_node = _quantity(kwok_node("x")["status"]["allocatable"]["pods"])
    missing = max(pods - free, 0)
    names = [f"{prefix}-{i}" for i in range(-(-missing // per_node))]
    log.info("room for %d pods on the nodes, %d needed: adding %d nodes", free, pods, len(names))
    for name in names:
        nodes.create(body=kwok_node(name))
    for name in names:
        cluster.wait_for_condition(ObjectRef("v1", "Node", name), "Ready", timeout=120)
    return names


def remove_nodes(cluster: ClusterAccess, names: Sequence[str]) -> None:
    """Delete nodes :func:`add_pod_room` added (their Pods are garbage collected)."""
    nodes = cluster.dynamic().resources.get(api_version="v1", kind="Node")
    for name in names:
        nodes.delete(name=name)


def ready(obj: Obj | None) -> bool:
    """Whether the object's Ready condition is True."""
    return any(
        cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in ((obj or {}).get("status") or {}).get("conditions") or ()
    )


@dataclass
class ClaimTracker:
    """Watches claims: every Ready transition and every Sandbox each claim was bound to."""

    informer: Informer
    ready_transitions: Counter[str] = field(default_factory=Counter)
    bound_to: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    @classmethod
    def start(cls, api: ApiClient, namespace: str) -> ClaimTracker:
        """Start watching the claims of ``namespace``."""
        tracker = cls(Informer(api, SANDBOX_CLAIMS, namespace=namespace, retry_backoff=0.2))
        tracker.informer.add_event_handler(
            EventHandler(on_add=tracker._seen_new, on_update=tracker._seen)
        )
        tracker.informer.start()
        return tracker

    def _seen_new(self, new: Obj) -> None:
        self._seen(None, new)

    def _seen(self, old: Obj | None, new: Obj) -> None:
        name = new["metadata"]["name"]
        if ready(new) and not ready(old):
            self.ready_transitions[name] += 1
        bound = ((new.get("status") or {}).get("sandbox") or {}).get("name")
        if bound:
            self.bound_to[name].add(bound)

    def ready_count(self) -> int:
        """Claims whose cached state is Ready."""
        return sum(1 for obj in self.informer.iterate() if ready(obj))

    async def stop(self) -> None:
        """Stop watching."""
        await self.informer.stop()


def _reason(obj: Obj) -> str:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return f"{cond.get('status')}/{cond.get('reason')}"
    return "no Ready condition"


def _pod_state(pod: Obj | None) -> str:
    """A Pod's phase, and why it is not scheduled if it is not (e.g. "Too many pods")."""
    if pod is None:
        return "missing"
    status = pod.get("status") or {}
    state = str(status.get("phase") or "no phase")
    for cond in status.get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") != "True":
            state += f", unscheduled: {cond.get('reason')}: {str(cond.get('message'))[:120]}"
    return state


async def describe_unready(api: ApiClient, namespace: str, *, limit: int = 15) -> list[str]:
    """Why claims are not Ready: counts by Ready reason, and the Sandbox/Pod of a few of them.

    For the failure message of a burst that did not finish: tells a slow burst (claims still
    waiting their turn) from a stuck one (claims bound to a Sandbox that never got a Pod,
    claims with no Sandbox at all, conditions that never change).
    """
    claim_objs = (await api.list(SANDBOX_CLAIMS, namespace))["items"]
    sandboxes = {o["metadata"]["name"]: o for o in (await api.list(SANDBOXES, namespace))["items"]}
    pods = {o["metadata"]["name"]: o for o in (await api.list(PODS, namespace))["items"]}
    unready = [o for o in claim_objs if not ready(o)]
    reasons = Counter(_reason(o) for o in unready)
    lines = [
        f"{len(unready)} of {len(claim_objs)} claims not Ready; "
        f"{len(sandboxes)} sandboxes, {len(pods)} pods; by Ready reason: {dict(reasons)}"
    ]
    bound: Counter[str] = Counter()
    for obj in unready:
        target = ((obj.get("status") or {}).get("sandbox") or {}).get("name")
        sandbox = sandboxes.get(target or obj["metadata"]["name"])
        pod = pods.get((sandbox or {}).get("metadata", {}).get("name", ""))
        bound[
            f"status.sandbox={'set' if target else 'unset'}, sandbox "
            f"{'exists' if sandbox else 'missing'} ({_reason(sandbox) if sandbox else '-'}), "
            f"pod {_pod_state(pod)}"
        ] += 1
    lines += [f"  {n} x {what}" for what, n in bound.most_common()]
    for obj in unready[:limit]:
        name = obj["metadata"]["name"]
        target = ((obj.get("status") or {}).get("sandbox") or {}).get("name")
        sandbox = sandboxes.get(target or name)
        owner = _controller_owner(sandbox) if sandbox else None
        lines.append(
            f"  claim {name}: rv {obj['metadata'].get('resourceVersion')}, "
            f"annotations {obj['metadata'].get('annotations')}, status {obj.get('status')}; "
            f"sandbox {(sandbox or {}).get('metadata', {}).get('name')} owner "
            f"{(owner or {}).get('kind')}/{(owner or {}).get('name')} "
            f"status {(sandbox or {}).get('status')}"
        )
    return lines


def _controller_owner(obj: Obj) -> dict[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return None


async def check_namespace(
    api: ApiClient, namespace: str, *, claims: int, pool: str, pool_replicas: int
) -> list[str]:
    """Everything that must hold once the claims are served; returns the violations.

    Each claim Ready and bound to a Sandbox it controls, no Sandbox bound twice, every Sandbox
    controlled by an existing claim or the pool (no orphans), the pool's own Sandboxes not
    above its replicas, and exactly one Pod per Sandbox (none when suspended), each controlled
    by an existing Sandbox.
    """
    problems: list[str] = []
    claim_objs = (await api.list(SANDBOX_CLAIMS, namespace))["items"]
    sandboxes = (await api.list(SANDBOXES, namespace))["items"]
    pods = (await api.list(PODS, namespace))["items"]
    if len(claim_objs) != claims:
        problems.append(f"{len(claim_objs)} claims exist, expected {claims}")
    claim_uids = {o["metadata"]["uid"]: o["metadata"]["name"] for o in claim_objs}
    pool_objs = (await api.list(SANDBOX_WARM_POOLS, namespace))["items"]
    pool_uids = {o["metadata"]["uid"] for o in pool_objs if o["metadata"]["name"] == pool}
    by_name = {o["metadata"]["name"]: o for o in sandboxes}
    bound: Counter[str] = Counter()
    for obj in claim_objs:
        name = obj["metadata"]["name"]
        if not ready(obj):
            problems.append(f"claim {name} is not Ready")
        target = ((obj.get("status") or {}).get("sandbox") or {}).get("name")
        if not target:
            problems.append(f"claim {name} has no status.sandbox")
            continue
        bound[target] += 1
        sandbox = by_name.get(target)
        owner = _controller_owner(sandbox) if sandbox else None
        if owner is None or owner.get("uid") != obj["metadata"]["uid"]:
            problems.append(f"claim {name}: its sandbox {target} is not controlled by it")
    problems += [f"sandbox {s} is bound to {n} claims" for s, n in bound.items() if n > 1]
    in_pool = 0
    for sandbox in sandboxes:
        name = sandbox["metadata"]["name"]
        owner = _controller_owner(sandbox)
        if owner is None:
            problems.append(f"sandbox {name} has no controller (orphan)")
        elif owner.get("kind") == c.KIND_SANDBOX_CLAIM and owner.get("uid") in claim_uids:
            continue
        elif owner.get("kind") == c.KIND_SANDBOX_WARM_POOL and owner.get("uid") in pool_uids:
            in_pool += 1
        else:
            problems.append(f"sandbox {name} is controlled by a missing {owner.get('kind')}")
    if in_pool > pool_replicas:
        problems.append(f"the pool controls {in_pool} sandboxes, above its {pool_replicas}")
    pods_of: Counter[str] = Counter()
    sandbox_uids = {o["metadata"]["uid"] for o in sandboxes}
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        owner = _controller_owner(pod)
        if owner is None or owner.get("uid") not in sandbox_uids:
            problems.append(f"pod {pod['metadata']['name']} has no existing Sandbox controller")
            continue
        pods_of[owner["name"]] += 1
    for sandbox in sandboxes:
        name = sandbox["metadata"]["name"]
        if sandbox["metadata"].get("deletionTimestamp"):
            continue
        suspended = (sandbox.get("spec") or {}).get("operatingMode") == c.OPERATING_MODE_SUSPENDED
        wanted = 0 if suspended else 1
        if pods_of[name] != wanted:
            problems.append(f"sandbox {name} has {pods_of[name]} pods, expected {wanted}")
    return problems
