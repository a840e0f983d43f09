"""Harness pieces that need no cluster: manifests, kwok stages, binaries, providers, plugin."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.access import (
    ClusterAccess,
    load_crds,
    load_manifests,
)
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.kwok import kwok_node, kwok_stage_files
from kube_agent_sandbox.testing.plugin import namespace_name, unavailable
from kube_agent_sandbox.testing.prerequisites import PrerequisiteError, check_binaries
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.providers import ProviderOptions, start_cluster

CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}


def test_load_manifests_from_every_kind_of_source(tmp_path: Path) -> None:
    text = "---\n" + yaml.safe_dump(CM) + "---\n# empty\n---\n" + yaml.safe_dump(CRD)
    (tmp_path / "b.yaml").write_text(text)
    (tmp_path / "a.yml").write_text(yaml.safe_dump(CRD))
    (tmp_path / "ignored.txt").write_text("not yaml: [")
    assert load_manifests(CM) == [CM]
    assert load_manifests([CM, CM]) == [CM, CM]
    assert load_manifests(text) == [CM, CRD]
    assert load_manifests(tmp_path / "b.yaml") == [CM, CRD]
    assert load_manifests(tmp_path) == [CRD, CM, CRD]  # a.yml sorts before b.yaml
    assert load_crds(tmp_path) == [CRD, CRD]


def test_load_manifests_rejects_non_mappings() -> None:
    with pytest.raises(ValueError, match="must be a mapping, got list"):
        load_manifests("- a\n- b\n")


def test_load_manifests_of_a_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_manifests(tmp_path / "missing.yaml")


def test_install_crds_refuses_other_kinds_before_touching_the_cluster(tmp_path: Path) -> None:
    access = ClusterAccess(tmp_path / "none", provider="test")
    with pytest.raises(ValueError, match="not a CustomResourceDefinition: ConfigMap"):
        access.install_crds([CRD, CM])
    with pytest.raises(ValueError, match="no CustomResourceDefinition"):
        access.install_crds([])


def test_apply_of_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nothing to apply"):
        ClusterAccess(tmp_path / "none", provider="test").apply([])


def test_log_tails_read_each_component(tmp_path: Path) -> None:
    (tmp_path / "etcd.log").write_text("\n".join(f"line {i}" for i in range(100)))
    access = ClusterAccess(
        tmp_path / "k",
        provider="test",
        log_files={"etcd": tmp_path / "etcd.log", "gone": tmp_path / "gone.log"},
    )
    tails = access.log_tails(3)
    assert tails["etcd"] == "line 97\nline 98\nline 99"
    assert tails["gone"].startswith("<cannot read")


def _kustomization(directory: Path, *resources: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({"resources": list(resources)}))


def test_kwok_stage_files_follow_kustomizations(tmp_path: Path) -> None:
    _kustomization(tmp_path / "fast", "../node", "../pod")
    _kustomization(tmp_path / "node", "node-init.yaml")
    _kustomization(tmp_path / "pod", "ready.yaml", "delete.yaml")
    files = kwok_stage_files(tmp_path, "fast")
    assert [f.name for f in files] == ["node-init.yaml", "ready.yaml", "delete.yaml"]


def test_kwok_stage_files_missing_is_a_prerequisite_error(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteError, match="kwok stages not found"):
        kwok_stage_files(tmp_path, "fast")


def test_check_binaries_names_every_missing_one(tmp_path: Path) -> None:
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    (tmp_path / "kwok").write_text("not executable")
    with pytest.raises(
        PrerequisiteError, match=r"missing kube-apiserver, kwok in .*nox -s testenv"
    ):
        check_binaries(tmp_path, ["etcd", "kube-apiserver", "kwok"])
    check_binaries(tmp_path, ["etcd"])


def test_kwok_node_is_managed_by_annotation() -> None:
    node = kwok_node("n1")
    assert node["metadata"]["name"] == "n1"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_versions_are_pinned_in_one_place() -> None:
    assert re.fullmatch(r"v1\.36\.\d+", versions.KUBERNETES_VERSION)
    assert re.fullmatch(r"v3\.6\.\d+", versions.ETCD_VERSION)
    assert re.fullmatch(r"v0\.8\.\d+", versions.KWOK_VERSION)
    assert (
        versions.KUBERNETES_STAGING_VERSION.split(".")[1:]
        == (versions.KUBERNETES_VERSION.split(".")[1:])
    )
    bin_dir = str(versions.bin_dir())
    for pin in (versions.KUBERNETES_VERSION, versions.ETCD_VERSION, versions.KWOK_VERSION):
        assert pin in bin_dir


def test_cache_location_can_be_overridden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_TESTENV_CACHE", str(tmp_path))
    assert versions.bin_dir().is_relative_to(tmp_path)


@pytest.mark.parametrize(
    "test_name",
    ["test_x[param-1]", "T" * 200, "___", "test_ünïcode"],
)
def test_namespace_names_are_valid_and_unique(test_name: str) -> None:
    first, second = namespace_name(test_name), namespace_name(test_name)
    assert first != second
    for name in (first, second):
        assert len(name) <= 63
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)


def test_unavailable_skips_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no binaries"):
        unavailable("no binaries")


def test_unavailable_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"CI=true.*no binaries"):
        unavailable("no binaries")


def test_unknown_provider_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown cluster provider 'minikube'"):
        start_cluster("minikube", ProviderOptions())


def test_existing_provider_needs_a_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteError, match="needs a kubeconfig"):
        start_cluster("existing", ProviderOptions(kubeconfig=tmp_path / "missing"))


def test_kind_provider_explains_what_is_missing() -> None:
    try:
        import pytest_kind  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        with pytest.raises(PrerequisiteError, match="pytest-kind"):
            start_cluster("kind", ProviderOptions())
    else:  # pragma: no cover - depends on the machine
        pytest.skip("pytest-kind is installed here")


def test_local_provider_without_binaries_is_a_prerequisite_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_TESTENV_CACHE", str(tmp_path))
    with pytest.raises(PrerequisiteError, match="missing etcd, kube-apiserver"):
        start_cluster("local", ProviderOptions())


def _run_pytest(tmp_path: Path, test_code: str, *args: str, **env: str) -> str:
    (tmp_path / "test_inner.py").write_text(test_code)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, "test_inner.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )
    return result.stdout + result.stderr


def test_a_failing_test_gets_the_cluster_logs_attached(tmp_path: Path) -> None:
    """The report hook appends each component's log tail to a failing test's report."""
    (tmp_path / "etcd.log").write_text("etcd says hello\n")
    code = f"""
