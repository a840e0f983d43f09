"""RBAC audit: every API call the controller makes is allowed by manifests/, and nothing more.

``agent-sandbox-controller --extensions`` runs as a ServiceAccount bound only to the generated
ClusterRoles of ``manifests/rbac`` (core and extensions) while the test drives templates, warm
pools, claims and Sandboxes (with a Service and a PVC, suspended and resumed) through their
lifecycle. The local apiserver audits every request of the service accounts of
``AUDITED_NAMESPACE`` (``audit.py``, Metadata level), where the controller's identity lives;
the test reads the controller's requests from that log and checks:

1. none was denied (no 403), and each ``(verb, group, resource/subresource, name)`` is allowed
   by a rule of ``manifests/rbac/**/*.generated.yaml``;
2. each ``(verb, group, resource)`` the rules grant was used, except the grants listed in
   :data:`NOT_EXERCISED` with the reason this run cannot reach them.

A new grant nobody uses, or a call the rules do not allow, fails here.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.testing.access import ClusterAccess, load_manifests
from kube_agent_sandbox.testing.audit import AUDITED_NAMESPACE
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess, wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[4]
RBAC_FILES = sorted((REPO / "manifests" / "rbac").rglob("*.generated.yaml"))
PAUSE = "registry.k8s.io/pause:3.10"

Grant = tuple[str, str, str]  # (verb, api group, resource[/subresource])

_EXT = "extensions.agents.x-k8s.io"
_OWNERS = (
    ("agents.x-k8s.io", "sandboxes"),
    (_EXT, "sandboxclaims"),
    (_EXT, "sandboxtemplates"),
    (_EXT, "sandboxwarmpools"),
)
_PARITY = (
    "kept from upstream's kubebuilder RBAC markers so the same manifests serve the Go "
    "controller and this one"
)
_WHY: dict[str, str] = {
    "webhook": "webhook certificate bootstrap (Secret, CRD caBundle patch): the webhook is off "
    "here because it would repoint the shared cluster's CRD conversion; test_webhook_conversion "
    "and the bootstrap unit tests cover it",
    "finalizers": "the OwnerReferencesPermissionEnforcement admission plugin requires update "
    "on <owner>/finalizers to set blockOwnerDeletion on a child: checked by admission, never a "
    f"request; get/patch are {_PARITY}",
    "update": f"this controller writes with merge patches only; update is {_PARITY}",
    "cached-get": "single reads come from the informer caches (list+watch); an uncached GET "
    f"is {_PARITY}",
    "gc-delete": "owned children are removed by the garbage collector through their "
    "ownerReferences when the owner goes; the controller deletes them itself only when the "
    "owner stops wanting them (a template's NetworkPolicy switched off, a PVC the Sandbox no "
    "longer lists), a path this run does not take",
    "events": "the recorder creates events.k8s.io/v1 Events; patch/update are for an event "
    "series (the same event repeated within the dedupe window) and core/v1 events are the "
    f"fallback of upstream's recorder, {_PARITY}",
    "parity": f"never requested by this implementation; {_PARITY}",
    "idle": "the idle reconciler runs only with the opt-in --idle-shutdown, which this run "
    "leaves off: it watches heartbeat Leases and reads PodMetrics for its CPU veto "
    "(test_idle_shutdown.py runs it under these rules)",
    "snapshots": "the SandboxSnapshot controller runs only with --snapshot-registry, which this "
    "run leaves off (test_snapshot_controller.py runs it under these rules, and its state keeper, "
    "which creates a snapshot per suspend, in test_snapshot_keepstate.py, and its reads of a "
    "commit's Node, for NodeLost, in test_snapshot_failures.py); a claim reads a snapshot only "
    "when it is annotated with one",
}
_GRANTS: dict[str, list[Grant]] = {
    "webhook": [
        ("create", "", "secrets"),
        ("get", "", "secrets"),
        ("get", "apiextensions.k8s.io", "customresourcedefinitions"),
        ("patch", "apiextensions.k8s.io", "customresourcedefinitions"),
    ],
    "finalizers": [
        (verb, group, f"{plural}/finalizers")
        for group, plural in _OWNERS
        for verb in ("get", "patch", "update")
    ],
    "update": [
        ("update", group, resource)
        for group, resource in (
            ("", "persistentvolumeclaims"),
            ("", "pods"),
            ("", "services"),
            ("agents.x-k8s.io", "sandboxes"),
            ("agents.x-k8s.io", "sandboxes/status"),
            (_EXT, "sandboxclaims"),
            (_EXT, "sandboxclaims/status"),
            (_EXT, "sandboxtemplates"),
            (_EXT, "sandboxwarmpools"),
            (_EXT, "sandboxwarmpools/status"),
            ("networking.k8s.io", "networkpolicies"),
        )
    ],
    "cached-get": [
        ("get", group, resource)
        for group, resource in (
            ("", "persistentvolumeclaims"),
            ("", "pods"),
            ("", "services"),
            ("agents.x-k8s.io", "sandboxes"),
            ("agents.x-k8s.io", "sandboxes/status"),
            (_EXT, "sandboxclaims"),
            (_EXT, "sandboxclaims/status"),
            (_EXT, "sandboxtemplates"),
            (_EXT, "sandboxwarmpools"),
            (_EXT, "sandboxwarmpools/status"),
            ("networking.k8s.io", "networkpolicies"),
        )
    ],
    "gc-delete": [
        ("delete", "", "persistentvolumeclaims"),
        ("delete", "networking.k8s.io", "networkpolicies"),
    ],
    "events": [
        ("create", "", "events"),
        ("patch", "", "events"),
        ("update", "", "events"),
        ("patch", "events.k8s.io", "events"),
        ("update", "events.k8s.io", "events"),
    ],
    "idle": [
        ("list", "coordination.k8s.io", "leases"),
        ("watch", "coordination.k8s.io", "leases"),
        ("get", "metrics.k8s.io", "pods"),
    ],
    "snapshots": [
        *(
            (verb, _EXT, "sandboxsnapshots")
            for verb in ("get", "list", "watch", "create", "patch", "update")
        ),
        *((verb, _EXT, "sandboxsnapshots/status") for verb in ("get", "patch", "update")),
        ("get", "", "nodes"),
    ],
    "parity": [
        ("patch", "", "persistentvolumeclaims"),
        ("patch", "", "services"),
        ("create", _EXT, "sandboxwarmpools"),
        ("delete", _EXT, "sandboxwarmpools"),
        ("patch", _EXT, "sandboxwarmpools"),
    ],
}
NOT_EXERCISED: dict[Grant, str] = {
    grant: _WHY[why] for why, grants in _GRANTS.items() for grant in grants
}
"""Grants this run does not use, each with the reason (each must still be granted by a rule)."""


def rbac_documents() -> list[dict[str, Any]]:
    """Every document of the generated RBAC files."""
    return [doc for path in RBAC_FILES for doc in load_manifests(path)]


def rules() -> list[dict[str, Any]]:
    """Every rule of the generated ClusterRoles and Roles."""
    found: list[dict[str, Any]] = []
    for doc in rbac_documents():
        if doc.get("kind") in ("ClusterRole", "Role"):
            found.extend(doc.get("rules") or ())
    return found


def allows(rule: dict[str, Any], verb: str, group: str, resource: str, name: str) -> bool:
    """Whether one RBAC rule allows the request (as the apiserver's RBAC authorizer decides)."""
    names = rule.get("resourceNames") or []
    return (
        (verb in rule.get("verbs", ()) or "*" in rule.get("verbs", ()))
        and (group in rule.get("apiGroups", ()) or "*" in rule.get("apiGroups", ()))
        and (resource in rule.get("resources", ()) or "*" in rule.get("resources", ()))
        and (not names or (name in names and verb not in ("create", "list", "watch")))
    )


def granted(all_rules: list[dict[str, Any]]) -> set[Grant]:
    """Every ``(verb, group, resource)`` some rule grants."""
    return {
        (verb, group, resource)
        for rule in all_rules
        for verb in rule.get("verbs", ())
        for group in rule.get("apiGroups", ())
        for resource in rule.get("resources", ())
    }


def denied_by_rbac(event: dict[str, Any]) -> bool:
    """A 403 that RBAC gave, not the NamespaceTerminating refusal (also a 403).

    The controller is cluster-wide, so it also reconciles Sandboxes that other tests left in
    namespaces being deleted; creating in such a namespace is refused with 403 and the message
    "... because it is being terminated", whatever the caller's rights.
    """
    status = event.get("responseStatus") or {}
    if status.get("code") != 403:
        return False
    causes = (status.get("details") or {}).get("causes") or []
    terminating = "being terminated" in str(status.get("message", "")) or any(
        isinstance(cause, dict) and cause.get("reason") == "NamespaceTerminating"
        for cause in causes
    )
    return not terminating


def audited_calls(log: Path, username: str) -> list[dict[str, Any]]:
    """The audit events (ResponseComplete stage) of one user."""
    events = []
    for line in log.read_text().splitlines():
        if username not in line:
            continue
        event = json.loads(line)
        if event["user"]["username"] == username and event["stage"] == "ResponseComplete":
            events.append(event)
    return events


def request_of(event: dict[str, Any]) -> tuple[str, str, str, str]:
    """``(verb, group, resource[/subresource], name)`` of an audited request."""
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", "")
    if ref.get("subresource"):
        resource = f"{resource}/{ref['subresource']}"
    return event["verb"], ref.get("apiGroup", ""), resource, ref.get("name", "")


class Driver:
    """kubectl-level steps of the lifecycle, in one namespace."""

    def __init__(self, cluster: ClusterAccess, namespace: str, process: ManagedProcess) -> None:
        """Bind to the cluster, namespace and the controller process (for liveness)."""
        self.cluster, self.namespace, self.process = cluster, namespace, process

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object, or None."""
        out = self.cluster.kubectl(
            "get", kind, name, "-n", self.namespace, "-o", "json", "--ignore-not-found"
        ).stdout
        return json.loads(out) if out.strip() else None

    def until(self, what: str, probe: Any) -> None:
        """Wait (bounded) for ``probe()`` to be truthy while the controller runs."""
        wait_until(probe, timeout=120, what=what, process=self.process)

    def condition(self, kind: str, name: str, type_: str, status: str) -> None:
        """Wait until the object's condition has the status."""

        def probe() -> bool:
            obj = self.get(kind, name) or {}
            return any(
                cond.get("type") == type_ and cond.get("status") == status
                for cond in (obj.get("status") or {}).get("conditions") or ()
            )

        self.until(f"{kind}/{name} {type_}={status}", probe)

    def patch(self, kind: str, name: str, patch: dict[str, Any]) -> None:
        """Merge-patch an object."""
        self.cluster.kubectl(
            "patch", kind, name, "-n", self.namespace, "--type=merge", "-p", json.dumps(patch)
        )

    def delete(self, kind: str, name: str) -> None:
        """Delete an object and wait until it is gone."""
        self.cluster.kubectl("delete", kind, name, "-n", self.namespace, "--wait=false")
        self.until(f"{kind}/{name} gone", lambda: self.get(kind, name) is None)


def drive_lifecycle(cluster: ClusterAccess, namespace: str, process: ManagedProcess) -> None:
    """Templates, pools, claims and Sandboxes through create, serve, suspend, resume, delete."""
    d = Driver(cluster, namespace, process)
    pod = {"spec": {"containers": [{"name": "agent", "image": PAUSE}]}}
    ext = c.EXTENSIONS_API_VERSION
    cluster.apply(
        [
            {
                "apiVersion": ext,
                "kind": c.KIND_SANDBOX_TEMPLATE,
                "metadata": {"name": "tpl", "namespace": namespace},
                "spec": {"podTemplate": pod},
            },
            {
                "apiVersion": ext,
                "kind": c.KIND_SANDBOX_WARM_POOL,
                "metadata": {"name": "pool", "namespace": namespace},
                "spec": {"replicas": 2, "sandboxTemplateRef": {"name": "tpl"}},
            },
        ]
    )
    d.until(
        "pool Ready",
        lambda: (
            ((d.get("sandboxwarmpool", "pool") or {}).get("status") or {}).get("readyReplicas") == 2
        ),
    )
    cluster.apply(
        {
            "apiVersion": ext,
            "kind": c.KIND_SANDBOX_CLAIM,
            "metadata": {"name": "claim", "namespace": namespace},
            "spec": {"warmPoolRef": {"name": "pool"}},
        }
    )
    d.condition("sandboxclaim", "claim", "Ready", "True")
    # a Sandbox of its own with a Service, suspended and resumed; one with a PVC (kwok has no
    # storage, so that one never gets Ready: its PVC is what is waited for)
    volume = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    cluster.apply(
        [
            {
                "apiVersion": c.SANDBOX_API_VERSION,
                "kind": c.KIND_SANDBOX,
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }
            for name, spec in (
                ("direct", {"podTemplate": pod, "service": True}),
                ("with-pvc", {"podTemplate": pod, "volumeClaimTemplates": [volume]}),
            )
        ]
    )
    d.until("the PVC of with-pvc", lambda: d.get("persistentvolumeclaim", "data-with-pvc"))
    d.condition("sandbox", "direct", "Ready", "True")
    d.patch("sandbox", "direct", {"spec": {"operatingMode": c.OPERATING_MODE_SUSPENDED}})
    d.condition("sandbox", "direct", "Suspended", "True")
    d.patch("sandbox", "direct", {"spec": {"operatingMode": c.OPERATING_MODE_RUNNING}})
    d.condition("sandbox", "direct", "Ready", "True")
    d.patch("sandbox", "direct", {"spec": {"service": False}})
    d.until("the Service of direct deleted", lambda: d.get("service", "direct") is None)
    # a claim that expires and is deleted by the controller (shutdownPolicy Delete)
    shutdown = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    cluster.apply(
        {
            "apiVersion": ext,
            "kind": c.KIND_SANDBOX_CLAIM,
            "metadata": {"name": "expiring", "namespace": namespace},
            "spec": {
                "warmPoolRef": {"name": "pool"},
                "lifecycle": {
                    "shutdownTime": shutdown.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "shutdownPolicy": "Delete",
                },
            },
        }
    )
    d.until("the expired claim deleted", lambda: d.get("sandboxclaim", "expiring") is None)
    # a template change rolls the pool; then everything is deleted
    d.patch(
        "sandboxtemplate", "tpl", {"spec": {"podTemplate": {"metadata": {"labels": {"v": "2"}}}}}
    )
    time.sleep(3)
    d.delete("sandbox", "direct")
    d.delete("sandbox", "with-pvc")
    d.delete("sandboxclaim", "claim")
    d.patch("sandboxwarmpool", "pool", {"spec": {"replicas": 0}})
    d.until(
        "pool scaled to 0",
        lambda: (
            not json.loads(
                cluster.kubectl("get", "sandboxes", "-n", namespace, "-o", "json").stdout
            )["items"]
        ),
    )
    d.delete("sandboxwarmpool", "pool")
    d.delete("sandboxtemplate", "tpl")


def test_controller_calls_match_generated_rbac(
    cluster: ClusterAccess,
    local_cluster: LocalCluster,
    controller_runner: ControllerRunner,
    namespace: str,
    tmp_path: Path,
) -> None:
    assert local_cluster.audit_log is not None, "the local cluster runs without an audit log"
    # the local apiserver audits the service accounts of AUDITED_NAMESPACE only
    identity = controller_runner.identity(
        "agent-sandbox-controller",
        namespace=AUDITED_NAMESPACE,
        cluster_roles=["agent-sandbox-controller", "agent-sandbox-controller-extensions"],
        rbac=[
            d
            for d in rbac_documents()
            if d.get("kind") == "ClusterRole"  # the Role is for the webhook's namespace
        ],
    )
    health = free_port()
    argv = [
        sys.executable,
        "-m",
        "kube_agent_sandbox.controller",
        "--kubeconfig={kubeconfig}",
        "--extensions",
        "--leader-elect=true",
        f"--leader-election-namespace={namespace}",
        "--enable-webhook=false",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{health}",
    ]
    process = controller_runner.start_command(argv, identity=identity, name="rbac-audit")

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=5) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    wait_until(ready, timeout=90, what="controller /readyz", process=process)
    drive_lifecycle(cluster, namespace, process)
    process.stop(grace=40)
    assert process.returncode == 0, process.log_tail()

    events = audited_calls(local_cluster.audit_log, identity.username)
    assert events, "no audited request of the controller"
    denied = [request_of(e) for e in events if denied_by_rbac(e)]
    assert not denied, f"requests denied by RBAC: {sorted(set(denied))}"

    all_rules = rules()
    calls = {request_of(e) for e in events if e.get("objectRef")}
    not_allowed = sorted(
        call for call in calls if not any(allows(rule, *call) for rule in all_rules)
    )
    assert not not_allowed, f"calls no generated rule allows: {not_allowed}"

    used = {(verb, group, resource) for verb, group, resource, _ in calls}
    grants = granted(all_rules)
    assert set(NOT_EXERCISED) <= grants, "an exception names a grant the rules do not give"
    unused = sorted(grants - used - set(NOT_EXERCISED))
    report = {"used": sorted(used), "unused": unused, "not_exercised": sorted(NOT_EXERCISED)}
    (tmp_path / "rbac-audit.json").write_text(json.dumps(report, indent=1))
    assert not unused, f"granted but never used (remove, or list in NOT_EXERCISED): {unused}"
