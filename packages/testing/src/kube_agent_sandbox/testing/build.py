"""Build the local test cluster's binaries from Go modules into a cache outside the repository.

There is no container engine or release download on the machines that test this project, but
the Go module proxy is reachable, so etcd, the Kubernetes components, kwok, (for the Helm
chart's tests) helm and (for the dashboards' and alerts' tests) Prometheus are compiled from
their modules at the versions pinned in ``versions.py``.
The build is idempotent: a binary that is present and reports the pinned version is never
rebuilt.

The CNCF distribution registry (the snapshot tests' OCI registry) is built with the rest; an
OpenTelemetry Collector (the tracing tests' trace receiver) only with ``--with-otelcol``;
containerd 2.x (the real node's checkpoint/restore option) only with ``--with-containerd2``;
CRIU (from Debian's source tarball, for that node) only with ``--with-criu``.

Usage: ``python -m kube_agent_sandbox.testing.build [--with-node] [--with-helm]
[--with-prometheus] [--with-otelcol] [--with-containerd2] [--with-criu] [--only helm]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.criu_build import CriuBuildError, build_criu


class BuildError(RuntimeError):
    """A component could not be built or does not report the pinned version."""


def _log(message: str) -> None:
    print(f"[testenv-build {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("Go is required to build the test cluster's binaries; install Go >= 1.25")
    return go


def _run_go(args: Sequence[str], *, cwd: Path, env: dict[str, str], what: str) -> None:
    """Run a go command, printing a progress line every 100 packages and every 60 seconds."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [_go(), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    count = 0
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(60):
            _log(f"{what}: still building, {count} packages, {time.monotonic() - started:.0f}s")

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        for line in proc.stdout:
            count += 1
            lines.append(line.rstrip())
            if count % 100 == 0:
                _log(f"{what}: {count} packages, {time.monotonic() - started:.0f}s")
        rc = proc.wait()
    finally:
        stop.set()
    if rc != 0:
        tail = "\n".join(lines[-40:])
        raise BuildError(f"{what} failed (go {' '.join(args[:2])} exit {rc}):\n{tail}")
    _log(f"{what}: done in {time.monotonic() - started:.0f}s")


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    env["GOFLAGS"] = "-mod=mod"
    env.setdefault("GOTOOLCHAIN", "local")
    return env


def _version_output(binary: Path) -> str:
    # etcd, kwok, prometheus and promtool take --version; the Kubernetes binaries take
    # --version too, but kubectl wants `version --client` and helm `version`.
    args = {
        "kubectl": ["version", "--client"],
        "helm": ["version"],
        "containerd-shim-runc-v2": ["-v"],
    }.get(binary.name, ["--version"])
    try:
        out = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return ""
    return out.stdout + out.stderr


def _has_version(binary: Path, version: str) -> bool:
    return binary.is_file() and version.lstrip("v") in _version_output(binary)


def _staging_replaces(kubernetes_gomod: Path) -> list[str]:
    """Module paths that k8s.io/kubernetes requires at v0.0.0 (its in-tree staging modules)."""
    text = kubernetes_gomod.read_text()
    return sorted(set(re.findall(r"^\s*(k8s\.io/[\w.\-/]+) v0\.0\.0\s*$", text, re.MULTILINE)))


def _ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{key}={value}" for key, value in stamp.items()]
    return " ".join(flags)