from pathlib import Path
from kube_agent_sandbox.testing import plugin
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.providers import ProvidedCluster

def test_fails(request):
    log = Path({str(tmp_path / "etcd.log")!r})
    access = ClusterAccess(Path("k"), provider="fake", log_files={{"etcd": log}})
    request.config.stash[plugin._ACTIVE] = ProvidedCluster(access=access, stop=lambda: None)
    assert False, "deliberate"

def test_passes(request):
    assert plugin._ACTIVE in request.config.stash
"""
    output = _run_pytest(tmp_path, code)
    assert "1 failed, 1 passed" in output
    assert "cluster log: etcd" in output
    assert "etcd says hello" in output
    assert output.count("cluster log: etcd") == 1  # the passing test gets no section


def test_a_missing_prerequisite_skips_locally_and_fails_in_ci(tmp_path: Path) -> None:
    code = "def test_needs_cluster(cluster):\n    pass\n"
    env = {"AGENT_SANDBOX_TESTENV_CACHE": str(tmp_path / "empty-cache")}
    local = _run_pytest(tmp_path, code, "-rs", **env, CI="false")
    assert "1 skipped" in local
    assert "missing etcd" in local
    ci = _run_pytest(tmp_path, code, **env, CI="true")
    assert "1 error" in ci
    assert "prerequisite missing (CI=true" in ci


def test_provider_can_be_chosen_by_environment(tmp_path: Path) -> None:
    code = "def test_needs_cluster(cluster):\n    pass\n"
    output = _run_pytest(
        tmp_path,
        code,
        "-rs",
        AGENT_SANDBOX_CLUSTER_PROVIDER="existing",
        KUBECONFIG=str(tmp_path / "nope"),
        CI="false",
    )
    assert "1 skipped" in output
    assert "provider 'existing' needs a kubeconfig" in output


def test_restart_before_start_raises() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        LocalCluster().restart("kube-apiserver")
