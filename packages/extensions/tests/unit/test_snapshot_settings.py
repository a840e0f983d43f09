"""The snapshot flags and references: every bad value gets an error that names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kube_agent_sandbox.extensions.snapshot.agent import main, parse_target
from kube_agent_sandbox.extensions.snapshot.registry import Credentials
from kube_agent_sandbox.extensions.snapshot.settings import (
    RegistrySettings,
    SettingsError,
    parse_settings,
)
from kube_agent_sandbox.extensions.snapshot.status import split_image


def test_good_settings() -> None:
    settings = parse_settings(
        "https://registry.example:5000/", "/etc/registry/.dockerconfigjson", "", "snaps/team"
    )
    assert settings == RegistrySettings(
        url="https://registry.example:5000",
        auth_file="/etc/registry/.dockerconfigjson",
        prefix="snaps/team",
    )
    assert settings.host == "registry.example:5000"
    assert settings.repository("ns", "Box") == "snaps/team/ns/box"
    assert settings.repository("ns", "box", "mine/x") == "snaps/team/mine/x"


@pytest.mark.parametrize(
    ("url", "auth_file", "ca", "prefix", "flag"),
    [
        ("registry.example", "", "", "p", "--snapshot-registry"),
        ("ftp://registry.example", "", "", "p", "--snapshot-registry"),
        ("https://registry.example/v2", "", "", "p", "--snapshot-registry"),
        ("https://user@registry.example", "", "", "p", "--snapshot-registry"),
        (
            "https://registry.example",
            "relative/auth.json",
            "",
            "p",
            "--snapshot-registry-auth-file",
        ),
        ("https://registry.example", "", "", "Upper/Case", "--snapshot-repository-prefix"),
        ("https://registry.example", "", "/nonexistent/ca.pem", "p", "--snapshot-registry-ca"),
    ],
)
def test_bad_settings_name_the_flag(
    url: str, auth_file: str, ca: str, prefix: str, flag: str
) -> None:
    with pytest.raises(SettingsError, match=flag):
        parse_settings(url, auth_file, ca, prefix)


def test_a_ca_file_that_is_not_pem_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(SettingsError, match="--snapshot-registry-ca"):
        parse_settings("https://r.example", "", str(bad), "p")


def _write_auth(path: Path, auths: object) -> str:
    path.write_text(json.dumps({"auths": auths}))
    return str(path)


async def test_the_credentials_file_is_read_at_each_client(tmp_path: Path) -> None:
    auth = _write_auth(
        tmp_path / "auth.json", {"r.example:5000": {"username": "u", "password": "1"}}
    )
    settings = parse_settings("https://r.example:5000", auth, "", "p")
    async with await settings.client() as first:
        assert first.credentials == Credentials("u", "1")
    # The kubelet rewrites a mounted Secret in place: a rotation needs no restart.
    _write_auth(tmp_path / "auth.json", {"r.example:5000": {"username": "u", "password": "2"}})
    async with await settings.client() as second:
        assert second.credentials == Credentials("u", "2")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        ("{not json", "not valid"),
        (
            json.dumps({"auths": {"other.example": {"username": "u", "password": "p"}}}),
            "no credentials for r.example",
        ),
    ],
)
async def test_unusable_credentials_files_are_named(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "auth.json"
    if content is not None:
        path.write_text(content)
    settings = parse_settings("https://r.example", str(path), "", "p")
    with pytest.raises(ValueError, match=message):
        await settings.client()


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
