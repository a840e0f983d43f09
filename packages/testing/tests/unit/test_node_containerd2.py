"""The real node's opt-in containerd 2.x (checkpoint/restore): its build step and settings."""

from __future__ import annotations

import re
import stat
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from kube_agent_sandbox.testing import build, versions
from kube_agent_sandbox.testing.node.containerd import (
    Containerd,
    ContainerdError,
    ContainerdLayout,
    ContainerdSettings,
    containerd_environment,
    render_config,
)
from kube_agent_sandbox.testing.processes import ProcessSupervisor

CRI = "io.containerd.grpc.v1.cri"


def _fake_binary(path: Path, version: str) -> Path:
    """An executable that prints its version only for the flag the real one takes."""
    flag = "-v" if path.name == "containerd-shim-runc-v2" else "--version"
    path.write_text(f'#!/bin/sh\n[ "$1" = "{flag}" ] || exit 2\necho "{path.name} x {version}"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_restore_is_off_and_nri_untouched_by_default(tmp_path: Path) -> None:
    config = tomllib.loads(render_config(ContainerdLayout(tmp_path), ContainerdSettings("p:1")))
    assert "enable_experimental_restore_via_create" not in config["plugins"][CRI]
    assert "io.containerd.nri.v1.nri" not in config["plugins"]


def test_containerd2_restores_checkpoint_images_and_serves_no_nri_socket(tmp_path: Path) -> None:
    settings = ContainerdSettings("p:1", bin_dir=tmp_path / "bin", restore_via_create=True)
    config = tomllib.loads(render_config(ContainerdLayout(tmp_path), settings))
    assert config["plugins"][CRI]["enable_experimental_restore_via_create"] is True
    assert config["plugins"]["io.containerd.nri.v1.nri"] == {"disable": True}


def test_restore_without_containerd2_is_refused(tmp_path: Path) -> None:
    settings = ContainerdSettings("p:1", restore_via_create=True)
    with pytest.raises(ContainerdError, match=r"needs containerd 2\.x"):
        render_config(ContainerdLayout(tmp_path), settings)


def test_containerd2_folder_comes_first_on_containerd_path(tmp_path: Path) -> None:
    assert containerd_environment(None, {"PATH": "/usr/bin"}) is None
    env = containerd_environment(tmp_path, {"PATH": "/usr/sbin:/usr/bin", "HOME": "/root"})
    assert env == {"PATH": f"{tmp_path}:/usr/sbin:/usr/bin", "HOME": "/root"}
    bare = containerd_environment(tmp_path, {})
    assert bare is not None
    assert bare["PATH"].startswith(f"{tmp_path}:")
    assert len(bare["PATH"]) > len(f"{tmp_path}:")


def test_a_containerd2_folder_without_ctr_fails_before_starting(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    _fake_binary(folder / "containerd", versions.CONTAINERD2_VERSION)
    supervisor = ProcessSupervisor(tmp_path / "logs", die_with_parent=False)
    containerd = Containerd(
        ContainerdLayout(tmp_path / "work"),
        ContainerdSettings("p:1", bin_dir=folder),
        supervisor=supervisor,
    )
    with pytest.raises(ContainerdError, match=re.escape(f"{folder} lacks containerd or ctr")):
        containerd.start(timeout=1)
    assert containerd.process is None


def test_present_containerd2_of_the_pinned_version_is_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in versions.CONTAINERD2_BINARIES:
        _fake_binary(tmp_path / name, versions.CONTAINERD2_VERSION)
    calls: list[Sequence[str]] = []
    monkeypatch.setattr(build, "_run_go", lambda args, **_: calls.append(args))
    build.build_containerd2(tmp_path)
    assert calls == []


def test_containerd2_is_built_from_the_pinned_module_into_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Sequence[str], dict[str, str]]] = []

    def go(args: Sequence[str], *, cwd: Path, env: dict[str, str], what: str) -> None:
        calls.append((args, env))
        for name in versions.CONTAINERD2_BINARIES:
            _fake_binary(tmp_path / name, versions.CONTAINERD2_VERSION)

    monkeypatch.setattr(build, "_run_go", go)
    build.build_containerd2(tmp_path)
    ((args, env),) = calls
    module, version = versions.CONTAINERD2_MODULE, versions.CONTAINERD2_VERSION
    assert [a for a in args if "@" in a] == [
        f"{module}/cmd/{name}@{version}" for name in versions.CONTAINERD2_BINARIES
    ]
    assert f"{module}/version.Version={version}" in args[args.index("-ldflags") + 1]
    assert env["GOBIN"] == str(tmp_path)


def test_a_containerd2_build_of_the_wrong_version_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def go(args: Sequence[str], **_: object) -> None:
        for name in versions.CONTAINERD2_BINARIES:
            _fake_binary(tmp_path / name, "v2.4.0")

    monkeypatch.setattr(build, "_run_go", go)
    with pytest.raises(build.BuildError, match="does not report version"):
        build.build_containerd2(tmp_path)


def test_containerd2_is_built_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_TESTENV_CACHE", str(tmp_path))
    built: list[Path] = []
    monkeypatch.setattr(build, "build_containerd2", built.append)
    assert build.main(["--only", "containerd2"]) == 0
    assert built == [tmp_path / f"containerd-{versions.CONTAINERD2_VERSION}" / "bin"]
    for name in ("build_etcd", "build_kwok", "build_kubernetes", "build_registry"):
        monkeypatch.setattr(build, name, lambda *a: None)
    monkeypatch.setattr(build, "_has_version", lambda *a: True)
    assert build.main([]) == 0
    assert len(built) == 1
