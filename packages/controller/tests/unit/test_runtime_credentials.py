"""Exec credential plugins: run off the event loop, cached until expiry, refreshed after a 401."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import sys
import time
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ApiError,
    ClusterConfig,
    ConfigError,
    Resource,
    RuntimeMetrics,
    load_kubeconfig,
)
from kube_agent_sandbox.controller.runtime.credentials import (
    CredentialError,
    ExecConfig,
    ExecSource,
    parse_exec_credential,
)
from kube_agent_sandbox.testing.pki import CertificateAuthority

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")

PLUGIN = """
import json, os, sys, time
state = sys.argv[1]
n = int(open(state).read()) + 1 if os.path.exists(state) else 1
open(state, "w").write(str(n))
open(state + ".info", "w").write(os.environ["KUBERNETES_EXEC_INFO"])
time.sleep(float(os.environ.get("PLUGIN_SLEEP", "0")))
if os.environ.get("PLUGIN_FAIL"):
    print("plugin says no", file=sys.stderr)
    sys.exit(3)
status = {"token": f"tok-{n}"}
if os.environ.get("PLUGIN_EXPIRES"):
    status["expirationTimestamp"] = os.environ["PLUGIN_EXPIRES"]
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
"""


def plugin(tmp_path: Path, *, api_version: str = V1, **env: str) -> ExecConfig:
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    return ExecConfig(
        command=sys.executable,
        api_version=api_version,
        args=(str(script), str(tmp_path / "runs")),
        env=env,
    )


def rfc3339(seconds_from_now: float) -> str:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds_from_now)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_slow_plugin_does_not_block_the_event_loop(tmp_path: Path) -> None:
    config = ClusterConfig(
        host="http://127.0.0.1:1", credentials=ExecSource(plugin(tmp_path, PLUGIN_SLEEP="2"))
    )
    ticks: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    headers = await config.request_headers()
    elapsed = time.monotonic() - started
    stop.set()
    await task
    assert headers["Authorization"] == "Bearer tok-1"
    assert elapsed >= 2.0
    during = [t for t in ticks if started <= t <= started + elapsed]
    assert len(during) >= 20  # a blocked loop would have ticked once or twice
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert max(gaps) < 0.5


async def test_concurrent_requests_share_one_run_and_cache_until_expiry(tmp_path: Path) -> None:
    source = ExecSource(plugin(tmp_path, PLUGIN_SLEEP="0.3", PLUGIN_EXPIRES=rfc3339(3600)))
    creds = await asyncio.gather(*(source.credential() for _ in range(5)))
    assert {c.token for c in creds} == {"tok-1"}
    assert (await source.credential()).token == "tok-1"
    assert source.runs == 1
    assert creds[0].expires_at is not None
    info = json.loads((tmp_path / "runs.info").read_text())
    assert info == {"apiVersion": V1, "kind": "ExecCredential", "spec": {"interactive": False}}


async def test_expired_credential_is_fetched_again(tmp_path: Path) -> None:
    # expires within the refresh margin: every request needs a new one
    source = ExecSource(plugin(tmp_path, api_version=V1BETA1, PLUGIN_EXPIRES=rfc3339(5)))
    assert (await source.credential()).token == "tok-1"
    assert (await source.credential()).token == "tok-2"
    now = [0.0]
    later = ExecSource(plugin(tmp_path, PLUGIN_EXPIRES=rfc3339(3600)), clock=lambda: now[0])
    await later.credential()
    await later.credential()
    assert later.runs == 1
    now[0] = time.time() + 7200
    assert (await later.credential()).token == "tok-4"


async def test_plugin_gets_cluster_info_when_asked(tmp_path: Path) -> None:
    cfg = plugin(tmp_path)
    cfg.provide_cluster_info = True
    cfg.cluster = {
        "server": "https://k:6443",
        "certificate-authority-data": "Q0E=",
        "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"a": 1}}],
    }
    await ExecSource(cfg).credential()
    info = json.loads((tmp_path / "runs.info").read_text())
    assert info["spec"]["cluster"] == {
        "server": "https://k:6443",
        "certificate-authority-data": "Q0E=",
        "config": {"a": 1},
    }


async def test_failing_plugin_reports_its_stderr(tmp_path: Path) -> None:
    with pytest.raises(CredentialError, match="exited with 3: plugin says no"):
        await ExecSource(plugin(tmp_path, PLUGIN_FAIL="1")).credential()
    missing = ExecConfig(command=str(tmp_path / "absent"), api_version=V1, install_hint="get it")
    with pytest.raises(CredentialError, match="get it"):
        await ExecSource(missing).credential()


async def test_hanging_plugin_times_out(tmp_path: Path) -> None:
    source = ExecSource(plugin(tmp_path, PLUGIN_SLEEP="30"), timeout=0.5)
    with pytest.raises(CredentialError, match=r"no answer within 0\.5s"):
        await source.credential()


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (b"not json", "not JSON"),
        (b'{"kind": "Other"}', "not an ExecCredential"),
        (b'{"kind": "ExecCredential", "apiVersion": "x"}', "does not match"),
        (b'{"kind": "ExecCredential", "apiVersion": "' + V1.encode() + b'"}', "no status"),
        (
            b'{"kind": "ExecCredential", "apiVersion": "' + V1.encode() + b'", "status": {}}',
            "neither token nor certificate",
        ),
        (
            b'{"kind": "ExecCredential", "apiVersion": "'
            + V1.encode()
            + b'", "status": {"token": "t", "expirationTimestamp": "soon"}}',
            "invalid expirationTimestamp",
        ),
        (
            b'{"kind": "ExecCredential", "apiVersion": "'
            + V1.encode()
            + b'", "status": {"clientCertificateData": "c"}}',
            "go together",
        ),
    ],
)
def test_invalid_plugin_output(output: bytes, message: str) -> None:
    with pytest.raises(CredentialError, match=message):
        parse_exec_credential(output, api_version=V1)


async def test_client_certificate_from_plugin_is_loaded(tmp_path: Path) -> None:
    ca = CertificateAuthority("exec-ca")
    client = ca.issue_client("exec-user", groups=[])
    script = tmp_path / "cert.py"
    status = {
        "clientCertificateData": client.cert_pem.decode(),
        "clientKeyData": client.key_pem.decode(),
    }
    doc = {"apiVersion": V1, "kind": "ExecCredential", "status": status}
    script.write_text(f"print({json.dumps(json.dumps(doc))})")
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "exec": {
                                "apiVersion": V1,
                                "command": sys.executable,
                                "args": [str(script)],
                            }
                        },
                    }
                ],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    cfg = load_kubeconfig(str(kubeconfig))
    assert "Authorization" not in await cfg.request_headers()
    assert cfg._applied_certificate == client.cert_pem.decode()
    broken = ClusterConfig(host="http://x", credentials=cfg.credentials)
    broken.credentials.invalidate()  # type: ignore[union-attr]
    with pytest.raises(CredentialError, match="https"):
        await broken.request_headers()
    with pytest.raises(ConfigError):
        load_kubeconfig(str(tmp_path / "absent"))


async def serve(handler: web.RequestHandler) -> tuple[web.AppRunner, str]:  # type: ignore[type-arg]
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def test_unauthorized_refreshes_the_credential_once(tmp_path: Path) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") == "Bearer tok-2":
            return web.json_response({"kind": "ConfigMap", "metadata": {"name": "x"}})
        return web.json_response(
            {"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401
        )

    runner, url = await serve(handler)
    try:
        source = ExecSource(plugin(tmp_path, PLUGIN_EXPIRES=rfc3339(3600)))
        config = ClusterConfig(host=url, credentials=source)
        async with ApiClient(config, metrics=RuntimeMetrics()) as client:
            obj = await client.get(CONFIGMAPS, "default", "x")
            assert obj["metadata"]["name"] == "x"
            assert seen == ["Bearer tok-1", "Bearer tok-2"]
            assert source.runs == 2
            seen.clear()
            await client.get(CONFIGMAPS, "default", "x")  # cached: no new run
            assert source.runs == 2
            # the server now rejects every token: one refresh, then the 401 surfaces
            (tmp_path / "runs").write_text("10")
            source.invalidate()
            seen.clear()
            with pytest.raises(ApiError) as err:
                await client.get(CONFIGMAPS, "default", "x")
            assert err.value.status == 401
            assert seen == ["Bearer tok-11", "Bearer tok-12"]
    finally:
        await runner.cleanup()


async def test_static_token_is_not_retried_on_401() -> None:
    calls = 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        return web.json_response(
            {"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401
        )

    runner, url = await serve(handler)
    try:
        config = ClusterConfig(host=url, static_headers={"Authorization": "Bearer fixed"})
        async with ApiClient(config, metrics=RuntimeMetrics()) as client:
            with pytest.raises(ApiError):
                await client.get(CONFIGMAPS, "default", "x")
        assert calls == 1
    finally:
        await runner.cleanup()
