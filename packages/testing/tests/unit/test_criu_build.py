"""CRIU for the checkpoint/restore node: fetched, verified, built with make, installed, cached.

The build runs the real ``tar`` and ``make`` on a small stand-in source tree served from a
``file://`` URL, so every step but the C compile of CRIU itself is exercised.
"""

from __future__ import annotations

import hashlib
import io
import re
import stat
import tarfile
from pathlib import Path

import pytest

from kube_agent_sandbox.testing import build, criu_build, versions
from kube_agent_sandbox.testing.criu_build import CriuBuildError, build_criu, verify_source
from kube_agent_sandbox.testing.node.containerd import containerd_environment


def _fake_criu(path: Path, version: str) -> None:
    path.write_text(f'#!/bin/sh\n[ "$1" = "--version" ] || exit 2\necho "Version: {version}"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _source_tarball(tmp_path: Path, version: str, *, makefile: str | None = None) -> Path:
    """A tarball laid out like CRIU's: criu-<v>/Makefile whose ``criu`` target writes criu/criu."""
    script = f'#!/bin/sh\\n[ "$$1" = "--version" ] || exit 2\\necho "Version: {version}"\\n'
    rule = makefile or (
        f"criu:\n\tmkdir -p criu\n\tprintf '{script}' > criu/criu\n\tchmod +x criu/criu\n"
    )
    tarball = tmp_path / "criu.orig.tar.xz"
    with tarfile.open(tarball, "w:xz") as tar:
        data = rule.encode()
        info = tarfile.TarInfo(f"criu-{versions.CRIU_VERSION}/Makefile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return tarball


def _serve(monkeypatch: pytest.MonkeyPatch, tarball: Path) -> None:
    monkeypatch.setattr(versions, "CRIU_SOURCE_URL", tarball.as_uri())
    monkeypatch.setattr(
        versions, "CRIU_SOURCE_SHA256", hashlib.sha256(tarball.read_bytes()).hexdigest()
    )


def test_criu_is_built_from_the_verified_tarball_and_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _serve(monkeypatch, _source_tarball(tmp_path, versions.CRIU_VERSION))
    bin_dir = tmp_path / "cache" / "bin"
    binary = build_criu(bin_dir)
    assert binary == bin_dir / "criu"
    assert criu_build.criu_version(binary) == versions.CRIU_VERSION
    assert sorted(p.name for p in bin_dir.iterdir()) == ["criu"]


def test_a_present_criu_of_the_pinned_version_is_not_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_criu(tmp_path / "criu", versions.CRIU_VERSION)
    monkeypatch.setattr(versions, "CRIU_SOURCE_URL", (tmp_path / "absent.tar.xz").as_uri())
    assert build_criu(tmp_path) == tmp_path / "criu"


def test_an_older_criu_in_the_folder_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_criu(bin_dir / "criu", "3.17.1")
    _serve(monkeypatch, _source_tarball(tmp_path, versions.CRIU_VERSION))
    build_criu(bin_dir)
    assert criu_build.criu_version(bin_dir / "criu") == versions.CRIU_VERSION


def test_a_tarball_with_another_digest_is_refused(tmp_path: Path) -> None:
    tarball = _source_tarball(tmp_path, versions.CRIU_VERSION)
    with pytest.raises(CriuBuildError, match="expected 00ff"):
        verify_source(tarball, "00ff")
    verify_source(tarball, hashlib.sha256(tarball.read_bytes()).hexdigest())


def test_a_changed_download_is_refused_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tarball = _source_tarball(tmp_path, versions.CRIU_VERSION)
    monkeypatch.setattr(versions, "CRIU_SOURCE_URL", tarball.as_uri())
    with pytest.raises(CriuBuildError, match="download changed or truncated"):
        build_criu(tmp_path / "bin")
    assert not (tmp_path / "bin" / "criu").exists()


def test_an_unreachable_source_names_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = (tmp_path / "absent.tar.xz").as_uri()
    monkeypatch.setattr(versions, "CRIU_SOURCE_URL", url)
    with pytest.raises(CriuBuildError, match=re.escape(f"cannot download {url}")):
        build_criu(tmp_path / "bin")


def test_a_failed_make_names_the_build_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = "criu:\n\t@echo 'fatal error: nl.h: No such file'; exit 1\n"
    _serve(monkeypatch, _source_tarball(tmp_path, versions.CRIU_VERSION, makefile=broken))
    with pytest.raises(CriuBuildError, match=r"make criu failed \(exit 2\)") as err:
        build_criu(tmp_path / "bin")
    assert "libnl-3-dev" in str(err.value)
    assert "nl.h: No such file" in str(err.value)


def test_a_build_of_another_version_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, _source_tarball(tmp_path, "4.1.1"))
    with pytest.raises(CriuBuildError, match=r"reports version '4\.1\.1'"):
        build_criu(tmp_path / "bin")


def test_missing_build_tools_are_named_before_downloading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(versions, "CRIU_SOURCE_URL", "http://unused.invalid/criu.tar.xz")
    with pytest.raises(CriuBuildError, match=r"needs make, gcc, .*apt-get install build-essential"):
        build_criu(tmp_path / "bin")


def test_criu_is_built_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_TESTENV_CACHE", str(tmp_path))
    built: list[Path] = []
    monkeypatch.setattr(build, "build_criu", built.append)
    assert build.main(["--only", "criu"]) == 0
    assert built == [tmp_path / f"criu-{versions.CRIU_VERSION}" / "bin"]
    for name in ("build_etcd", "build_kwok", "build_kubernetes", "build_registry"):
        monkeypatch.setattr(build, name, lambda *a: None)
    monkeypatch.setattr(build, "_has_version", lambda *a: True)
    assert build.main([]) == 0
    assert len(built) == 1
    assert build.main(["--with-criu"]) == 0
    assert len(built) == 2


def test_a_criu_build_error_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(_: Path) -> Path:
        raise CriuBuildError("cannot download x")

    monkeypatch.setattr(build, "build_criu", fail)
    assert build.main(["--only", "criu"]) == 1
    assert "error: cannot download x" in capsys.readouterr().err


def test_the_criu_folder_follows_containerd2_on_containerd_path(tmp_path: Path) -> None:
    c2, criu = tmp_path / "c2", tmp_path / "criu"
    env = containerd_environment(c2, {"PATH": "/usr/bin"}, criu)
    assert env is not None
    assert env["PATH"] == f"{c2}:{criu}:/usr/bin"
    only = containerd_environment(None, {"PATH": "/usr/bin"}, criu)
    assert only is not None
    assert only["PATH"] == f"{criu}:/usr/bin"