def build_kubernetes(bin_dir: Path, names: Sequence[str]) -> None:
    """Build Kubernetes commands through a throwaway module that replaces the staging modules."""
    missing = [n for n in names if not _has_version(bin_dir / n, versions.KUBERNETES_VERSION)]
    if not missing:
        _log(f"kubernetes {versions.KUBERNETES_VERSION}: {', '.join(names)} present")
        return
    env = _go_env()
    with tempfile.TemporaryDirectory(prefix="k8s-build-") as tmp:
        work = Path(tmp)
        _run_go(["mod", "init", "agent-sandbox.testenv/k8s"], cwd=work, env=env, what="go mod")
        info = subprocess.run(
            [_go(), "mod", "download", "-json", f"k8s.io/kubernetes@{versions.KUBERNETES_VERSION}"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if info.returncode != 0:
            raise BuildError(f"cannot download k8s.io/kubernetes: {info.stdout}{info.stderr}")
        gomod = Path(json.loads(info.stdout)["GoMod"])
        edits = [f"-require=k8s.io/kubernetes@{versions.KUBERNETES_VERSION}"]
        edits += [
            f"-replace={m}={m}@{versions.KUBERNETES_STAGING_VERSION}"
            for m in _staging_replaces(gomod)
        ]
        _run_go(["mod", "edit", *edits], cwd=work, env=env, what="go mod edit")
        packages = [f"k8s.io/kubernetes/cmd/{n}" for n in missing]
        _log(f"building {', '.join(missing)} {versions.KUBERNETES_VERSION} (cold: 15-30 min)")
        _run_go(
            [
                "build",
                "-v",
                "-trimpath",
                "-tags",
                "selinux,notest",
                "-ldflags",
                _ldflags(versions.KUBERNETES_VERSION),
                "-o",
                str(bin_dir) + "/",
                *packages,
            ],
            cwd=work,
            env=env,
            what="kubernetes",
        )


def build_etcd(bin_dir: Path) -> None:
    """Build the etcd server; its go.mod has replace directives, so not via `go install`."""
    if _has_version(bin_dir / "etcd", versions.ETCD_VERSION):
        _log(f"etcd {versions.ETCD_VERSION} present")
        return
    env = _go_env()
    with tempfile.TemporaryDirectory(prefix="etcd-build-") as tmp:
        work = Path(tmp)
        _run_go(["mod", "init", "agent-sandbox.testenv/etcd"], cwd=work, env=env, what="go mod")
        _run_go(
            ["mod", "edit", f"-require=go.etcd.io/etcd/server/v3@{versions.ETCD_VERSION}"],
            cwd=work,
            env=env,
            what="go mod edit",
        )
        _run_go(
            [
                "build",
                "-v",
                "-trimpath",
                "-ldflags",
                "-s -w",
                "-o",
                str(bin_dir / "etcd"),
                "go.etcd.io/etcd/server/v3",
            ],
            cwd=work,
            env=env,
            what="etcd",
        )


def build_kwok(bin_dir: Path) -> None:
    """Install kwok, whose module has no replace directives."""
    if _has_version(bin_dir / "kwok", versions.KWOK_VERSION):
        _log(f"kwok {versions.KWOK_VERSION} present")
        return
    env = _go_env()
    env["GOBIN"] = str(bin_dir)
    env.pop("GOFLAGS", None)
    _run_go(
        ["install", "-v", "-trimpath", f"sigs.k8s.io/kwok/cmd/kwok@{versions.KWOK_VERSION}"],
        cwd=bin_dir,
        env=env,
        what="kwok",
    )


def build_helm(bin_dir: Path) -> None:
    """Install the helm CLI (no replace directives), stamping the pinned version into it.

    Without the stamp a module build reports only ``<major>.<minor>`` as its version.
    """
    if _has_version(bin_dir / "helm", versions.HELM_VERSION):
        _log(f"helm {versions.HELM_VERSION} present")
        return
    env = _go_env()
    env["GOBIN"] = str(bin_dir)
    env.pop("GOFLAGS", None)
    stamp = f"-s -w -X {versions.HELM_MODULE}/internal/version.version={versions.HELM_VERSION}"
    _run_go(
        [
            "install",
            "-v",
            "-trimpath",
            "-ldflags",
            stamp,
            f"{versions.HELM_MODULE}/cmd/helm@{versions.HELM_VERSION}",
        ],
        cwd=bin_dir,
        env=env,
        what="helm",
    )
    if not _has_version(bin_dir / "helm", versions.HELM_VERSION):
        raise BuildError(f"{bin_dir / 'helm'} does not report version {versions.HELM_VERSION}")


def build_prometheus(bin_dir: Path) -> None:
    """Install prometheus and promtool, stamping the pinned version into them.

    A module build reports no version otherwise; ``-mod=mod`` is dropped because ``go install
    pkg@version`` resolves the module's own go.mod.
    """
    wanted = versions.PROMETHEUS_VERSION
    if all(_has_version(bin_dir / n, wanted) for n in versions.PROMETHEUS_BINARIES):
        _log(f"prometheus {wanted} present")
        return
    env = _go_env()
    env["GOBIN"] = str(bin_dir)
    env.pop("GOFLAGS", None)
    stamp = f"-s -w -X github.com/prometheus/common/version.Version={wanted.lstrip('v')}"
    packages = [
        f"{versions.PROMETHEUS_MODULE}/cmd/{n}@{versions.PROMETHEUS_MODULE_VERSION}"
        for n in versions.PROMETHEUS_BINARIES
    ]
    _log(f"building prometheus, promtool {wanted} (cold: ~6 min on 2 cores)")
    _run_go(
        ["install", "-v", "-trimpath", "-ldflags", stamp, *packages],
        cwd=bin_dir,
        env=env,
        what="prometheus",
    )
    for name in versions.PROMETHEUS_BINARIES:
        if not _has_version(bin_dir / name, wanted):
            raise BuildError(f"{bin_dir / name} does not report version {wanted}")


# bcrypt is the only hash the registry's htpasswd authentication accepts; Python's standard
# library has none, so a few lines of Go (golang.org/x/crypto, already in the registry's module
# graph) write the entry: the password comes on stdin, ``user:hash`` goes to stdout.
_HTPASSWD_MAIN = """package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: registry-htpasswd USER < password")
		os.Exit(2)
	}
	password, err := bufio.NewReader(os.Stdin).ReadString('\\n')
	if err != nil && password == "" {
		fmt.Fprintln(os.Stderr, "no password on stdin")
		os.Exit(2)
	}
	secret := []byte(strings.TrimRight(password, "\\n"))
	hash, err := bcrypt.GenerateFromPassword(secret, bcrypt.DefaultCost)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s:%s\\n", os.Args[1], hash)
}
"""


def build_registry(bin_dir: Path) -> None:
    """Build the distribution registry and its htpasswd helper through one throwaway module."""
    helper = bin_dir / "registry-htpasswd"
    if _has_version(bin_dir / "registry", versions.REGISTRY_VERSION) and helper.is_file():
        _log(f"registry {versions.REGISTRY_VERSION} present")
        return
    env = _go_env()
    with tempfile.TemporaryDirectory(prefix="registry-build-") as tmp:
        work = Path(tmp)
        _run_go(["mod", "init", "agent-sandbox.testenv/registry"], cwd=work, env=env, what="go mod")
        require = f"-require={versions.REGISTRY_MODULE}@{versions.REGISTRY_VERSION}"
        _run_go(["mod", "edit", require], cwd=work, env=env, what="go mod edit")
        (work / "htpasswd").mkdir()
        (work / "htpasswd" / "main.go").write_text(_HTPASSWD_MAIN)
        # The registry's go.mod lists x/crypto, so the helper builds at that same version.
        _run_go(["mod", "tidy"], cwd=work, env=env, what="go mod tidy")
        stamp = f"-s -w -X {versions.REGISTRY_MODULE}/version.version={versions.REGISTRY_VERSION}"
        _run_go(
            [
                "build",
                "-v",
                "-trimpath",
                "-ldflags",
                stamp,
                "-o",
                str(bin_dir / "registry"),
                f"{versions.REGISTRY_MODULE}/cmd/registry",
            ],
            cwd=work,
            env=env,
            what="registry",
        )
        _run_go(
            ["build", "-trimpath", "-o", str(helper), "./htpasswd"],
            cwd=work,
            env=env,
            what="registry-htpasswd",
        )
    if not _has_version(bin_dir / "registry", versions.REGISTRY_VERSION):
        raise BuildError(f"{bin_dir / 'registry'} does not report {versions.REGISTRY_VERSION}")


# The collector's main package, as the OpenTelemetry Collector Builder would generate it for a
# manifest of one receiver (otlp) and one exporter (file).
_OTELCOL_MAIN = """package main

import (
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	return factories, nil
}

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol",
			Description: "OTLP receiver and file exporter (Agent Sandbox testenv)",
			Version:     "%(version)s",
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					envprovider.NewFactory(),
					fileprovider.NewFactory(),
				},
				DefaultScheme: "env",
			},
		},
	}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		log.Fatal(err)
	}
}
"""


def build_otelcol(bin_dir: Path) -> None:
    """Build the OpenTelemetry Collector (OTLP receiver, file exporter) through a throwaway
    module. Cold: about 2 min on 2 cores (about 950 packages)."""
    wanted = versions.OTELCOL_VERSION
    if _has_version(bin_dir / "otelcol", wanted):
        _log(f"otelcol {wanted} present")
        return
    env = _go_env()
    with tempfile.TemporaryDirectory(prefix="otelcol-build-") as tmp:
        work = Path(tmp)
        _run_go(["mod", "init", "agent-sandbox.testenv/otelcol"], cwd=work, env=env, what="go mod")
        core = "go.opentelemetry.io/collector"
        requires = [
            f"-require={versions.OTELCOL_CONTRIB}/exporter/fileexporter@{wanted}",
            f"-require={core}/otelcol@{versions.OTELCOL_CORE_VERSION}",
            f"-require={core}/receiver/otlpreceiver@{versions.OTELCOL_CORE_VERSION}",
            f"-require={core}/confmap/provider/envprovider@{versions.OTELCOL_CORE_STABLE_VERSION}",
            f"-require={core}/confmap/provider/fileprovider@{versions.OTELCOL_CORE_STABLE_VERSION}",
        ]
        _run_go(["mod", "edit", *requires], cwd=work, env=env, what="go mod edit")
        (work / "main.go").write_text(_OTELCOL_MAIN % {"version": wanted.lstrip("v")})
        # No `go mod tidy`: it would fetch the components' test-only modules; -mod=mod adds
        # just what the build imports.
        _log(f"building otelcol {wanted} (cold: ~2 min on 2 cores)")
        _run_go(
            ["build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(bin_dir / "otelcol"), "."],
            cwd=work,
            env=env,
            what="otelcol",
        )
    if not _has_version(bin_dir / "otelcol", wanted):
        raise BuildError(f"{bin_dir / 'otelcol'} does not report version {wanted}")


def build_containerd2(bin_dir: Path) -> None:
    """Install containerd 2.x, its runc shim and ctr (the pinned version stamped in).

    Opt-in (``--with-containerd2``) and kept in its own folder: the real node runs it only
    when ``RealNodeOptions.containerd_bin_dir`` names that folder. btrfs support is left out
    (it needs C headers; the node uses overlayfs). Cold: about 3 min on 2 cores.
    """
    wanted = versions.CONTAINERD2_VERSION
    if all(_has_version(bin_dir / n, wanted) for n in versions.CONTAINERD2_BINARIES):
        _log(f"containerd {wanted} present")
        return
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = _go_env()
    env["GOBIN"] = str(bin_dir)
    env.pop("GOFLAGS", None)
    module = versions.CONTAINERD2_MODULE
    stamp = f"-s -w -X {module}/version.Version={wanted} -X {module}/version.Package={module}"
    _log(f"building containerd {wanted} (cold: ~3 min on 2 cores)")
    _run_go(
        [
            "install",
            "-v",
            "-trimpath",
            "-tags",
            "no_btrfs",
            "-ldflags",
            stamp,
            *(f"{module}/cmd/{name}@{wanted}" for name in versions.CONTAINERD2_BINARIES),
        ],
        cwd=bin_dir,
        env=env,
        what="containerd",
    )
    for name in versions.CONTAINERD2_BINARIES:
        if not _has_version(bin_dir / name, wanted):
            raise BuildError(f"{bin_dir / name} does not report version {wanted}")


def kwok_stage_dir() -> Path:
    """kwok's stock Stage definitions, read from the Go module cache (never copied)."""
    modcache = subprocess.run(
        [_go(), "env", "GOMODCACHE"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return Path(modcache) / f"sigs.k8s.io/kwok@{versions.KWOK_VERSION}" / "kustomize" / "stage"


COMPONENTS = (
    "etcd",
    "kwok",
    "kubernetes",
    "helm",
    "prometheus",
    "registry",
    "otelcol",
    "containerd2",
    "criu",
)
"""What ``--only`` can select."""


def build_only(names: Sequence[str], *, with_node: bool = False) -> Path:
    """Build just the named components (see :data:`COMPONENTS`) and return the binary directory.

    Raises:
        BuildError: a name is not a component, or a build fails.
    """
    unknown = sorted(set(names) - set(COMPONENTS))
    if unknown:
        raise BuildError(f"unknown component(s) {', '.join(unknown)}; choose from {COMPONENTS}")
    bin_dir = versions.bin_dir()
    bin_dir.mkdir(parents=True, exist_ok=True)
    if "etcd" in names:
        build_etcd(bin_dir)
    if "kwok" in names:
        build_kwok(bin_dir)
    if "kubernetes" in names:
        extra = list(versions.NODE_BINARIES) if with_node else []
        build_kubernetes(bin_dir, [*versions.KUBERNETES_BINARIES, *extra])
    if "helm" in names:
        build_helm(bin_dir)
    if "prometheus" in names:
        build_prometheus(bin_dir)
    if "registry" in names:
        build_registry(bin_dir)
    if "otelcol" in names:
        build_otelcol(bin_dir)
    if "containerd2" in names:
        build_containerd2(versions.containerd2_bin_dir())
    if "criu" in names:
        build_criu(versions.criu_bin_dir())
    return bin_dir


def build_all(
    *,
    with_node: bool,
    with_helm: bool = False,
    with_prometheus: bool = False,
    with_otelcol: bool = False,
    with_containerd2: bool = False,
    with_criu: bool = False,
) -> Path:
    """Build everything that is missing and return the binary directory."""
    bin_dir = versions.bin_dir()
    bin_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if with_helm:
        build_helm(bin_dir)
    if with_prometheus:
        build_prometheus(bin_dir)
    if with_otelcol:
        build_otelcol(bin_dir)
    if with_containerd2:
        build_containerd2(versions.containerd2_bin_dir())
    if with_criu:
        build_criu(versions.criu_bin_dir())
    build_etcd(bin_dir)
    build_kwok(bin_dir)
    names = list(versions.KUBERNETES_BINARIES)
    if with_node:
        names += versions.NODE_BINARIES
    build_kubernetes(bin_dir, names)
    build_registry(bin_dir)
    for name in ["etcd", "kwok", *names]:
        expected = {"etcd": versions.ETCD_VERSION, "kwok": versions.KWOK_VERSION}.get(
            name, versions.KUBERNETES_VERSION
        )
        if not _has_version(bin_dir / name, expected):
            raise BuildError(f"{bin_dir / name} does not report version {expected}")
    _log(f"all binaries ready in {bin_dir} ({time.monotonic() - started:.0f}s)")
    return bin_dir


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--with-node", action="store_true", help="also build kubelet and kube-proxy"
    )
    parser.add_argument(
        "--with-helm", action="store_true", help="also build helm (the Helm chart's tests)"
    )
    parser.add_argument(
        "--with-prometheus",
        action="store_true",
        help="also build prometheus and promtool (the dashboards' and alerts' tests)",
    )
    parser.add_argument(
        "--with-otelcol",
        action="store_true",
        help="also build an OpenTelemetry Collector (the tracing tests' trace receiver)",
    )
    parser.add_argument(
        "--with-containerd2",
        action="store_true",
        help="also build containerd 2.x, its runc shim and ctr (the checkpoint/restore node)",
    )
    parser.add_argument(
        "--with-criu",
        action="store_true",
        help="also build CRIU from Debian's source tarball (the checkpoint/restore node)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=COMPONENTS,
        default=None,
        help="build only this component (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        if args.only:
            build_only(args.only, with_node=args.with_node)
        else:
            build_all(
                with_node=args.with_node,
                with_helm=args.with_helm,
                with_prometheus=args.with_prometheus,
                with_otelcol=args.with_otelcol,
                with_containerd2=args.with_containerd2,
                with_criu=args.with_criu,
            )
    except (BuildError, CriuBuildError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
