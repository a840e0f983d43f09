"""The SDK's and CLI's snapshot verbs against a real kube-apiserver (kwok) and the local
cluster's real OCI registry (``--cluster-registry=tls``).

The Sandbox, template, warm pool, claim and SandboxSnapshot controllers and the snapshot node
agent run in-process under their generated RBAC (the extensions' test runners; the agent's
committer pushes a layer made from a folder, as kwok runs no containers). Covered: ``snapshot
create`` (Ready, recording the source's pool), the memory mode refused, a snapshot of a missing
Sandbox failing, ``snapshot list``/``get``, ``snapshot claim`` (a Sandbox running the snapshot's
image) and ``snapshot delete`` (the image leaves the registry); and a cluster with no snapshot
controller answering a clear error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.sdk import SandboxClient, load_kubeconfig, readiness
from kube_agent_sandbox.sdk.cli import app as cli
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import kwok_template_spec, warm_template
from kube_agent_sandbox.testing.nsapi import NamespaceApi
from kube_agent_sandbox.testing.registry import RunningRegistry

_EXTENSIONS_TESTS = str(
    Path(__file__).resolve().parents[3] / "extensions" / "tests" / "integration"
)
if _EXTENSIONS_TESTS not in sys.path:
    sys.path.append(_EXTENSIONS_TESTS)

from extensions_runner import start_extensions_controller  # noqa: E402
from snapshot_agent_runner import (  # noqa: E402
    give_container_id,
    manifest_status,
    registry_settings,
    snapshot_options,
    start_agent,
)

pytestmark = pytest.mark.integration


def _cli(cluster: ClusterAccess, namespace: str):  # type: ignore[no-untyped-def]
    runner = CliRunner()
    base = ["--kubeconfig", str(cluster.kubeconfig), "-n", namespace]

    def run(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(cli.app, [*base, *args])
        # rich wraps error lines at the terminal's width: compare words, not line breaks
        err = " ".join(result.stderr.split()) + ("\n" if result.stderr else "")
        return result.exit_code, result.stdout, err

    return run


async def test_snapshot_verbs(
    cluster: ClusterAccess,
    namespace: str,
    agent_sandbox_crds: list[str],
    controller_runner: ControllerRunner,
    oci_registry: RunningRegistry,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    assert "sandboxsnapshots.extensions.agents.x-k8s.io" in agent_sandbox_crds
    settings = registry_settings(oci_registry, tmp_path)
    start_extensions_controller(
        controller_runner,
        rootpath=request.config.rootpath,
        namespace=namespace,
        options=snapshot_options(settings),
        names=("template", "warmpool", "claim", "snapshot"),
    )
    cluster.apply(
        warm_template(
            "base", template_spec=kwok_template_spec("base:1"), replicas=1, namespace=namespace
        )
    )
    run = _cli(cluster, namespace)
    client = SandboxClient(load_kubeconfig(cluster.kubeconfig), namespace=namespace)
    box = client.claim_sandbox("base", timeout=90)
    async with NamespaceApi.connect(cluster.kubeconfig, namespace) as env:
        node = await give_container_id(env, readiness.pod_name(box.get()))
    start_agent(controller_runner, namespace, node, settings, tmp_path)

    # -- create: Ready, recording the source claim's pool ----------------------------------
    assert run("snapshot", "create", box.name, "--name", "snap1") == (0, "snap1\n", "")
    snap = client.get_snapshot("snap1")
    assert snap["status"]["phase"] == "Ready"
    assert snap["metadata"]["annotations"][c.ANNOTATION_SNAPSHOT_WARM_POOL] == "base"
    image = snap["status"]["image"]
    assert await manifest_status(settings, image) == 200
    handle = box.snapshot("snap2")  # the handle's verb, through the sync SDK
    assert handle["status"]["phase"] == "Ready"

    # -- list and get ------------------------------------------------------------------------
    code, out, _ = run("snapshot", "list")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "PHASE", "REASON", "SOURCE", "SIZE", "AGE"]
    assert sorted(r[0] for r in rows[1:]) == ["snap1", "snap2"]
    assert all(r[1] == "Ready" and r[3] == box.name for r in rows[1:])
    code, _, err = run("snapshot", "list", "--sandbox", "someone-else")
    assert (code, err) == (0, "No resources found.\n")
    code, out, _ = run("snapshot", "get", "snap1", "-o", "json")
    assert json.loads(out)["status"]["image"] == image

    # -- what cannot work says why -----------------------------------------------------------
    # kwok's node cannot checkpoint: the agent fails the Memory snapshot, naming what is missing
    code, _, err = run("snapshot", "create", box.name, "--name", "live", "--mode", "Memory")
    assert code == cli.EXIT_FAILED
    assert "MemorySnapshotUnsupported" in err
    assert "--kubelet-checkpoints-dir" in err
    code, _, err = run("snapshot", "create", "ghost", "--name", "lost")
    assert code == cli.EXIT_FAILED
    assert "SandboxNotFound" in err

    # -- claim from it: a Sandbox running the snapshot's image --------------------------------
    code, out, err = run("snapshot", "claim", "snap1", "--timeout", "90")
    assert code == 0, err
    fork = client.get(out.strip())
    assert fork["spec"]["podTemplate"]["spec"]["containers"][0]["image"] == image

    # -- delete: the image leaves the registry -----------------------------------------------
    assert run("snapshot", "delete", "snap1", "--wait")[0] == 0
    assert await manifest_status(settings, image) == 404
    code, _, err = run("snapshot", "get", "snap1")
    assert code == cli.EXIT_NOT_FOUND
    client.delete_snapshot("snap2", wait=True)
    client.delete_snapshot("lost", missing_ok=True)
    client.close()


def test_without_a_snapshot_controller_the_cli_says_what_to_run(
    cluster: ClusterAccess, namespace: str, agent_sandbox_crds: list[str]
) -> None:
    assert "sandboxsnapshots.extensions.agents.x-k8s.io" in agent_sandbox_crds
    code, _, err = _cli(cluster, namespace)("snapshot", "create", "any-box", "--name", "x")
    assert code == cli.EXIT_ERROR
    assert "no snapshot controller" in err
    assert "--snapshot-registry" in err
    assert _cli(cluster, namespace)("snapshot", "get", "x")[0] == cli.EXIT_NOT_FOUND
