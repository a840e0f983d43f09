"""The ``agent-sandbox`` command against the local cluster with the Sandbox controller."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kube_agent_sandbox.sdk.cli import app as cli
from kube_agent_sandbox.testing.access import ClusterAccess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("sandbox_controller")]

MANIFEST = """\
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: cli-box
spec:
  podTemplate:
    spec:
      containers: [{name: main, image: registry.k8s.io/pause:3.10}]
"""


def test_cli_lifecycle(cluster: ClusterAccess, namespace: str, tmp_path: Path) -> None:
    manifest = tmp_path / "sandbox.yaml"
    manifest.write_text(MANIFEST)
    runner = CliRunner()
    base = ["--kubeconfig", str(cluster.kubeconfig), "-n", namespace]

    def run(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(cli.app, [*base, *args])
        return result.exit_code, result.stdout, result.stderr

    assert run("create", "-f", str(manifest), "--timeout", "90") == (0, "cli-box\n", "")
    code, out, _ = run("list")
    assert code == 0
    assert out.splitlines()[1].split()[:4] == ["cli-box", "True", "DependenciesReady", "Running"]
    code, out, _ = run("get", "cli-box", "-o", "json")
    assert json.loads(out)["metadata"]["labels"]["agents.x-k8s.io/created-by"] == "python-client"
    assert run("suspend", "cli-box", "--timeout", "90")[0] == 0
    code, out, _ = run("get", "cli-box", "-o", "wide")
    assert "Suspended" in out
    assert run("resume", "cli-box", "--timeout", "90")[0] == 0
    assert run("wait", "cli-box", "--timeout", "30")[0] == 0
    assert run("delete", "cli-box", "--wait")[0] == 0
    code, _, err = run("get", "cli-box")
    assert code == cli.EXIT_NOT_FOUND
    assert "not found" in err
    assert run("delete", "cli-box", "--ignore-not-found")[0] == 0
    assert run("wait", "ghost", "--timeout", "1")[0] == cli.EXIT_NOT_FOUND


def test_top_once_shows_sandboxes_and_pools(
    cluster: ClusterAccess, namespace: str, tmp_path: Path
) -> None:
    manifest = tmp_path / "sandbox.yaml"
    manifest.write_text(MANIFEST.replace("cli-box", "top-box"))
    runner = CliRunner()
    base = ["--kubeconfig", str(cluster.kubeconfig), "-n", namespace]
    assert runner.invoke(cli.app, [*base, "create", "-f", str(manifest)]).exit_code == 0
    # A pool nobody fills here (no extensions controller): 0 of 2 ready.
    cluster.apply(
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": "top-pool", "namespace": namespace},
            "spec": {"replicas": 2, "sandboxTemplateRef": {"name": "none"}},
        }
    )
    result = runner.invoke(cli.app, [*base, "top", "--once"])
    assert result.exit_code == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "1 sandboxes, 1 ready; 1 warm pools; resource use n/a (no metrics-server)"
    row = next(line.split() for line in lines if line.startswith("top-box"))
    # The local cluster has no metrics-server: CPU and memory say so.
    assert row[1:4] == ["True", "DependenciesReady", "Running"]
    assert row[-2:] == ["n/a", "n/a"]
    pool = next(line.split() for line in lines if line.startswith("top-pool"))
    assert pool[1:3] == ["0", "2"]
    bad = runner.invoke(cli.app, [*base, "top", "--interval", "0"])
    assert bad.exit_code == cli.EXIT_USAGE
