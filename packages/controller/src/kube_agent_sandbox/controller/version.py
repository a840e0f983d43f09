"""Build metadata of the controller: the ``--version`` text and the build-info metric.

Upstream stamps version, commit and build date into the Go binary at link time. A Python
distribution has no link step, so the values come, in order, from environment variables set
when the container image is built (``AGENT_SANDBOX_VERSION``, ``AGENT_SANDBOX_GIT_COMMIT``,
``AGENT_SANDBOX_BUILD_DATE``), from the package's ``__version__`` (kept equal to the
distribution's version by a test; reading the metadata would import ``importlib.metadata``,
about 1 MiB, at every start), and from the git checkout when the package runs from source
(commit). Unknown values read ``unknown``.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

from kube_agent_sandbox.controller import __version__

__all__ = [
    "BUILD_INFO_METRIC",
    "DISTRIBUTION",
    "PROGRAM",
    "BuildInfo",
    "build_info",
    "register_build_info",
    "version_text",
]

PROGRAM = "agent-sandbox-controller"
DISTRIBUTION = "kube-agent-sandbox-controller"
BUILD_INFO_METRIC = "agent_sandbox_build_info"
UNKNOWN = "unknown"

_MACHINE_TO_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "i386": "386",
    "i686": "386",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """What ``--version`` prints and ``agent_sandbox_build_info`` carries as labels."""

    version: str
    git_commit: str
    build_date: str
    python_version: str
    compiler: str
    platform: str

    def labels(self) -> dict[str, str]:
        """Label values of the build-info gauge.

        Upstream's labels are ``git_version, git_commit, build_date, go_version, compiler,
        platform``; ``go_version`` becomes ``python_version`` and ``compiler`` names the Python
        implementation (``CPython``).
        """
        return {
            "git_version": self.version,
            "git_commit": self.git_commit,
            "build_date": self.build_date,
            "python_version": self.python_version,
            "compiler": self.compiler,
            "platform": self.platform,
        }


def build_info() -> BuildInfo:
    """Collect the build metadata of the running controller."""
    return BuildInfo(
        version=os.environ.get("AGENT_SANDBOX_VERSION") or __version__,
        git_commit=os.environ.get("AGENT_SANDBOX_GIT_COMMIT") or _git_commit() or UNKNOWN,
        build_date=os.environ.get("AGENT_SANDBOX_BUILD_DATE") or UNKNOWN,
        python_version=platform.python_version(),
        compiler=platform.python_implementation(),
        platform=_platform(),
    )


def version_text(info: BuildInfo | None = None, *, program: str = PROGRAM) -> str:
    """The ``--version`` block, shaped like upstream's (Prometheus ``version.Print``).

    Args:
        info: build metadata; collected when omitted.
        program: the program name on the first line.

    Returns:
        Several lines, without a trailing newline.
    """
    info = info or build_info()
    return "\n".join(
        [
            f"{program}, version {info.version} (revision: {info.git_commit})",
            f"  build date:       {info.build_date}",
            f"  python version:   {info.python_version}",
            f"  compiler:         {info.compiler}",
            f"  platform:         {info.platform}",
        ]
    )


def register_build_info(registry: CollectorRegistry, info: BuildInfo | None = None) -> Gauge:
    """Register the constant ``agent_sandbox_build_info`` gauge (value 1) on ``registry``.

    Args:
        registry: the registry the metrics endpoint serves.
        info: build metadata; collected when omitted.

    Returns:
        The gauge.
    """
    info = info or build_info()
    labels = info.labels()
    gauge = Gauge(
        BUILD_INFO_METRIC,
        "A metric with a constant '1' value labeled by version, revision, build date, "
        "Python version, implementation and platform from which agent-sandbox was built.",
        labelnames=tuple(labels),
        registry=registry,
    )
    gauge.labels(**labels).set(1)
    return gauge


def _platform() -> str:
    machine = platform.machine().lower()
    return f"{sys.platform}/{_MACHINE_TO_GOARCH.get(machine, machine or UNKNOWN)}"


def _git_commit(start: Path | None = None) -> str | None:
    """The commit checked out in the git work tree holding this file, if any (no subprocess)."""
    here = (start or Path(__file__)).resolve()
    for directory in here.parents:
        git = directory / ".git"
        if git.is_file():  # a worktree: "gitdir: <path>"
            content = git.read_text(encoding="utf-8").strip()
            if not content.startswith("gitdir:"):
                return None
            git = (directory / content.removeprefix("gitdir:").strip()).resolve()
        if git.is_dir():
            return _resolve_head(git)
    return None


def _resolve_head(git_dir: Path) -> str | None:
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not head.startswith("ref:"):
        return head or None
    ref = head.removeprefix("ref:").strip()
    common = git_dir
    commondir = git_dir / "commondir"
    if commondir.is_file():
        common = (git_dir / commondir.read_text(encoding="utf-8").strip()).resolve()
    for base in (git_dir, common):
        ref_file = base / ref
        if ref_file.is_file():
            return ref_file.read_text(encoding="utf-8").strip() or None
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    return None
