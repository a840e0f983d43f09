"""The kubelet of the real node: its configuration file and its command line.

The kubelet runs with the cgroupfs driver (these machines have no systemd and expose cgroup v1
hierarchies, which kubelet 1.35+ accepts only with ``failCgroupV1: false``), talks CRI to the
harness's containerd, keeps every file under its own root folder, and authenticates to the
apiserver as ``system:node:<name>`` with a client certificate from the cluster's CA. Its own
API (exec, logs, port-forward) serves on the node address with a certificate from the node's
CA, and admits only clients of that CA (the apiserver) after asking the apiserver to authorize
them, as a production node does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KubeletSettings:
    """Inputs of the kubelet configuration."""

    node_name: str
    node_ip: str
    port: int
    healthz_port: int
    runtime_endpoint: str
    root_dir: Path
    client_ca_file: Path
    tls_cert_file: Path
    tls_key_file: Path
    pod_cidr: str
    max_pods: int = 110


def render_kubelet_config(settings: KubeletSettings) -> dict[str, Any]:
    """The ``KubeletConfiguration`` (kubelet.config.k8s.io/v1beta1) document.

    Args:
        settings: Paths, ports and names for this node.

    Returns:
        The configuration as a dict, ready to dump as YAML.
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": settings.node_ip,
        "port": settings.port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": settings.healthz_port,
        "cgroupDriver": "cgroupfs",
        # These machines have cgroup v1 hierarchies (plus an unused cgroup2 mount).
        "failCgroupV1": False,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "containerRuntimeEndpoint": settings.runtime_endpoint,
        "imageServiceEndpoint": settings.runtime_endpoint,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(settings.client_ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(settings.tls_cert_file),
        "tlsPrivateKeyFile": str(settings.tls_key_file),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "failSwapOn": False,
        "podCIDR": settings.pod_cidr,
        "maxPods": settings.max_pods,
        # A test machine: never evict because a shared disk is fuller than a production
        # threshold, and never garbage-collect the imported images (nothing can re-pull them).
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "volumePluginDir": str(settings.root_dir / "volume-plugins"),
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "logging": {"format": "text"},
        "shutdownGracePeriod": "0s",
        "protectKernelDefaults": False,
    }


def kubelet_command(
    binary: Path,
    *,
    config_file: Path,
    kubeconfig: Path,
    settings: KubeletSettings,
    verbosity: int = 2,
) -> list[str]:
    """The kubelet's command line (everything else is in the configuration file).

    Args:
        binary: The kubelet binary.
        config_file: The written ``KubeletConfiguration``.
        kubeconfig: The node's kubeconfig (identity ``system:node:<name>``).
        settings: Names and folders of this node.
        verbosity: klog verbosity.

    Returns:
        The argv.
    """
    return [
        str(binary),
        f"--config={config_file}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={settings.root_dir}",
        f"--cert-dir={settings.root_dir / 'pki'}",
        f"--hostname-override={settings.node_name}",
        f"--node-ip={settings.node_ip}",
        "--node-labels=agent-sandbox.dev/real-node=true",
        f"--v={verbosity}",
    ]
