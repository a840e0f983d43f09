"""``--version`` text and the ``agent_sandbox_build_info`` gauge."""

from __future__ import annotations

import platform
import re
from importlib import metadata
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kube_agent_sandbox.controller import __version__
from kube_agent_sandbox.controller import version as v
from kube_agent_sandbox.controller.version import BuildInfo

INFO = BuildInfo(
    version="1.2.3",
    git_commit="abc123",
    build_date="2026-12-01T00:00:00Z",
    python_version="3.11.7",
    compiler="CPython",
    platform="linux/amd64",
)


def test_version_text_layout() -> None:
    assert v.version_text(INFO).splitlines() == [
        "agent-sandbox-controller, version 1.2.3 (revision: abc123)",
        "  build date:       2026-12-01T00:00:00Z",
        "  python version:   3.11.7",
        "  compiler:         CPython",
        "  platform:         linux/amd64",
    ]


def test_build_info_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_VERSION", "9.9.9")
    monkeypatch.setenv("AGENT_SANDBOX_GIT_COMMIT", "deadbeef")
    monkeypatch.setenv("AGENT_SANDBOX_BUILD_DATE", "2026-01-02T03:04:05Z")
    info = v.build_info()
    assert (info.version, info.git_commit, info.build_date) == (
        "9.9.9",
        "deadbeef",
        "2026-01-02T03:04:05Z",
    )
    assert info.python_version == platform.python_version()
    assert info.compiler == platform.python_implementation()
    assert re.fullmatch(r"[a-z0-9]+/[a-z0-9_]+", info.platform)


def test_build_info_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENT_SANDBOX_VERSION", "AGENT_SANDBOX_GIT_COMMIT", "AGENT_SANDBOX_BUILD_DATE"):
        monkeypatch.delenv(name, raising=False)
    info = v.build_info()
    assert info.version == "0.1.0"  # the installed distribution's version
    assert info.build_date == "unknown"


def _git_dir(root: Path, head: str) -> Path:
    git = root / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head)
    return git


def test_git_commit_detached_head(tmp_path: Path) -> None:
    _git_dir(tmp_path, "0123456789abcdef0123456789abcdef01234567\n")
    nested = tmp_path / "a" / "b" / "mod.py"
    assert v._git_commit(nested) == "0123456789abcdef0123456789abcdef01234567"


def test_git_commit_branch_ref(tmp_path: Path) -> None:
    git = _git_dir(tmp_path, "ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text("1111111111111111111111111111111111111111\n")
    assert v._git_commit(tmp_path / "x.py") == "1111111111111111111111111111111111111111"


def test_git_commit_packed_ref(tmp_path: Path) -> None:
    git = _git_dir(tmp_path, "ref: refs/heads/main\n")
    (git / "packed-refs").write_text(
        "# pack-refs with: peeled fully-peeled sorted\n"
        "2222222222222222222222222222222222222222 refs/heads/main\n"
    )
    assert v._git_commit(tmp_path / "x.py") == "2222222222222222222222222222222222222222"


def test_git_commit_worktree_file(tmp_path: Path) -> None:
    main = tmp_path / "main"
    git = _git_dir(main, "ref: refs/heads/main\n")
    (git / "refs" / "heads" / "feature").write_text("3333333333333333333333333333333333333333\n")
    worktree_git = git / "worktrees" / "wt"
    worktree_git.mkdir(parents=True)
    (worktree_git / "HEAD").write_text("ref: refs/heads/feature\n")
    (worktree_git / "commondir").write_text("../..\n")
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text(f"gitdir: {worktree_git}\n")
    assert v._git_commit(wt / "x.py") == "3333333333333333333333333333333333333333"


def test_git_commit_none_outside_a_checkout(tmp_path: Path) -> None:
    assert v._git_commit(tmp_path / "x.py") is None or (tmp_path / ".git").exists()


def test_build_info_gauge() -> None:
    registry = CollectorRegistry()
    v.register_build_info(registry, INFO)
    text = generate_latest(registry).decode()
    assert "# TYPE agent_sandbox_build_info gauge" in text
    sample = next(
        line for line in text.splitlines() if line.startswith("agent_sandbox_build_info{")
    )
    labels = dict(re.findall(r'(\w+)="([^"]*)"', sample))
    assert labels == {
        "git_version": "1.2.3",
        "git_commit": "abc123",
        "build_date": "2026-12-01T00:00:00Z",
        "python_version": "3.11.7",
        "compiler": "CPython",
        "platform": "linux/amd64",
    }
    assert sample.endswith(" 1.0")


def test_package_version_matches_the_installed_distribution() -> None:
    # build_info reads __version__ rather than the metadata; a release bump must move both.
    assert __version__ == metadata.version(v.DISTRIBUTION)


def test_build_info_without_environment_reports_the_package_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENT_SANDBOX_VERSION", raising=False)
    assert v.build_info().version == __version__
