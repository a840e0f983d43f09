"""Pinned versions of every component of the local test cluster, in one place.

The build (``build.py``) and the harness (``cluster.py``) both read these pins, so a bump here
rebuilds into a fresh cache directory and never mixes binaries of two versions.
"""

from __future__ import annotations

import os
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
# k8s.io/kubernetes pins its staging modules as v0.0.0 + local replaces; the published staging
# modules carry the same minor/patch with a v0 major.
KUBERNETES_STAGING_VERSION = "v0.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
# The Helm CLI, for the chart's tests (charts/agent-sandbox). Built from its Go module into the
# same directory; a bump rebuilds helm only (its version is checked, not part of the path).
HELM_VERSION = "v4.3.2"
HELM_MODULE = "helm.sh/helm/v4"
# Prometheus (and promtool), for the dashboards' and alert rules' tests. Prometheus v3.x.y is
# published as the Go module version v0.3xx.y; built like helm, its version checked, not in
# the path. The web UI's assets are not built in: the tests use the HTTP API only.
PROMETHEUS_VERSION = "v3.16.0"
PROMETHEUS_MODULE_VERSION = "v0.316.0"
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_BINARIES = ("prometheus", "promtool")

# An OpenTelemetry Collector for the tracing tests: the OTLP receiver (collector core) and the
# file exporter (collector-contrib), assembled from their Go modules by a few lines of Go (the
# core distribution otelcorecol has no file exporter and is not published as a module). A
# contrib release v0.N.x pairs with core v0.N.0 and the stable core modules v1.M.0.
OTELCOL_VERSION = "v0.165.1"
OTELCOL_CORE_VERSION = "v0.165.0"
OTELCOL_CORE_STABLE_VERSION = "v1.71.0"
OTELCOL_CONTRIB = "github.com/open-telemetry/opentelemetry-collector-contrib"

# The CNCF distribution registry (an OCI registry) for the snapshot tests: images are pushed to
# and pulled from it over the OCI distribution API, like from any registry an operator runs.
REGISTRY_VERSION = "v3.1.2"
REGISTRY_MODULE = "github.com/distribution/distribution/v3"

# containerd 2.x for the real node's checkpoint/restore spike (issue 20): the CRI plugin
# checkpoints a container (kubelet's checkpoint API) and restores one whose image is a
# checkpoint image. v2.3 is the last minor that restores through CRI CreateContainer (2.4
# removed it), so this pin must stay on 2.3.x. Built only with ``--with-containerd2``, into
# its own folder (``containerd2_bin_dir``), so the node's default containerd stays Debian's.
CONTAINERD2_VERSION = "v2.3.7"
CONTAINERD2_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD2_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")

# CRIU for the checkpoint/restore node, built from Debian's source tarball (``--with-criu``):
# Debian 12's 3.17 fails ``criu check`` on current kernels, and 4.1 cannot dump a process with
# an inet socket on Linux 6.16 and later. The tarball is pinned by its SHA-256 (Debian's .dsc).
CRIU_VERSION = "4.2.1"
CRIU_SOURCE_URL = f"https://deb.debian.org/debian/pool/main/c/criu/criu_{CRIU_VERSION}.orig.tar.xz"
CRIU_SOURCE_SHA256 = "29ec0ee09e296479fe7048c80980e8ef1d0684d0b0204c2b101dfea19f6725b9"

KUBERNETES_BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
)
# Built only for the real-node mode of the local cluster.
NODE_BINARIES = ("kubelet", "kube-proxy")


def cache_root() -> Path:
    """Directory that holds built binaries, outside the repository."""
    override = os.environ.get("AGENT_SANDBOX_TESTENV_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "agent-sandbox" / "testenv"


def bin_dir() -> Path:
    """Directory of the binaries for the pinned versions."""
    return (
        cache_root() / f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}" / "bin"
    )


def containerd2_bin_dir() -> Path:
    """Directory of the containerd 2.x binaries (``RealNodeOptions.containerd_bin_dir``)."""
    return cache_root() / f"containerd-{CONTAINERD2_VERSION}" / "bin"


def criu_bin_dir() -> Path:
    """Directory of the built ``criu`` (``RealNodeOptions.criu_bin_dir``)."""
    return cache_root() / f"criu-{CRIU_VERSION}" / "bin"
