"""npm_package: one ``npm install`` of the pinned packages, reused while they are all there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.testing import npm


class FakeNpm:
    """Stands in for ``subprocess.run`` of npm: records argv, "installs" the named packages."""

    def __init__(self, returncode: int = 0) -> None:
        self.calls: list[list[str]] = []
        self.returncode = returncode

    def __call__(self, argv: list[str], *, cwd: Path, **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if self.returncode == 0:
            for spec in argv[4:]:
                name = spec.rsplit("@", 1)[0]
                (cwd / "node_modules" / name).mkdir(parents=True)
                (cwd / "node_modules" / name / "package.json").write_text("{}")
        return subprocess.CompletedProcess(argv, self.returncode, "", "E404 not found")


@pytest.fixture
def fake_npm(monkeypatch: pytest.MonkeyPatch) -> FakeNpm:
    fake = FakeNpm()
    monkeypatch.setattr(npm.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(npm.subprocess, "run", fake)
    return fake


def test_installs_the_package_and_its_companions_in_one_command(
    tmp_path: Path, fake_npm: FakeNpm
) -> None:
    root = tmp_path / "js"
    got = npm.npm_package(
        root, "@e2b/code-interpreter", "2.8.0", module=True, also={"e2b": "2.51.0"}
    )
    assert got == root
    assert fake_npm.calls == [
        [
            "/usr/bin/npm",
            "install",
            "--no-audit",
            "--no-fund",
            "@e2b/code-interpreter@2.8.0",
            "e2b@2.51.0",
        ]
    ]
    assert json.loads((root / "package.json").read_text()) == {"private": True, "type": "module"}
    # Everything present: reused without npm.
    npm.npm_package(root, "@e2b/code-interpreter", "2.8.0", module=True, also={"e2b": "2.51.0"})
    assert len(fake_npm.calls) == 1


def test_a_missing_companion_reinstalls(tmp_path: Path, fake_npm: FakeNpm) -> None:
    root = tmp_path / "js"
    npm.npm_package(root, "a", "1.0.0")
    npm.npm_package(root, "a", "1.0.0", also={"b": "2.0.0"})
    assert [call[4:] for call in fake_npm.calls] == [["a@1.0.0"], ["a@1.0.0", "b@2.0.0"]]


def test_a_failed_install_skips_and_leaves_nothing(
    tmp_path: Path, fake_npm: FakeNpm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    fake_npm.returncode = 1
    root = tmp_path / "js"
    with pytest.raises(pytest.skip.Exception, match=r"npm could not install a@1 b@2: E404"):
        npm.npm_package(root, "a", "1", also={"b": "2"})
    assert not root.exists()
