"""The Helm chart (charts/agent-sandbox) against a real API server: bad values, server-side apply.

The values schema refuses bad values before anything renders; then the rendering is applied
server-side to the local cluster and the ServiceAccount's permissions are checked with
SubjectAccessReviews.

The local cluster has no Prometheus Operator: the test installs minimal
``monitoring.coreos.com/v1`` ServiceMonitor and PrometheusRule CRDs (typed schemas of the fields
the chart uses, no preserve-unknown-fields), so an object the API server prunes shows up as a
difference between what was rendered and what was stored.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from helm_chart_helpers import CHART, LEASE, NAMESPACE, RELEASE, VARIANTS
from kubernetes import client

from kube_agent_sandbox.controller import rbacgen
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.helm import Helm, parse_documents

pytestmark = pytest.mark.integration

# --- bad values --------------------------------------------------------------------------------

BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    ("replicas-string", {"replicaCount": "two"}, "replicaCount"),
    ("replicas-negative", {"replicaCount": -1}, "replicaCount"),
    ("unknown-key", {"replicas": 2}, "replicas"),
    ("unknown-controller-key", {"controller": {"extension": True}}, "extension"),
    ("extensions-string", {"controller": {"extensions": "yes"}}, "extensions"),
    ("pull-policy", {"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ("burst-zero", {"controller": {"kubeApiBurst": 0}}, "kubeApiBurst"),
    (
        "workers-float",
        {"controller": {"sandboxConcurrentWorkers": 1.5}},
        "sandboxConcurrentWorkers",
    ),
    (
        "grace-not-a-duration",
        {"controller": {"sandboxWarmPoolReadinessGracePeriod": "5 minutes"}},
        "sandboxWarmPoolReadinessGracePeriod",
    ),
    (
        "grace-zero",
        {"controller": {"sandboxWarmPoolReadinessGracePeriod": "0s"}},
        "sandboxWarmPoolReadinessGracePeriod",
    ),
    (
        "recheck-number",
        {"controller": {"sandboxWarmPoolUnschedulableRecheckInterval": 60}},
        "sandboxWarmPoolUnschedulableRecheckInterval",
    ),
    ("extra-args-not-flags", {"controller": {"extraArgs": ["extensions"]}}, "extraArgs"),
    ("service-name", {"service": {"name": "Metrics_Service"}}, "service"),
    ("interval", {"metrics": {"serviceMonitor": {"interval": "often"}}}, "interval"),
    ("pull-secrets", {"imagePullSecrets": ["regcred"]}, "imagePullSecrets"),
    ("env-without-name", {"env": [{"value": "x"}]}, "env"),
]


@pytest.mark.parametrize(
    ("values", "where"),
    [pytest.param(v, w, id=i) for i, v, w in BAD_VALUES],
)
def test_schema_refuses_bad_values(helm: Helm, values: dict[str, Any], where: str) -> None:
    result = helm.template(CHART, release=RELEASE, namespace=NAMESPACE, values=values, check=False)
    assert result.returncode != 0, result.stdout
    assert "values don't meet the specifications of the schema" in result.stderr
    assert where in result.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"replicaCount": 3, "controller": {"leaderElect": False}},
            "replicaCount 3 needs controller.leaderElect=true",
            id="replicas-without-leader-election",
        ),
        pytest.param(
            {"service": {"name": "agent-sandbox-webhook-service"}},
            "need different names",
            id="service-names-collide",
        ),
    ],
)
def test_template_refuses_inconsistent_values(
    helm: Helm, values: dict[str, Any], message: str
) -> None:
    result = helm.template(CHART, release=RELEASE, namespace=NAMESPACE, values=values, check=False)
    assert result.returncode != 0, result.stdout
    assert message in result.stderr


# --- applied to the cluster -------------------------------------------------------------------


def _monitoring_crd(kind: str, plural: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": kind, "plural": plural, "listKind": f"{kind}List"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "properties": spec}},
                        }
                    },
                }
            ],
        },
    }


_STR = {"type": "string"}
_STR_MAP = {"type": "object", "additionalProperties": _STR}
MONITORING_CRDS = [
    _monitoring_crd(
        "ServiceMonitor",
        "servicemonitors",
        {
            "selector": {"type": "object", "properties": {"matchLabels": _STR_MAP}},
            "namespaceSelector": {
                "type": "object",
                "properties": {"matchNames": {"type": "array", "items": _STR}},
            },
            "endpoints": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": dict.fromkeys(
                        ("port", "path", "scheme", "interval", "scrapeTimeout"), _STR
                    ),
                },
            },
        },
    ),
    _monitoring_crd(
        "PrometheusRule",
        "prometheusrules",
        {
            "groups": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": _STR,
                        "rules": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "alert": _STR,
                                    "record": _STR,
                                    "expr": {"x-kubernetes-int-or-string": True},
                                    "for": _STR,
                                    "labels": _STR_MAP,
                                    "annotations": _STR_MAP,
                                },
                            },
                        },
                    },
                },
            }
        },
    ),
]


@pytest.fixture(scope="module")
def monitoring_crds(cluster: ClusterAccess) -> Iterator[None]:
    """Minimal ServiceMonitor/PrometheusRule CRDs for this module, removed afterwards."""
    names = cluster.install_crds(MONITORING_CRDS)
    try:
        yield
    finally:
        for name in names:
            cluster.kubectl("delete", "crd", name, "--wait=false", check=False)


def _allowed(
    api: client.ApiClient,
    account: tuple[str, str],
    *,
    namespace: str,
    group: str,
    resource: str,
    verb: str,
    name: str = "",
) -> bool:
    resource, _, subresource = resource.partition("/")
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{account[0]}:{account[1]}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{account[0]}"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace,
                group=group,
                resource=resource,
                subresource=subresource or None,
                verb=verb,
                name=name or None,
            ),
        )
    )
    result = client.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(result.status.allowed)


@pytest.mark.usefixtures("monitoring_crds")
def test_rendering_applies_server_side_and_grants_the_generated_rules(
    helm: Helm, cluster: ClusterAccess, namespace: str
) -> None:
    """A release of its own (cluster-scoped names must not meet other tests' ClusterRoles)."""
    release = f"chart-{namespace[-6:]}"
    name = f"{release}-agent-sandbox-controller"
    values = copy.deepcopy(VARIANTS["monitoring"])
    values["controller"] = {"extensions": True}
    values["replicaCount"] = 2
    rendered = helm.template(CHART, release=release, namespace=namespace, values=values).stdout
    expected = {(d["kind"], d["metadata"]["name"]): d for d in parse_documents(rendered)}
    assert ("ClusterRole", f"{name}-extensions") in expected
    try:
        result = cluster.kubectl(
            "apply", "--server-side", "--field-manager=helm-chart-test", "-f", "-", input=rendered
        )
        assert len(result.stdout.splitlines()) == len(expected), result.stdout
        cluster.kubectl(
            "-n", namespace, "wait", "--for=condition=Available", f"deployment/{name}",
            "--timeout=90s",
        )  # fmt: skip
        for kind in ("ServiceMonitor", "PrometheusRule"):
            stored = yaml.safe_load(
                cluster.kubectl("-n", namespace, "get", kind, name, "-o", "yaml").stdout
            )
            assert stored["spec"] == expected[(kind, name)]["spec"], f"{kind} fields were pruned"

        api = cluster.api_client()
        account = (namespace, name)
        granted = [
            *rbacgen.core_rules(leader_election=False),
            *rbacgen.extension_rules(),
        ]
        checked = 0
        for rule in granted:
            for group in rule.api_groups:
                for resource in rule.resources:
                    for verb in rule.verbs:
                        for object_name in rule.resource_names or ("",):
                            assert _allowed(
                                api, account, namespace=namespace, group=group,
                                resource=resource, verb=verb, name=object_name,
                            ), (group, resource, verb, object_name)  # fmt: skip
                            checked += 1
        assert checked > 20
        lease = {"group": "coordination.k8s.io", "resource": "leases"}
        secret = {"group": "", "resource": "secrets"}
        assert _allowed(api, account, namespace=namespace, verb="get", **lease, name=LEASE)
        # Lease writes only in the release namespace and only on the election Lease (the idle
        # reconciler reads heartbeat Leases everywhere, so reads are not confined).
        for verb, attrs in (
            ("create", lease),
            ("update", {**lease, "name": LEASE}),
            ("create", secret),
            ("get", {**secret, "name": "agent-sandbox-webhook-certs"}),
        ):
            assert _allowed(api, account, namespace=namespace, verb=verb, **attrs), (verb, attrs)
            # Only in the release namespace.
            assert not _allowed(api, account, namespace="default", verb=verb, **attrs)
        assert not _allowed(api, account, namespace=namespace, verb="update", **lease, name="x")
        assert not _allowed(api, account, namespace=namespace, verb="list", **secret)
    finally:
        cluster.kubectl(
            "delete", "clusterrole,clusterrolebinding", "-l",
            f"app.kubernetes.io/instance={release}", "--ignore-not-found", check=False,
        )  # fmt: skip
