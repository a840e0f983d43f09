"""Unit tests of the real node's generated configuration (no cluster, no root needed)."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path

import pytest

from kube_agent_sandbox.testing.node.cluster import normalize_image_reference
from kube_agent_sandbox.testing.node.containerd import (
    ALTERNATE_RUNTIME,
    ContainerdError,
    ContainerdLayout,
    ContainerdSettings,
    render_config,
)
from kube_agent_sandbox.testing.node.kubelet import (
    KubeletSettings,
    kubelet_command,
    render_kubelet_config,
)
from kube_agent_sandbox.testing.node.kubeproxy import KubeProxySettings, render_kube_proxy_config
from kube_agent_sandbox.testing.node.network import NetworkError, NodeNetwork
from kube_agent_sandbox.testing.node.storage import (
    STORAGE_CLASS,
    storage_class_manifest,
    volume_for_claim,
    wants_volume,
)


def test_containerd_config_keeps_every_path_under_the_work_folder(tmp_path: Path) -> None:
    layout = ContainerdLayout(tmp_path)
    settings = ContainerdSettings(
        sandbox_image="localhost/agent-sandbox/pause:abc",
        runtime_handlers={"runc": "/usr/sbin/runc", ALTERNATE_RUNTIME: "/x/runc-alt"},
        restrict_oom_score_adj=True,
    )
    config = tomllib.loads(render_config(layout, settings))

    assert config["root"] == str(tmp_path / "root")
    assert config["state"] == str(tmp_path / "state")
    assert config["grpc"]["address"] == str(tmp_path / "containerd.sock")
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "localhost/agent-sandbox/pause:abc"
    assert cri["restrict_oom_score_adj"] is True
    assert cri["cni"]["conf_dir"] == str(tmp_path / "cni" / "net.d")
    runtimes = cri["containerd"]["runtimes"]
    assert set(runtimes) == {"runc", ALTERNATE_RUNTIME}
    alternate = runtimes[ALTERNATE_RUNTIME]["options"]
    assert alternate == {
        "SystemdCgroup": False,
        "BinaryName": "/x/runc-alt",
        "Root": str(tmp_path / "runc"),
    }


def test_containerd_config_needs_the_default_runtime(tmp_path: Path) -> None:
    settings = ContainerdSettings(sandbox_image="p:1", runtime_handlers={"other": "runc"})
    with pytest.raises(ContainerdError, match="must include 'runc'"):
        render_config(ContainerdLayout(tmp_path), settings)


def test_containerd_config_escapes_paths_for_toml(tmp_path: Path) -> None:
    odd = tmp_path / 'quote"and\\slash'
    config = tomllib.loads(
        render_config(ContainerdLayout(odd), ContainerdSettings(sandbox_image="p:1"))
    )
    assert config["root"] == str(odd / "root")


def test_network_defaults_give_the_gateway_as_first_address() -> None:
    network = NodeNetwork()
    assert network.gateway == "10.213.0.1"
    assert ipaddress.ip_address(network.gateway) in ipaddress.ip_network(network.pod_cidr)


def test_cni_config_never_masquerades_and_allocates_inside_the_range(tmp_path: Path) -> None:
    network = NodeNetwork(bridge="br-test", pod_cidr="10.99.0.0/24")
    config = network.cni_config(ipam_data_dir=tmp_path)
    bridge = config["plugins"][0]
    assert bridge["type"] == "bridge"
    assert bridge["bridge"] == "br-test"
    assert bridge["ipMasq"] is False
    [[allocation]] = bridge["ipam"]["ranges"]
    subnet = ipaddress.ip_network(allocation["subnet"])
    assert allocation["gateway"] == "10.99.0.1"
    assert ipaddress.ip_address(allocation["rangeStart"]) in subnet
    assert ipaddress.ip_address(allocation["rangeEnd"]) in subnet
    assert bridge["ipam"]["dataDir"] == str(tmp_path)


def test_cni_config_file_is_written_as_a_conflist(tmp_path: Path) -> None:
    path = NodeNetwork().write_cni_config(tmp_path / "net.d", ipam_data_dir=tmp_path / "ipam")
    assert path.suffix == ".conflist"
    assert (tmp_path / "ipam").is_dir()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pod_cidr": "8.8.8.0/24"}, "private"),
        ({"pod_cidr": "fd00::/64"}, "IPv4"),
        ({"pod_cidr": "10.0.0.0/30"}, "at least 16"),
        ({"pod_cidr": "10.0.0.1/24"}, "host bits"),
        ({"bridge": "a-name-longer-than-15"}, "invalid bridge name"),
        ({"bridge": ""}, "invalid bridge name"),
    ],
)
def test_network_rejects_bad_settings(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises((NetworkError, ValueError), match=message):
        NodeNetwork(**kwargs)


def _kubelet_settings(tmp_path: Path) -> KubeletSettings:
    return KubeletSettings(
        node_name="n1",
        node_ip="10.213.0.1",
        port=10250,
        healthz_port=10248,
        runtime_endpoint="unix:///x/containerd.sock",
        root_dir=tmp_path / "kubelet",
        client_ca_file=tmp_path / "ca.crt",
        tls_cert_file=tmp_path / "tls.crt",
        tls_key_file=tmp_path / "tls.key",
        pod_cidr="10.213.0.0/24",
    )


def test_kubelet_config_runs_on_cgroup_v1_with_cgroupfs_and_no_anonymous_access(
    tmp_path: Path,
) -> None:
    config = render_kubelet_config(_kubelet_settings(tmp_path))
    assert config["kind"] == "KubeletConfiguration"
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["failCgroupV1"] is False
    assert config["containerRuntimeEndpoint"] == "unix:///x/containerd.sock"
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == str(tmp_path / "ca.crt")
    assert config["authorization"]["mode"] == "Webhook"
    assert config["address"] == "10.213.0.1"
    assert config["readOnlyPort"] == 0
    assert "staticPodPath" not in config


def test_kubelet_command_names_the_node_and_its_folders(tmp_path: Path) -> None:
    settings = _kubelet_settings(tmp_path)
    argv = kubelet_command(
        Path("/bin/kubelet"),
        config_file=tmp_path / "c.yaml",
        kubeconfig=tmp_path / "k",
        settings=settings,
    )
    assert argv[0] == "/bin/kubelet"
    assert f"--root-dir={tmp_path / 'kubelet'}" in argv
    assert "--hostname-override=n1" in argv
    assert "--node-ip=10.213.0.1" in argv


def test_kube_proxy_config_stays_on_loopback_and_leaves_conntrack_alone(tmp_path: Path) -> None:
    config = render_kube_proxy_config(
        KubeProxySettings(
            node_name="n1",
            kubeconfig=tmp_path / "k",
            cluster_cidr="10.213.0.0/24",
            healthz_port=1,
            metrics_port=2,
        )
    )
    assert config["mode"] == "iptables"
    assert config["healthzBindAddress"] == "127.0.0.1:1"
    assert config["metricsBindAddress"] == "127.0.0.1:2"
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["clusterCIDR"] == "10.213.0.0/24"


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (
            "kube-agent-sandbox-controller:0.1.0",
            "docker.io/library/kube-agent-sandbox-controller:0.1.0",
        ),
        ("busybox", "docker.io/library/busybox:latest"),
        ("org/app:1", "docker.io/org/app:1"),
        ("localhost/agent-sandbox/python:x", "localhost/agent-sandbox/python:x"),
        ("registry.example:5000/a/b", "registry.example:5000/a/b:latest"),
        ("ghcr.io/a/b@sha256:abc", "ghcr.io/a/b@sha256:abc"),
    ],
)
def test_image_references_are_normalised_like_the_runtime_does(image: str, expected: str) -> None:
    assert normalize_image_reference(image) == expected


def test_an_empty_image_reference_is_rejected() -> None:
    with pytest.raises(ValueError, match="empty"):
        normalize_image_reference("")


def _claim(**spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": "data-s1", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "storageClassName": STORAGE_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def test_a_volume_is_pre_bound_to_its_claim_and_pinned_to_the_node(tmp_path: Path) -> None:
    volume = volume_for_claim(
        _claim(), node_name="n1", base_dir=tmp_path, storage_class=STORAGE_CLASS
    )
    spec = volume["spec"]
    assert volume["metadata"]["name"] == "pvc-u-1"
    assert spec["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "ns",
        "name": "data-s1",
        "uid": "u-1",
    }
    assert spec["capacity"] == {"storage": "1Gi"}
    assert spec["hostPath"]["path"] == str(tmp_path / "u-1")
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"
    term = spec["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term["values"] == ["n1"]


def test_a_claim_without_a_storage_request_is_refused(tmp_path: Path) -> None:
    claim = _claim(resources={})
    with pytest.raises(ValueError, match="requests no storage"):
        volume_for_claim(claim, node_name="n1", base_dir=tmp_path, storage_class=STORAGE_CLASS)


def test_only_pending_unbound_claims_of_the_class_want_a_volume() -> None:
    assert wants_volume(_claim(), storage_class=STORAGE_CLASS)
    assert not wants_volume(_claim(storageClassName="other"), storage_class=STORAGE_CLASS)
    assert not wants_volume(_claim(volumeName="pv-1"), storage_class=STORAGE_CLASS)
    bound = _claim()
    bound["status"] = {"phase": "Bound"}
    assert not wants_volume(bound, storage_class=STORAGE_CLASS)


def test_the_storage_class_is_the_default_one() -> None:
    manifest = storage_class_manifest()
    annotations = manifest["metadata"]["annotations"]
    assert annotations["storageclass.kubernetes.io/is-default-class"] == "true"
    assert manifest["volumeBindingMode"] == "Immediate"
