"""The snapshot flags and references: every bad value gets an error that names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_agent_sandbox.extensions.snapshot.agent import main, parse_target
from kube_agent_sandbox.extensions.snapshot.settings import (
    RegistrySettings,
    SettingsError,
    parse_settings,
)
from kube_agent_sandbox.extensions.snapshot.status import split_image


def test_good_settings() -> None:
    settings = parse_settings("https://registry.example:5000/", "ops/creds", "", "snaps/team")
    assert settings == RegistrySettings(
        url="https://registry.example:5000", secret=("ops", "creds"), prefix="snaps/team"
    )
    assert settings.host == "registry.example:5000"
    assert settings.repository("ns", "Box") == "snaps/team/ns/box"
    assert settings.repository("ns", "box", "mine/x") == "snaps/team/mine/x"


@pytest.mark.parametrize(
    ("url", "secret", "ca", "prefix", "flag"),
    [
        ("registry.example", "", "", "p", "--snapshot-registry"),
        ("ftp://registry.example", "", "", "p", "--snapshot-registry"),
        ("https://registry.example/v2", "", "", "p", "--snapshot-registry"),
        ("https://user@registry.example", "", "", "p", "--snapshot-registry"),
        ("https://registry.example", "nameonly", "", "p", "--snapshot-registry-secret"),
        ("https://registry.example", "Ns/Name", "", "p", "--snapshot-registry-secret"),
        ("https://registry.example", "", "", "Upper/Case", "--snapshot-repository-prefix"),
        ("https://registry.example", "", "/nonexistent/ca.pem", "p", "--snapshot-registry-ca"),
    ],
)
def test_bad_settings_name_the_flag(url: str, secret: str, ca: str, prefix: str, flag: str) -> None:
    with pytest.raises(SettingsError, match=flag):
        parse_settings(url, secret, ca, prefix)


def test_a_ca_file_that_is_not_pem_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(SettingsError, match="--snapshot-registry-ca"):
        parse_settings("https://r.example", "", str(bad), "p")


def test_targets_and_images_parse() -> None:
    target = parse_target("r.example:5000/a/b/c:tag-1")
    assert (target.registry_host, target.repository, target.tag) == (
        "r.example:5000",
        "a/b/c",
        "tag-1",
    )
    digest = "sha256:" + "a" * 64
    assert split_image(f"r.example:5000/a/b@{digest}") == ("r.example:5000", "a/b", digest)


@pytest.mark.parametrize("bad", ["", "r.example", "r.example/a", "r.example/:t"])
def test_a_bad_target_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="host/repository:tag"):
        parse_target(bad)


@pytest.mark.parametrize("bad", ["r.example/a:tag", "a@sha256:x", "r.example/a@md5:1"])
def test_a_bad_image_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="host/repository@sha256"):
        split_image(bad)


def test_the_agent_needs_its_node_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["--snapshot-registry", "https://r.example"]) == 2
    assert "--node-name" in capsys.readouterr().err


def test_the_agent_refuses_a_bad_registry_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--node-name", "n1", "--snapshot-registry", "r.example"]) == 2
    assert "--snapshot-registry" in capsys.readouterr().err
