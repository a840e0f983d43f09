"""Tokens, API keys, error bodies, sandbox ids, options and flags, host parsing, /init."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import httpx
import pytest

from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import ApiError, FakeApi
from kube_agent_sandbox.gateway import cli, tenants
from kube_agent_sandbox.gateway.annotations import ANNOTATION_ENV_KEPT, LABEL_API_KEY_TENANT
from kube_agent_sandbox.gateway.app import parse_host
from kube_agent_sandbox.gateway.config import GatewayOptions, parse_listen, parse_port_map
from kube_agent_sandbox.gateway.controlplane.ids import (
    is_sandbox_id,
    keyed_sandbox_id,
    new_sandbox_id,
)
from kube_agent_sandbox.gateway.daemon_client import InitError, init_daemon
from kube_agent_sandbox.gateway.envvars import EnvNotRestored, env_secret, load_env
from kube_agent_sandbox.gateway.errors import e2b_error
from kube_agent_sandbox.gateway.tokens import Tokens, load_secret, verify


# -- tokens ------------------------------------------------------------------------------------
def test_tokens_are_deterministic_per_claim_and_kind() -> None:
    tokens = Tokens(b"s" * 32)
    envd = tokens.envd_access_token("uid-1")
    assert envd == Tokens(b"s" * 32).envd_access_token("uid-1")
    assert envd != tokens.envd_access_token("uid-2")
    assert envd != tokens.traffic_access_token("uid-1")
    assert envd != Tokens(b"t" * 32).envd_access_token("uid-1")
    assert len(envd) == 64
    assert verify(envd, envd)
    assert not verify(envd[:-1] + "0" if envd[-1] != "0" else envd[:-1] + "1", envd)
    assert not verify(None, envd)
    assert not verify("", envd)


def test_tokens_refuse_short_secrets_and_empty_uids(tmp_path: pytest.TempPathFactory) -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        Tokens(b"short")
    with pytest.raises(ValueError, match="UID"):
        Tokens(b"s" * 32).envd_access_token("")


def test_load_secret(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    good = tmp_path / "k"
    good.write_text("  0123456789abcdef0123  \n")
    assert load_secret(str(good)) == b"0123456789abcdef0123"
    short = tmp_path / "s"
    short.write_text("abc")
    with pytest.raises(ValueError, match="at least"):
        load_secret(str(short))
    with pytest.raises(FileNotFoundError):
        load_secret(str(tmp_path / "missing"))
    assert len(load_secret(None)) == 32
    assert load_secret(None) != load_secret(None)


# -- API keys ----------------------------------------------------------------------------------
GW = "gateway-system"


def test_key_format_and_hashing() -> None:
    key = tenants.generate_key()
    assert tenants.is_valid_key(key)
    assert key.startswith("e2b_")
    assert len(key) == 44
    assert key != tenants.generate_key()
    for bad in ("", "e2b_", "e2b_" + "A" * 40, "e2b_" + "0" * 39, "x2b_" + "0" * 40, key + "0"):
        assert not tenants.is_valid_key(bad)
    secret = tenants.key_secret("ns", key, gateway_namespace=GW, name="ci")
    assert key not in json.dumps(secret)
    stored = base64.b64decode(secret["data"]["sha256"]).decode()
    assert stored == tenants.hash_key(key)
    assert secret["metadata"]["name"] == "gateway-api-key-" + stored[:12]
    # stored in the gateway's namespace, naming the tenant it grants
    assert secret["metadata"]["namespace"] == GW
    assert secret["metadata"]["labels"] == {LABEL_API_KEY_TENANT: "ns"}
    assert tenants.key_tenant(secret) == "ns"
    with pytest.raises(ValueError, match="40 lowercase hex"):
        tenants.key_secret("ns", "e2b_nothex", gateway_namespace=GW)
    for tenant, gateway in (("Bad_NS", GW), ("", GW), ("ns", "x" * 64)):
        with pytest.raises(ValueError, match="not a valid namespace name"):
            tenants.key_secret(tenant, key, gateway_namespace=gateway)


async def test_authenticate_maps_keys_to_the_namespaces_they_grant() -> None:
    api = FakeApi()
    key_a, key_b, dup = tenants.generate_key(), tenants.generate_key(), tenants.generate_key()
    api.add(SECRETS, tenants.key_secret("a", key_a, gateway_namespace=GW))
    api.add(SECRETS, tenants.key_secret("b", key_b, gateway_namespace=GW))
    api.add(SECRETS, tenants.key_secret("a", dup, gateway_namespace=GW))
    second = tenants.key_secret("b", dup, gateway_namespace=GW)
    second["metadata"]["name"] += "-copy"
    api.add(SECRETS, second)
    garbage = tenants.key_secret("a", tenants.generate_key(), gateway_namespace=GW)
    garbage["metadata"]["name"] = "garbage"
    garbage["data"]["sha256"] = "!!notbase64"
    api.add(SECRETS, garbage)
    no_tenant = tenants.generate_key()
    unlabelled = tenants.key_secret("a", no_tenant, gateway_namespace=GW)
    unlabelled["metadata"]["labels"][LABEL_API_KEY_TENANT] = "Not_A_Namespace"
    api.add(SECRETS, unlabelled)
    reader = api.reader(SECRETS, indexes={tenants.KEY_HASH_INDEX: tenants.key_hash_index})
    unknown: list[str] = []
    auth = tenants.Tenants(reader, on_unknown=unknown.append)
    tenant = auth.authenticate(key_a)
    assert tenant is not None
    assert tenant.namespace == "a"
    assert tenant.key_id == tenants.hash_key(key_a)[:12]
    other = auth.authenticate(key_b)
    assert other is not None
    assert other.namespace == "b"
    assert auth.authenticate(dup) is None  # ambiguous: refused
    assert auth.authenticate(no_tenant) is None  # grants no valid namespace
    stranger = tenants.generate_key()
    assert auth.authenticate(stranger) is None
    assert auth.authenticate(None) is None
    assert auth.authenticate("") is None
    assert auth.authenticate(key_a.upper()) is None
    # only well-formed keys no Secret holds are reported (a malformed one is no key at all)
    assert unknown == [tenants.hash_key(no_tenant)[:12], tenants.hash_key(stranger)[:12]]
    # a gateway serving one namespace refuses the other tenants' keys
    only_a = tenants.Tenants(reader, only_namespace="a")
    assert only_a.authenticate(key_a) == tenant
    assert only_a.authenticate(key_b) is None


async def test_create_list_revoke_keys() -> None:
    api = FakeApi()
    key, info = await tenants.create_key(api, "team", gateway_namespace=GW, name="laptop")
    assert tenants.is_valid_key(key)
    assert info.namespace == "team"
    assert info.name == "laptop"
    assert api.obj(SECRETS, "gateway-api-key-" + info.key_id, GW) is not None
    _, other = await tenants.create_key(api, "elsewhere", gateway_namespace=GW)
    listed = await tenants.list_keys(api, gateway_namespace=GW, tenant="team")
    assert [i.key_id for i in listed] == [info.key_id]
    everything = await tenants.list_keys(api, gateway_namespace=GW)
    assert [(i.namespace, i.key_id) for i in everything] == [
        ("elsewhere", other.key_id),
        ("team", info.key_id),
    ]
    assert await tenants.list_keys(api, gateway_namespace="team") == []
    with pytest.raises(ValueError, match="12-hex-digit"):
        await tenants.revoke_key(api, "nope", gateway_namespace=GW)
    assert not await tenants.revoke_key(api, "0" * 12, gateway_namespace=GW)
    # revoking as one tenant never deletes another tenant's key
    assert not await tenants.revoke_key(api, other.key_id, gateway_namespace=GW, tenant="team")
    assert await tenants.revoke_key(api, key, gateway_namespace=GW, tenant="team")
    assert await tenants.list_keys(api, gateway_namespace=GW, tenant="team") == []
    assert await tenants.revoke_key(api, other.key_id, gateway_namespace=GW)
    assert await tenants.list_keys(api, gateway_namespace=GW) == []


# -- errors ------------------------------------------------------------------------------------
def test_e2b_error_body_and_retry_headers() -> None:
    plain = e2b_error(404, "gone")
    assert json.loads(bytes(plain.body)) == {"code": 404, "message": "gone"}
    assert "should-retry" not in plain.headers
    assert "retry-after" not in plain.headers
    busy = e2b_error(503, "busy", should_retry=True, retry_after=3, error_code="busy")
    assert busy.status_code == 503
    assert busy.headers["should-retry"] == "true"
    assert busy.headers["retry-after"] == "3"
    assert json.loads(bytes(busy.body))["error_code"] == "busy"
    assert e2b_error(500, "x", should_retry=False).headers["should-retry"] == "false"
    assert e2b_error(503, "x", retry_after=-4).headers["retry-after"] == "0"


# -- ids ---------------------------------------------------------------------------------------
def test_sandbox_ids() -> None:
    ids = {new_sandbox_id() for _ in range(500)}
    assert len(ids) == 500
    for sid in ids:
        assert is_sandbox_id(sid)
        assert len(sid) == 20
        assert "-" not in sid
        assert sid[0].isalpha()
        assert len(f"49983-{sid}") <= 63
    for bad in ("", "a" * 19, "a" * 21, "A" * 20, "a-" + "b" * 18, "1" + "a" * 19):
        assert not is_sandbox_id(bad)


def test_keyed_sandbox_ids_have_the_form_of_random_ones() -> None:
    digests = [hashlib.sha256(str(i).encode()).digest() for i in range(500)]
    ids = {keyed_sandbox_id(d) for d in digests}
    assert len(ids) == 500
    assert all(is_sandbox_id(sid) for sid in ids)
    assert keyed_sandbox_id(digests[0]) == keyed_sandbox_id(digests[0])
    assert keyed_sandbox_id(b"\x00" * 32) == "a" * 20
    with pytest.raises(ValueError, match="16 bytes"):
        keyed_sandbox_id(b"short")


# -- options and flags -------------------------------------------------------------------------
def test_options_validate() -> None:
    assert GatewayOptions().bind == ("0.0.0.0", 8080)
    assert GatewayOptions(listen="127.0.0.1:9").bind == ("127.0.0.1", 9)
    assert parse_listen("[::1]:80") == ("::1", 80)
    for listen in ("8080", "host:", "host:x", "h:70000"):
        with pytest.raises(ValueError, match="listen"):
            parse_listen(listen)
    with pytest.raises(ValueError, match="create timeout"):
        GatewayOptions(create_timeout_seconds=0)
    with pytest.raises(ValueError, match="default timeout"):
        GatewayOptions(default_timeout_seconds=0)
    with pytest.raises(ValueError, match="domain"):
        GatewayOptions(domain=".x")
    with pytest.raises(ValueError, match="port mapping"):
        GatewayOptions(pod_port_map={0: 1})
    with pytest.raises(ValueError, match="--pause-keeps-memory needs --pause-keeps-filesystem"):
        GatewayOptions(pause_keeps_memory=True, pause_keeps_filesystem=False)
    assert parse_port_map("49983=1000, 49999=1001") == {49983: 1000, 49999: 1001}
    assert parse_port_map("") == {}
    for bad in ("49983", "a=b", "1=70000", "49983=1=2"):
        with pytest.raises(ValueError, match="port mapping"):
            parse_port_map(bad)


def test_cli_serve_flags() -> None:
    args = cli.build_parser().parse_args(
        [
            "serve",
            "--listen=127.0.0.1:9000",
            "--namespace=t",
            "--domain=sbx.example.org",
            "--create-timeout=30",
            "--default-timeout=120",
            "--pod-address-override=127.0.0.1",
            "--pod-port-map=49983=5000",
            "--public-url=http://gw:9000",
            "--pause-keeps-memory",
        ]
    )
    options = cli.options_from_args(args)
    assert options.pause_keeps_memory
    assert options.listen == "127.0.0.1:9000"
    assert options.namespace == "t"
    assert options.domain == "sbx.example.org"
    assert options.create_timeout_seconds == 30
    assert options.default_timeout_seconds == 120
    assert options.pod_address_override == "127.0.0.1"
    assert options.pod_port_map == {49983: 5000}
    defaults = cli.options_from_args(cli.build_parser().parse_args(["serve"]))
    assert defaults == GatewayOptions()


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--listen=nope"],
        ["serve", "--create-timeout=0"],
        ["serve", "--create-timeout=x"],
        ["serve", "--pod-port-map=1"],
        ["serve", "--default-timeout=0"],
        ["keys", "create"],
        ["keys", "revoke", "--namespace=x"],
        ["nothing"],
    ],
)
def test_cli_rejects_bad_flags(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2


# -- host parsing ------------------------------------------------------------------------------
def test_parse_host() -> None:
    sid = "abcdefghij0123456789"
    target = parse_host(f"49983-{sid}.sbx.example.org", "sbx.example.org")
    assert target is not None
    assert (target.port, target.sandbox_id) == (49983, sid)
    with_port = parse_host(f"8080-{sid}.sbx.example.org:443", None)
    assert with_port is not None
    assert with_port.port == 8080
    assert parse_host(f"49983-{sid}.other.org", "sbx.example.org") is None
    for host in (
        "api.sbx.example.org",
        "localhost:3000",
        "127.0.0.1:8080",
        f"99999-{sid}.x.org",
        f"49983-{sid}",
        f"-{sid}.x.org",
        "49983-.x.org",
        f"49983-{sid}_x.x.org",
    ):
        assert parse_host(host, None) is None, host


# -- /init -------------------------------------------------------------------------------------
async def test_init_daemon_posts_the_body_and_retries() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(503 if len(calls) == 1 else 204)

    await init_daemon(
        ("10.0.0.1", 49983),
        access_token="tok",
        env_vars={"A": "1"},
        heartbeat_url="http://gw/_gateway/heartbeat",
        sandbox_id="abc",
        budget=2,
        retry_interval=0.01,
        transport=httpx.MockTransport(handler),
    )
    assert len(calls) == 2
    last = calls[-1]
    assert str(last.url) == "http://10.0.0.1:49983/init"
    assert last.headers["x-access-token"] == "tok"
    assert last.headers["e2b-sandbox-id"] == "abc"
    body = json.loads(last.content)
    assert body["accessToken"] == "tok"
    assert body["envVars"] == {"A": "1"}
    assert body["heartbeatUrl"] == "http://gw/_gateway/heartbeat"
    assert body["timestamp"].endswith("Z")
    assert body["sandboxId"] == "abc"


async def test_init_daemon_gives_up_after_its_budget() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(InitError, match="failed"):
        await init_daemon(
            ("fd00::1", 49983),
            access_token="tok",
            env_vars=None,
            budget=0.1,
            retry_interval=0.02,
            transport=httpx.MockTransport(handler),
        )


async def test_init_daemon_does_not_retry_a_refusal() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(401)

    with pytest.raises(InitError, match="401"):
        await init_daemon(
            ("10.0.0.1", 49983),
            access_token="tok",
            env_vars=None,
            budget=5,
            retry_interval=0.01,
            transport=httpx.MockTransport(handler),
        )
    assert len(calls) == 1


def test_env_secret_decoding_refuses_garbage() -> None:
    from kube_agent_sandbox.gateway.envvars import decode_env, env_secret

    claim = {"metadata": {"name": "abc", "namespace": "ns", "uid": "u-1"}}
    secret = env_secret(claim, {"A": "1"})
    assert secret["metadata"]["name"] == "abc-env"
    assert decode_env(secret) == {"A": "1"}
    for data in ({}, {"envVars": "!!"}, {"envVars": base64.b64encode(b"[1]").decode()}):
        assert decode_env({"data": data}) is None
    bad_value = base64.b64encode(json.dumps({"A": 1}).encode()).decode()
    assert decode_env({"data": {"envVars": bad_value}}) is None


class _SecretsRefusing:
    """A client whose Secret reads answer ``status`` (or the stored Secret when None)."""

    def __init__(self, status: int | None, stored: dict[str, Any] | None = None) -> None:
        self.status, self.stored, self.reads = status, stored, 0

    async def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        if self.status is not None:
            raise ApiError(self.status, "Refused", f"secrets {name!r} refused")
        assert self.stored is not None
        return self.stored


@pytest.mark.parametrize(
    ("kept", "status", "restored"),
    [
        ("false", 403, {}),  # created without envVars: not even read
        ("true", None, {"A": "1"}),
        ("true", 404, "its Secret is gone"),
        ("true", 403, "keys bind --namespace ns"),
        ("true", 500, "secrets 'abc-env' refused"),
        (None, 404, {}),  # a claim from before the annotation, without an environment
        (None, 403, "keys bind --namespace ns"),  # ... or with one: it may not be dropped
    ],
)
async def test_a_kept_environment_is_restored_or_the_resume_fails(
    kept: str | None, status: int | None, restored: dict[str, str] | str
) -> None:
    claim: dict[str, Any] = {"metadata": {"name": "abc", "namespace": "ns", "uid": "u-1"}}
    if kept is not None:
        claim["metadata"]["annotations"] = {ANNOTATION_ENV_KEPT: kept}
    api = _SecretsRefusing(status, env_secret(claim, {"A": "1"}))
    if isinstance(restored, dict):
        assert await load_env(api, "ns", claim) == restored  # type: ignore[arg-type]
    else:
        with pytest.raises(EnvNotRestored, match="abc: its envVars cannot be restored") as err:
            await load_env(api, "ns", claim)  # type: ignore[arg-type]
        assert restored in str(err.value)
    assert api.reads == (0 if kept == "false" else 1)


async def test_a_secret_without_an_environment_is_not_restored_as_empty() -> None:
    claim = {"metadata": {"name": "abc", "annotations": {}}}
    with pytest.raises(EnvNotRestored, match="holds no envVars"):
        await load_env(_SecretsRefusing(None, {"data": {}}), "ns", claim)  # type: ignore[arg-type]
