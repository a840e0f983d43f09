"""The helm CLI for the chart's tests: find the pinned binary and run it against a cluster.

helm is built from its Go module into the test binaries' cache (``nox -s testenv --
--with-helm``); tests that render or install ``charts/agent-sandbox`` go through :class:`Helm`
so every call gets the cluster's kubeconfig and private helm state directories (no cache,
config or repository list of the user's is read or written).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kube_agent_sandbox.testing.access import ToolError, find_tool

__all__ = ["Helm", "HelmError", "find_helm", "parse_documents"]


class HelmError(ToolError):
    """helm exited with an error."""

    tool = "helm"


def find_helm(bin_dir: Path | None = None) -> Path | None:
    """The pinned helm from the build cache, else the first helm on PATH."""
    return find_tool("helm", bin_dir)


def parse_documents(text: str) -> list[dict[str, Any]]:
    """The objects of a multi-document YAML rendering (empty documents dropped)."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


class Helm:
    """Runs one helm binary with a kubeconfig and state directories of its own."""

    def __init__(self, binary: Path, *, state_dir: Path, kubeconfig: Path | None = None) -> None:
        """Describe how to run helm.

        Args:
            binary: The helm executable.
            state_dir: Directory for helm's cache, config and data (created when missing).
            kubeconfig: Cluster to talk to (commands that need none may leave it out).
        """
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.state_dir = state_dir

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        for variable, sub in (
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ):
            path = self.state_dir / sub
            path.mkdir(parents=True, exist_ok=True)
            env[variable] = str(path)
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def run(
        self, *args: str, check: bool = True, timeout: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """Run helm.

        Args:
            *args: helm arguments.
            check: Raise :class:`HelmError` on a non-zero exit.
            timeout: Seconds before helm is killed.

        Returns:
            The finished process with text stdout and stderr.

        Raises:
            HelmError: If helm fails and ``check`` is set.
        """
        result = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            env=self._env(),
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise HelmError(args, result.returncode, result.stderr)
        return result

    def template(
        self,
        chart: Path,
        *,
        release: str,
        namespace: str,
        values: Mapping[str, Any] | None = None,
        extra: Sequence[str] = (),
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``helm template`` the chart with ``values`` (written to a values file).

        Args:
            chart: Chart directory.
            release: Release name.
            namespace: Release namespace.
            values: Values to override (None: the chart's defaults).
            extra: More helm arguments.
            check: Raise :class:`HelmError` on a non-zero exit.

        Returns:
            The finished process; its stdout is the rendering.
        """
        return self.run(
            "template",
            release,
            str(chart),
            "--namespace",
            namespace,
            *self._values_args(values),
            *extra,
            check=check,
        )

    def _values_args(self, values: Mapping[str, Any] | None) -> list[str]:
        if not values:
            return []
        self.state_dir.mkdir(parents=True, exist_ok=True)
        existing = len(list(self.state_dir.glob("values-*.yaml")))
        path = self.state_dir / f"values-{existing}.yaml"
        path.write_text(yaml.safe_dump(dict(values), sort_keys=False), encoding="utf-8")
        return ["--values", str(path)]

    def install(
        self,
        chart: Path,
        *,
        release: str,
        namespace: str,
        values: Mapping[str, Any] | None = None,
        extra: Sequence[str] = (),
        timeout: float = 300.0,
    ) -> subprocess.CompletedProcess[str]:
        """``helm install --wait`` the chart into ``namespace`` (created when missing).

        Args:
            chart: Chart directory.
            release: Release name.
            namespace: Release namespace.
            values: Values to override.
            extra: More helm arguments.
            timeout: Seconds helm waits for the release's resources to be ready.

        Returns:
            The finished process.
        """
        return self.run(
            "install",
            release,
            str(chart),
            "--namespace",
            namespace,
            "--create-namespace",
            "--wait",
            f"--timeout={int(timeout)}s",
            *self._values_args(values),
            *extra,
            timeout=timeout + 60,
        )
