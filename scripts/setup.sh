#!/usr/bin/env bash
# Everything a fresh machine needs before `uv run nox`: system packages for the real-node
# cluster mode, uv, the locked Python environment, and the local cluster's binaries (built from
# Go modules into ~/.cache/agent-sandbox/testenv). Idempotent: a second run does almost nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# System packages: containerd/runc/CNI plugins run the real node; iptables and iproute2 its
# networking; debootstrap builds image root filesystems without a registry.
APT_PACKAGES=(containerd runc containernetworking-plugins iptables iproute2 debootstrap conntrack socat)
# Chromium (and a font for its screenshots): the web console's browser tests drive Debian's
# build through Playwright, which never downloads a browser here.
APT_PACKAGES+=(chromium fonts-dejavu-core)
# R (base R only; CRAN is out of reach): the code interpreter's R contexts, whose unit tests
# start a real Rscript and fail under CI=true without it.
APT_PACKAGES+=(r-base-core)
# CRIU's build dependencies: Debian 12's criu is too old for the real node's memory snapshots,
# so the testenv build compiles CRIU 4.2 (kube_agent_sandbox.testing.criu_build.BUILD_PACKAGES).
APT_PACKAGES+=(build-essential pkgconf libbsd-dev libcap-dev libgnutls28-dev libnet1-dev
  libnftables-dev libnl-3-dev libprotobuf-c-dev libprotobuf-dev protobuf-c-compiler
  protobuf-compiler python3-protobuf uuid-dev)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# Node.js and npm: the TypeScript MCP client's acceptance test (nox -s gateway-acceptance).
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing system packages (${missing[*]}): run as root or install them, then retry"
    exit 1
  fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The Debian package starts a system containerd; the harness runs its own, so stop the
  # service (by its unit, not by process name) when systemd manages it.
  if command -v systemctl >/dev/null && systemctl is-active --quiet containerd 2>/dev/null; then
    systemctl disable --now containerd >/dev/null 2>&1 || true
  fi
fi

if ! command -v go >/dev/null; then
  log "Go >= 1.25 is required to build the local cluster's binaries (https://go.dev/doc/install)"
  exit 1
fi

if ! command -v uv >/dev/null; then
  log "installing uv"
  # A Debian system Python refuses pip installs (PEP 668); uv is a single static binary, so
  # installing it beside the system packages is harmless there.
  python3 -m pip install --quiet --disable-pip-version-check "uv==0.13.8" 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "uv==0.13.8"
  if command -v pyenv >/dev/null; then pyenv rehash; fi
  export PATH="$HOME/.local/bin:$PATH"
fi

log "syncing the Python environment (uv.lock)"
uv sync --all-packages --all-groups --locked --quiet

# runc hands CRIU this file on every checkpoint and restore: close established TCP connections
# instead of refusing to checkpoint a container that has one (memory snapshots cannot keep them).
if [[ $(id -u) -eq 0 && ! -e /etc/criu/runc.conf ]]; then
  mkdir -p /etc/criu
  printf 'tcp-close\n' >/etc/criu/runc.conf
fi

log "building the local cluster's binaries (cold: ~12 min, warm: ~1 s)"
uv run --frozen --no-sync python -m kube_agent_sandbox.testing.build --with-node \
  --with-containerd2 --with-criu
log "ready: 'uv run nox -s demo' for the demo, 'uv run nox' for the tests"
