"""helm in the test tool chain: the idempotent build step and the runner's environment."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from kube_agent_sandbox.testing import build, versions
from kube_agent_sandbox.testing.helm import Helm, HelmError, find_helm, parse_documents


def _fake_helm(path: Path, version: str) -> Path:
    """An executable that answers `helm version` like helm does."""
    path.write_text(
        "#!/bin/sh\n"
        f'echo \'version.BuildInfo{{Version:"{version}", GitCommit:"", GoVersion:"go1"}}\'\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_present_helm_of_the_pinned_version_is_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_helm(tmp_path / "helm", versions.HELM_VERSION)
    calls: list[Sequence[str]] = []
    monkeypatch.setattr(build, "_run_go", lambda args, **_: calls.append(args))
    build.build_helm(tmp_path)
    assert calls == []


def test_helm_of_another_version_is_built_from_the_pinned_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_helm(tmp_path / "helm", "v3.0.0")
    calls: list[tuple[Sequence[str], dict[str, str]]] = []

    def go(args: Sequence[str], *, cwd: Path, env: dict[str, str], what: str) -> None:
        calls.append((args, env))
        _fake_helm(tmp_path / "helm", versions.HELM_VERSION)

    monkeypatch.setattr(build, "_run_go", go)
    build.build_helm(tmp_path)
    ((args, env),) = calls
    assert args[0] == "install"
    assert args[-1] == f"{versions.HELM_MODULE}/cmd/helm@{versions.HELM_VERSION}"
    ldflags = args[args.index("-ldflags") + 1]
    assert f"internal/version.version={versions.HELM_VERSION}" in ldflags
    assert env["GOBIN"] == str(tmp_path)


def test_a_build_that_reports_the_wrong_version_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build, "_run_go", lambda args, **_: _fake_helm(tmp_path / "helm", "v4.0"))
    with pytest.raises(build.BuildError, match="does not report version"):
        build.build_helm(tmp_path)


def test_only_refuses_unknown_components() -> None:
    with pytest.raises(build.BuildError, match="unknown component"):
        build.build_only(["helmfile"])


def test_only_helm_builds_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_TESTENV_CACHE", str(tmp_path))
    built: list[str] = []
    monkeypatch.setattr(build, "build_helm", lambda d: built.append("helm"))
    for other in ("build_etcd", "build_kwok", "build_kubernetes"):
        monkeypatch.setattr(build, other, lambda *a, _n=other: built.append(_n))
    assert build.main(["--only", "helm"]) == 0
    assert built == ["helm"]


def test_find_helm_prefers_the_cache_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, elsewhere = tmp_path / "cache", tmp_path / "path"
    cache.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("PATH", str(elsewhere))
    assert find_helm(cache) is None
    on_path = _fake_helm(elsewhere / "helm", "v4.0.0")
    assert find_helm(cache) == on_path
    cached = _fake_helm(cache / "helm", versions.HELM_VERSION)
    assert find_helm(cache) == cached


def test_runner_isolates_helm_state_and_passes_the_kubeconfig(tmp_path: Path) -> None:
    script = tmp_path / "helm"
    script.write_text(
        '#!/bin/sh\necho "$KUBECONFIG|$HELM_CACHE_HOME|$HELM_CONFIG_HOME|$HELM_DATA_HOME|$*"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    helm = Helm(script, state_dir=tmp_path / "state", kubeconfig=tmp_path / "kubeconfig")
    out = helm.run("list", "-A").stdout.strip().split("|")
    assert out[0] == str(tmp_path / "kubeconfig")
    assert out[1:4] == [str(tmp_path / "state" / d) for d in ("cache", "config", "data")]
    assert all(os.path.isdir(p) for p in out[1:4])
    assert out[4] == "list -A"


def test_runner_raises_with_stderr(tmp_path: Path) -> None:
    script = tmp_path / "helm"
    script.write_text("#!/bin/sh\necho 'Error: values are bad' >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    helm = Helm(script, state_dir=tmp_path / "state")
    with pytest.raises(HelmError, match="values are bad") as caught:
        helm.template(tmp_path, release="r", namespace="n", values={"replicaCount": 2})
    assert caught.value.returncode == 1
    assert helm.run("version", check=False).returncode == 1


def test_parse_documents_drops_empty_ones() -> None:
    assert parse_documents("---\n# only a comment\n---\nkind: A\n---\n") == [{"kind": "A"}]
