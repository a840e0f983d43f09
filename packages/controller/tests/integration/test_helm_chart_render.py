"""The Helm chart (charts/agent-sandbox) rendered by helm: lint, defaults and the variants.

``helm lint`` and ``helm template`` with the default values and the documented variants
(extensions on, ServiceMonitor/PrometheusRule on, two replicas, every typed flag set); the
rendered Deployment's arguments go through the controller's own flag parser.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from helm_chart_helpers import CHART, NAME, NAMESPACE, RELEASE, REPO, VARIANTS
from helm_chart_helpers import container as _container
from helm_chart_helpers import render as _render
from helm_chart_helpers import rules as _rules

from kube_agent_sandbox.controller import __version__, rbacgen
from kube_agent_sandbox.controller.config import parse_args, validate
from kube_agent_sandbox.controller.rbac import normalize_manifest_rules, normalize_rules
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.helm import Helm, parse_documents

pytestmark = pytest.mark.integration

# --- lint and default rendering -----------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint(helm: Helm, variant: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VARIANTS[variant]))
    result = helm.run("lint", "--strict", str(CHART), "--values", str(values), check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_chart_version_is_the_project_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == __version__


def test_defaults(helm: Helm) -> None:
    objects = _render(helm)
    assert set(objects) == {
        ("ServiceAccount", NAME),
        ("ClusterRole", NAME),
        ("ClusterRoleBinding", NAME),
        ("Role", NAME),
        ("RoleBinding", NAME),
        ("Role", f"{NAME}-leader-election"),
        ("RoleBinding", f"{NAME}-leader-election"),
        ("Service", "agent-sandbox-controller"),
        ("Service", "agent-sandbox-webhook-service"),
        ("Deployment", NAME),
        # the post-install/post-upgrade conversion check (hooks: helm template renders them)
        ("ServiceAccount", f"{NAME}-conversion-check"),
        ("Role", f"{NAME}-conversion-check"),
        ("RoleBinding", f"{NAME}-conversion-check"),
        ("Job", f"{NAME}-conversion-check"),
    }
    container = _container(objects)
    assert container["args"] == [
        "--leader-elect=true",
        "--webhook-service-name=agent-sandbox-webhook-service",
        f"--webhook-namespace={NAMESPACE}",
    ]
    options = parse_args(container["args"])
    assert options.leader_elect is True
    assert options.extensions is False
    assert validate(options) == []
    assert container["image"] == f"kube-agent-sandbox-controller:{__version__}"
    deployment = objects[("Deployment", NAME)]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["metadata"]["namespace"] == NAMESPACE
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    for service in ("agent-sandbox-controller", "agent-sandbox-webhook-service"):
        assert objects[("Service", service)]["spec"]["selector"] == selector
    assert objects[("Service", "agent-sandbox-controller")]["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert objects[("Service", "agent-sandbox-webhook-service")]["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]


def test_defaults_match_the_kustomize_deployment(helm: Helm, cluster: ClusterAccess) -> None:
    """Same image, ports, probes, resources and security settings as `kubectl apply -k`."""
    built = parse_documents(cluster.kubectl("kustomize", str(REPO / "manifests")).stdout)
    kustomize = next(d for d in built if d["kind"] == "Deployment")
    kustomize_pod = kustomize["spec"]["template"]["spec"]
    chart_pod = _render(helm)[("Deployment", NAME)]["spec"]["template"]["spec"]
    for key in ("securityContext", "terminationGracePeriodSeconds"):
        assert chart_pod[key] == kustomize_pod[key], key
    (theirs,) = kustomize_pod["containers"]
    (ours,) = chart_pod["containers"]
    for key in (
        "name",
        "image",
        "imagePullPolicy",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
    ):
        assert ours[key] == theirs[key], key
    tmp = next(v for v in chart_pod["volumes"] if v["name"] == "tmp")
    assert tmp == next(v for v in kustomize_pod["volumes"] if v["name"] == "tmp")


def test_rbac_comes_from_the_generated_files(helm: Helm) -> None:
    objects = _render(helm)
    cluster_role = normalize_manifest_rules(objects[("ClusterRole", NAME)]["rules"])
    assert cluster_role == normalize_rules(rbacgen.core_rules(leader_election=False))
    assert cluster_role == _rules(rbacgen.CHART_CONTROLLER_FILE)
    assert not [r for r in cluster_role if "leases" in r.resources]
    lease_role = objects[("Role", f"{NAME}-leader-election")]
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    assert normalize_manifest_rules(lease_role["rules"]) == _rules(
        rbacgen.CHART_LEADER_ELECTION_FILE
    )
    secret_role = objects[("Role", NAME)]
    assert normalize_manifest_rules(secret_role["rules"]) == _rules(rbacgen.CHART_WEBHOOK_FILE)
    subject = {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}
    for kind, name, role_kind in (
        ("ClusterRoleBinding", NAME, "ClusterRole"),
        ("RoleBinding", NAME, "Role"),
        ("RoleBinding", f"{NAME}-leader-election", "Role"),
    ):
        binding = objects[(kind, name)]
        assert binding["subjects"] == [subject]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": name,
        }


def test_crds_are_the_generated_ones(helm: Helm) -> None:
    text = helm.template(
        CHART, release=RELEASE, namespace=NAMESPACE, extra=["--include-crds"]
    ).stdout
    rendered = {
        d["metadata"]["name"]: d
        for d in parse_documents(text)
        if d["kind"] == "CustomResourceDefinition"
    }
    generated = {
        d["metadata"]["name"]: d
        for path in sorted((REPO / "manifests" / "crds").glob("*_*.yaml"))
        for d in parse_documents(path.read_text())
    }
    assert len(rendered) == 5
    assert rendered == generated


# --- variants ---------------------------------------------------------------------------------


def test_extensions_on(helm: Helm) -> None:
    objects = _render(helm, VARIANTS["extensions"])
    args = _container(objects)["args"]
    assert "--extensions" in args
    assert parse_args(args).extensions is True
    role = objects[("ClusterRole", f"{NAME}-extensions")]
    assert normalize_manifest_rules(role["rules"]) == rbacgen.extension_rules()
    assert normalize_manifest_rules(role["rules"]) == _rules(rbacgen.CHART_EXTENSIONS_FILE)
    binding = objects[("ClusterRoleBinding", f"{NAME}-extensions")]
    assert binding["roleRef"]["name"] == f"{NAME}-extensions"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    assert ("ClusterRole", f"{NAME}-extensions") not in _render(helm)


def test_snapshots_on_run_the_agent_with_its_generated_role(helm: Helm) -> None:
    values = {
        "controller": {"extensions": True},
        "snapshots": {
            "enabled": True,
            "registry": "https://registry.example:5000",
            "registrySecret": "snapshot-creds",
        },
    }
    objects = _render(helm, values)
    options = parse_args(_container(objects)["args"])
    assert options.snapshot_registry == "https://registry.example:5000"
    # The credentials are a mounted file in both pods: neither role may read Secrets.
    auth_file = "/etc/agent-sandbox/snapshot-registry/.dockerconfigjson"
    assert options.snapshot_registry_auth_file == auth_file
    controller_pod = objects[("Deployment", NAME)]["spec"]["template"]["spec"]
    assert {"name": "snapshot-registry", "secret": {"secretName": "snapshot-creds"}} in (
        controller_pod["volumes"]
    )
    assert {
        "name": "snapshot-registry",
        "mountPath": "/etc/agent-sandbox/snapshot-registry",
        "readOnly": True,
    } in _container(objects)["volumeMounts"]
    name = f"{NAME}-snapshotter"
    role = objects[("ClusterRole", name)]
    assert normalize_manifest_rules(role["rules"]) == _rules(
        "files/rbac/snapshotter.generated.yaml"
    )
    daemonset = objects[("DaemonSet", name)]
    (agent,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert "--snapshot-registry=https://registry.example:5000" in agent["args"]
    assert f"--snapshot-registry-auth-file={auth_file}" in agent["args"]
    assert {"name": "snapshot-registry", "secret": {"secretName": "snapshot-creds"}} in (
        daemonset["spec"]["template"]["spec"]["volumes"]
    )
    for rules in (role["rules"], objects[("ClusterRole", f"{NAME}-extensions")]["rules"]):
        assert not [r for r in rules if "secrets" in r["resources"]], rules
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == name
    assert ("DaemonSet", name) not in _render(helm, VARIANTS["extensions"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"snapshots": {"enabled": True, "registry": "https://r.example"}},
            "controller.extensions",
        ),
        (
            {"controller": {"extensions": True}, "snapshots": {"enabled": True}},
            "snapshots.registry",
        ),
    ],
)
def test_snapshots_need_extensions_and_a_registry(
    helm: Helm, values: dict[str, object], message: str, tmp_path: Path
) -> None:
    result = helm.template(CHART, release=RELEASE, namespace=NAMESPACE, values=values, check=False)
    assert result.returncode != 0
    assert message in result.stderr


def test_idle_shutdown_for_the_gateway(helm: Helm) -> None:
    args = _container(_render(helm, VARIANTS["gateway"]))["args"]
    assert parse_args(args).idle_shutdown is True
    assert parse_args(args).extensions is True
    assert "--idle-shutdown" not in _container(_render(helm, VARIANTS["extensions"]))["args"]
    # without the extension controllers there is nothing for it to act on: not passed
    alone = {"controller": {"idleShutdown": True}}
    assert "--idle-shutdown" not in _container(_render(helm, alone))["args"]


def test_service_monitor_and_prometheus_rule(helm: Helm) -> None:
    values = copy.deepcopy(VARIANTS["monitoring"])
    values["metrics"]["serviceMonitor"]["additionalLabels"] = {"release": "prom"}
    values["service"] = {"name": "sandbox-metrics"}
    objects = _render(helm, values)
    assert ("ServiceMonitor", NAME) not in _render(helm)
    monitor = objects[("ServiceMonitor", NAME)]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "30s"}
    ]
    service = objects[("Service", "sandbox-metrics")]
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()
    webhook = objects[("Service", "agent-sandbox-webhook-service")]
    assert not selected.items() <= webhook["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}

    group, shipped = objects[("PrometheusRule", NAME)]["spec"]["groups"]
    (alert,) = group["rules"]
    assert alert["alert"] == "AgentSandboxControllerMetricsTargetsDown"
    assert alert["for"] == "5m"
    assert alert["labels"] == {"severity": "warning"}
    assert alert["expr"] == f'absent(up{{namespace="{NAMESPACE}", service="sandbox-metrics"}} == 1)'
    # The shipped alerts are the plain rules file's, unchanged.
    plain = yaml.safe_load((REPO / "manifests" / "observability" / "alerts.rules.yaml").read_text())
    assert [shipped] == plain["groups"]
    assert [r["alert"] for r in shipped["rules"]] == [
        "AgentSandboxWarmPoolShort",
        "AgentSandboxClaimsNotReady",
        "AgentSandboxReconcileErrors",
        "AgentSandboxNoLeader",
        "AgentSandboxGatewayEnvFailures",
    ]


def test_shipped_alerts_can_be_left_out(helm: Helm) -> None:
    values = {"metrics": {"prometheusRule": {"enabled": True, "alerts": False}}}
    groups = _render(helm, values)[("PrometheusRule", NAME)]["spec"]["groups"]
    assert [g["name"] for g in groups] == ["agent-sandbox-controller"]


def test_dashboards_are_opt_in_configmaps_for_the_sidecar(helm: Helm) -> None:
    assert not [key for key in _render(helm) if key[0] == "ConfigMap"]
    values = {
        "metrics": {
            "dashboards": {
                "enabled": True,
                "namespace": "monitoring",
                "annotations": {"grafana_folder": "Agent Sandbox"},
            }
        }
    }
    maps = {key[1]: obj for key, obj in _render(helm, values).items() if key[0] == "ConfigMap"}
    shipped = sorted((REPO / "manifests" / "observability" / "dashboards").glob("*.json"))
    assert len(maps) == len(shipped) == 3
    for path in shipped:
        name = f"{NAME}-dashboard-{path.stem.removeprefix('agent-sandbox-')}"
        config_map = maps[name]
        assert config_map["metadata"]["namespace"] == "monitoring"
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "Agent Sandbox"}
        assert config_map["data"] == {path.name: path.read_text().rstrip("\n")}


def test_extra_rule_groups_are_appended(helm: Helm) -> None:
    extra = {"name": "mine", "rules": [{"record": "x:up", "expr": "sum(up)"}]}
    values = {"metrics": {"prometheusRule": {"enabled": True, "rules": [extra]}}}
    groups = _render(helm, values)[("PrometheusRule", NAME)]["spec"]["groups"]
    assert [g["name"] for g in groups] == ["agent-sandbox-controller", "agent-sandbox", "mine"]
    assert groups[2] == extra


def test_two_replicas_with_leader_election(helm: Helm) -> None:
    objects = _render(helm, {"replicaCount": 2, "controller": {"leaderElectionNamespace": "ops"}})
    assert objects[("Deployment", NAME)]["spec"]["replicas"] == 2
    args = _container(objects)["args"]
    assert "--leader-elect=true" in args
    assert "--leader-election-namespace=ops" in args
    options = parse_args(args)
    assert options.leader_elect is True
    assert options.leader_election_namespace == "ops"
    assert objects[("Role", f"{NAME}-leader-election")]["metadata"]["namespace"] == "ops"
    binding = objects[("RoleBinding", f"{NAME}-leader-election")]
    assert binding["metadata"]["namespace"] == "ops"
    assert binding["subjects"][0]["namespace"] == NAMESPACE


def test_leader_election_off_drops_the_lease_role(helm: Helm) -> None:
    objects = _render(helm, {"controller": {"leaderElect": False}})
    assert _container(objects)["args"][0] == "--leader-elect=false"
    assert parse_args(_container(objects)["args"]).leader_elect is False
    assert ("Role", f"{NAME}-leader-election") not in objects


def test_every_typed_flag_reaches_the_controller(helm: Helm) -> None:
    controller = {
        "clusterDomain": "corp.example",
        "kubeApiQps": 50.5,
        "kubeApiBurst": 100,
        "sandboxConcurrentWorkers": 20,
        "enableTracing": True,
        "enablePprof": True,
        "enablePprofDebug": False,
        "pprofBlockProfileRate": 1000000,
        "pprofMutexProfileFraction": 0,
        "sandboxClaimConcurrentWorkers": 7,
        "sandboxWarmPoolConcurrentWorkers": 2,
        "sandboxTemplateConcurrentWorkers": 3,
        "sandboxWarmPoolMaxBatchSize": 40,
        "enableWarmPoolEviction": False,
        "sandboxWarmPoolReadinessGracePeriod": "90s",
        "sandboxWarmPoolUnschedulableRecheckInterval": "1m30s",
        "extraArgs": ["--sandbox-write-behind-window=200ms", "--zap-log-level=debug"],
    }
    args = _container(_render(helm, {"controller": controller}))["args"]
    assert "--pprof-block-profile-rate=1000000" in args  # not 1e+06
    assert "--kube-api-qps=50.5" in args
    options = parse_args(args)
    assert validate(options) == []
    assert options.cluster_domain == "corp.example"
    assert options.kube_api_qps == 50.5
    assert options.kube_api_burst == 100
    assert options.sandbox_concurrent_workers == 20
    assert options.enable_tracing is True
    assert options.enable_pprof is True
    assert options.enable_pprof_debug is False
    assert options.pprof_block_profile_rate == 1000000
    assert options.pprof_mutex_profile_fraction == 0
    assert options.sandbox_claim_concurrent_workers == 7
    assert options.sandbox_warm_pool_concurrent_workers == 2
    assert options.sandbox_template_concurrent_workers == 3
    assert options.sandbox_warm_pool_max_batch_size == 40
    assert options.enable_warm_pool_eviction is False
    assert options.sandbox_warm_pool_readiness_grace_period == 90.0
    assert options.sandbox_warm_pool_unschedulable_recheck_interval == 90.0
    assert options.sandbox_write_behind_window == pytest.approx(0.2)
    assert args[-2:] == controller["extraArgs"]


def test_unset_flags_are_not_passed(helm: Helm) -> None:
    args = _container(_render(helm))["args"]
    assert not [a for a in args if "warm-pool" in a or "kube-api" in a or "pprof" in a]


def test_pod_placement_and_pull_settings(helm: Helm) -> None:
    values = {
        "image": {"repository": "registry.example/sandbox/controller", "tag": "v9"},
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "priorityClassName": "system-cluster-critical",
        "podAnnotations": {"a": "b"},
        "podLabels": {"team": "platform"},
        "podSecurityContext": {"runAsUser": 1000},
        # Maps merge with the defaults: null removes a default key.
        "resources": {"requests": {"cpu": "1", "memory": None}, "limits": None},
        "env": [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel:4317"}],
        "fullnameOverride": "sandboxes",
    }
    objects = _render(helm, values)
    deployment = objects[("Deployment", "sandboxes")]
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"a": "b"}
    assert pod["metadata"]["labels"]["team"] == "platform"
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"] == values["tolerations"]
    assert spec["affinity"] == values["affinity"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["runAsNonRoot"] is True  # merged with the defaults
    (container,) = spec["containers"]
    assert container["image"] == "registry.example/sandbox/controller:v9"
    assert container["resources"] == {"requests": {"cpu": "1"}}
    assert container["env"] == values["env"]
    assert ("ClusterRole", "sandboxes") in objects


def test_other_release_names_get_their_own_cluster_objects(helm: Helm) -> None:
    objects = _render(helm, release="sandbox-b")
    assert ("ClusterRole", "sandbox-b-agent-sandbox-controller") in objects
    assert ("Deployment", "sandbox-b-agent-sandbox-controller") in objects


# --- the conversion check hook -----------------------------------------------------------------


def test_install_and_upgrade_wait_until_the_api_server_converts(helm: Helm) -> None:
    """A Ready controller Pod is not enough: `helm install` succeeds once conversion works.

    CI saw a v1alpha1 read fail right after `helm install --wait` with "dial tcp
    <ClusterIP>:443: connect: connection refused": the webhook Service's endpoints and
    kube-proxy's rules follow the Pod's readiness. The hook Job runs after the release's
    resources are ready and retries a conversion through the API server until it works.
    """
    objects = _render(helm)
    name = f"{NAME}-conversion-check"
    hook_objects = [objects[(kind, name)] for kind in ("ServiceAccount", "Role", "RoleBinding")]
    job = objects[("Job", name)]
    weights = []
    for obj in [*hook_objects, job]:
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert obj["metadata"]["namespace"] == NAMESPACE
        weights.append(int(annotations["helm.sh/hook-weight"]))
    assert weights[-1] == max(weights)  # the Job after its account and permissions
    assert weights[-1] > weights[-2]
    # Only dry-run creates of Sandboxes, only in the release namespace.
    assert objects[("Role", name)]["rules"] == [
        {"apiGroups": ["agents.x-k8s.io"], "resources": ["sandboxes"], "verbs": ["create"]}
    ]
    binding = objects[("RoleBinding", name)]
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]

    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] > 300
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    assert pod["restartPolicy"] == "Never"
    controller_pod = objects[("Deployment", NAME)]["spec"]["template"]["spec"]
    assert pod["securityContext"] == controller_pod["securityContext"]
    (check,) = pod["containers"]
    (controller,) = controller_pod["containers"]
    assert check["image"] == controller["image"]
    assert check["securityContext"] == controller["securityContext"]
    assert check["command"] == [
        "python3",
        "-m",
        "kube_agent_sandbox.controller.webhook.check",
        f"--namespace={NAMESPACE}",
        "--timeout=300",
    ]
    # The hook's pods are not the controller's: no Service selects them.
    selector = objects[("Deployment", NAME)]["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()


def test_conversion_check_timeout_and_opt_out(helm: Helm) -> None:
    objects = _render(helm, {"conversionCheck": {"timeoutSeconds": 90}})
    job = objects[("Job", f"{NAME}-conversion-check")]
    (check,) = job["spec"]["template"]["spec"]["containers"]
    assert "--timeout=90" in check["command"]
    assert job["spec"]["activeDeadlineSeconds"] > 90
    off = _render(helm, {"conversionCheck": {"enabled": False}})
    assert not [key for key in off if key[1].endswith("-conversion-check")]


def test_conversion_check_name_fits_a_job_name(helm: Helm) -> None:
    objects = _render(helm, release="r" * 53)
    (job,) = [obj for (kind, _), obj in objects.items() if kind == "Job"]
    assert len(job["metadata"]["name"]) <= 63
