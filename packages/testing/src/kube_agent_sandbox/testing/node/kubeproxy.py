"""kube-proxy for the real node: Service ClusterIPs routed with iptables.

Two paths need Services: the apiserver calling the controller's webhooks (through the webhook
Service's ClusterIP, from the host) and the in-cluster controller reaching the apiserver
(through the ``kubernetes`` Service). kube-proxy in iptables mode programs both. Its health and
metrics endpoints stay on loopback with free ports; it never changes conntrack limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KubeProxySettings:
    """Inputs of the kube-proxy configuration."""

    node_name: str
    kubeconfig: Path
    cluster_cidr: str
    healthz_port: int
    metrics_port: int


def render_kube_proxy_config(settings: KubeProxySettings) -> dict[str, Any]:
    """The ``KubeProxyConfiguration`` (kubeproxy.config.k8s.io/v1alpha1) document.

    Args:
        settings: Node name, kubeconfig, pod range and ports.

    Returns:
        The configuration as a dict, ready to dump as YAML.
    """
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(settings.kubeconfig)},
        "hostnameOverride": settings.node_name,
        "mode": "iptables",
        "clusterCIDR": settings.cluster_cidr,
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": f"127.0.0.1:{settings.healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{settings.metrics_port}",
        # 0 leaves the kernel's conntrack table size alone.
        "conntrack": {"maxPerCore": 0, "min": 0},
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "nodePortAddresses": [f"{settings.cluster_cidr}"],
    }


def kube_proxy_command(binary: Path, *, config_file: Path, verbosity: int = 2) -> list[str]:
    """kube-proxy's command line.

    Args:
        binary: The kube-proxy binary.
        config_file: The written configuration.
        verbosity: klog verbosity.

    Returns:
        The argv.
    """
    return [str(binary), f"--config={config_file}", f"--v={verbosity}"]


def kube_proxy_cleanup_command(binary: Path) -> list[str]:
    """The command that removes every iptables rule kube-proxy installed.

    Args:
        binary: The kube-proxy binary.

    Returns:
        The argv.
    """
    return [str(binary), "--cleanup"]
