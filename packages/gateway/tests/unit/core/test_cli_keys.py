"""``agent-sandbox-gateway keys``: a key is printed once, stored only as a hash, never logged."""

from __future__ import annotations

import logging
from types import TracebackType

import pytest

from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import FakeApi
from kube_agent_sandbox.gateway import cli, tenants
from kube_agent_sandbox.gateway.annotations import LABEL_API_KEY


class _FakeClient(FakeApi):
    """A FakeApi usable as ``async with ApiClient(...)``."""

    async def __aenter__(self) -> _FakeClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> _FakeClient:
    api = _FakeClient()
    monkeypatch.setattr(cli, "load_config", lambda _path: object())
    monkeypatch.setattr(cli, "ApiClient", lambda _config, **_kw: api)
    return api


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_keys_create_list_revoke(
    fake_cluster: _FakeClient,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    code, out, _ = _run(["keys", "create", "--namespace=team", "--name=ci"], capsys)
    assert code == 0
    key = out.strip()
    assert tenants.is_valid_key(key)
    assert key not in caplog.text
    (secret,) = fake_cluster.objects(SECRETS)
    assert key not in str(secret)
    assert tenants.stored_hash(secret) == tenants.hash_key(key)
    # in the gateway's namespace (the install's by default), granting the tenant
    assert secret["metadata"]["namespace"] == "agent-sandbox-system"
    assert tenants.key_tenant(secret) == "team"
    code, out, _ = _run(["keys", "list", "--namespace=team"], capsys)
    assert code == 0
    key_id = tenants.hash_key(key)[:12]
    assert out.startswith(f"{key_id}\tteam\t")
    assert "ci" in out
    assert key not in out
    code, out, _ = _run(["keys", "list", "--namespace=other"], capsys)
    assert (code, out) == (0, "")
    code, out, _ = _run(["keys", "list", "--gateway-namespace=elsewhere"], capsys)
    assert (code, out) == (0, "")
    code, out, err = _run(["keys", "revoke", "--namespace=team", "0" * 12], capsys)
    assert code == 1
    assert "no such key" in err
    code, _, err = _run(["keys", "revoke", "--namespace=team", "garbage"], capsys)
    assert code == 1
    assert "12-hex-digit" in err
    code, out, _ = _run(["keys", "revoke", "--namespace=team", key_id], capsys)
    assert code == 0
    assert fake_cluster.objects(SECRETS) == []
    assert key not in caplog.text


def test_keys_report_cluster_errors(
    fake_cluster: _FakeClient, capsys: pytest.CaptureFixture[str]
) -> None:
    from kube_agent_sandbox.controller.runtime import ApiError

    fake_cluster.fail("create", "secrets", ApiError(403, "Forbidden", "secrets is forbidden"))
    code, out, err = _run(["keys", "create", "--namespace=team"], capsys)
    assert code == 1
    assert out == ""
    assert "forbidden" in err


def test_keys_refuse_bad_namespace_names(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["keys", "create", "--namespace=Team_A"],
        ["keys", "list", "--gateway-namespace=a.b"],
        ["keys", "migrate", "--gateway-namespace="],
        ["serve", "--gateway-namespace=-x"],
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2
        assert "is not a valid namespace name" in capsys.readouterr().err


def test_keys_migrate(fake_cluster: _FakeClient, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["keys", "migrate"], capsys)
    assert (code, out) == (0, "no API keys stored the old way\n")
    key = tenants.generate_key()
    old = tenants.key_secret("team", key, gateway_namespace="team")
    old["metadata"]["labels"] = {LABEL_API_KEY: "true"}
    fake_cluster.add(SECRETS, old)
    code, out, _ = _run(["keys", "migrate", "--gateway-namespace=gw"], capsys)
    ident = tenants.hash_key(key)[:12]
    assert (code, out) == (0, f"team/gateway-api-key-{ident}\t{ident}\tcopied\n")
    code, out, _ = _run(["keys", "list", "--gateway-namespace=gw"], capsys)
    assert out.startswith(f"{ident}\tteam\t")
    code, out, _ = _run(["keys", "migrate", "--gateway-namespace=gw", "--delete-old"], capsys)
    assert code == 0
    assert out.endswith("\talready migrated\told Secret deleted\n")
    assert fake_cluster.obj(SECRETS, f"gateway-api-key-{ident}", "team") is None
    # a Secret that holds no key is named, and the command fails
    broken = tenants.key_secret("team", tenants.generate_key(), gateway_namespace="team")
    broken["metadata"]["labels"] = {LABEL_API_KEY: "true"}
    broken["data"]["sha256"] = "!!"
    fake_cluster.add(SECRETS, broken)
    code, out, _ = _run(["keys", "migrate", "--gateway-namespace=gw"], capsys)
    assert code == 1
    assert "\t-\tskipped\tholds no valid key hash\n" in out
