"""The data plane end to end: the real e2b SDK through the gateway to a local sandboxd.

Against the session's local cluster (kwok nodes: pods become Ready without containers), this
runs the controller (``--extensions``, as its generated RBAC), a local ``sandboxd`` standing in
for every sandbox's envd, and the gateway with every pod address rewritten to
127.0.0.1 and port 49983 mapped to that sandboxd (``pod_address_override``/``pod_port_map``:
testing only). The unmodified ``e2b`` SDK creates a sandbox through the control plane, then
runs commands and moves files through the data plane; the same calls go once directly to
sandboxd, and the round trips of both paths are logged (the note's numbers). The gateway runs
as its own process (``agent-sandbox-gateway serve``, admin credentials: RBAC is the
acceptance suite's concern) so the client and the gateway do not share one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2b import AsyncSandbox, CommandExitException, ConnectionConfig
from packaging.version import Version

from kube_agent_sandbox.controller.runtime import ApiClient, load_kubeconfig
from kube_agent_sandbox.gateway.daemon_client import ENVD_VERSION
from kube_agent_sandbox.gateway.tenants import create_key
from kube_agent_sandbox.testing.access import ClusterAccess
from kube_agent_sandbox.testing.controller_runner import ControllerRunner
from kube_agent_sandbox.testing.gateway import (
    ENVD_PORT,
    gateway_argv,
    kwok_template_spec,
    start_controller,
    start_daemon,
    wait_gateway_healthy,
    wait_warm_pool_ready,
    warm_template,
    write_hmac_secret,
)
from kube_agent_sandbox.testing.plugin import namespace_name
from kube_agent_sandbox.testing.probes import free_port
from kube_agent_sandbox.testing.processes import ManagedProcess, ProcessSupervisor

pytestmark = pytest.mark.integration

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[4]
TEMPLATE = "base"


@dataclass(frozen=True)
class Backend:
    """The controller, sandboxd and a tenant namespace with a warm template."""

    namespace: str
    sandboxd_port: int
    sandboxd: ManagedProcess
    workdir: Path


@pytest.fixture(scope="module")
def backend(
    cluster: ClusterAccess,
    agent_sandbox_crds: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Backend]:
    assert "sandboxwarmpools.extensions.agents.x-k8s.io" in agent_sandbox_crds
    workdir = tmp_path_factory.mktemp("gateway-dataplane")
    home = workdir / "home"
    home.mkdir()
    namespace = namespace_name("gateway-dataplane")
    runner = ControllerRunner(cluster, workdir / "runner")
    supervisor = ProcessSupervisor(workdir / "logs")
    try:
        # The controller's identity creates the namespace.
        start_controller(runner, namespace=namespace, repo_root=REPO)
        sandboxd, port = start_daemon(
            supervisor, "sandboxd", ["kube_agent_sandbox.sandboxd"], cwd=home
        )
        cluster.apply(
            warm_template(
                TEMPLATE, template_spec=kwok_template_spec("e2b-base:test"), namespace=namespace
            )
        )
        wait_warm_pool_ready(cluster, TEMPLATE, namespace=namespace)
        yield Backend(namespace=namespace, sandboxd_port=port, sandboxd=sandboxd, workdir=home)
    finally:
        supervisor.stop_all()
        runner.close()
        cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")


@dataclass(frozen=True)
class Gateway:
    """The gateway (its own process, as deployed) and a tenant key."""

    url: str
    api_key: str


@pytest.fixture
async def gateway(
    cluster: ClusterAccess, backend: Backend, tmp_path: Path
) -> AsyncIterator[Gateway]:
    secret = write_hmac_secret(tmp_path / "hmac")
    port = free_port()
    supervisor = ProcessSupervisor(tmp_path / "logs")
    process = supervisor.start(
        "gateway",
        gateway_argv(
            port=port,
            kubeconfig=str(cluster.kubeconfig),
            secret_file=secret,
            namespace=backend.namespace,
            gateway_namespace=backend.namespace,
            pod_address_override="127.0.0.1",
            port_map={ENVD_PORT: backend.sandboxd_port},
        ),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        await asyncio.to_thread(wait_gateway_healthy, url, process=process)
        async with ApiClient(load_kubeconfig(str(cluster.kubeconfig))) as api:
            key, _info = await create_key(
                api, backend.namespace, gateway_namespace=backend.namespace
            )
        yield Gateway(url=url, api_key=key)
    finally:
        supervisor.stop_all()


def _direct(sandbox: AsyncSandbox, backend: Backend) -> AsyncSandbox:
    """The same sandbox reached without the gateway (straight to sandboxd)."""
    token = sandbox._envd_access_token
    config = ConnectionConfig(
        api_key="e2b_" + "0" * 40,
        sandbox_url=f"http://127.0.0.1:{backend.sandboxd_port}",
        extra_sandbox_headers={"X-Access-Token": str(token)},
    )
    return AsyncSandbox(
        sandbox_id=sandbox.sandbox_id,
        sandbox_domain=None,
        envd_version=Version(ENVD_VERSION),
        envd_access_token=str(token),
        traffic_access_token=None,
        connection_config=config,
    )


async def _command_round_trip(sandbox: AsyncSandbox, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await sandbox.commands.run("true")
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def _file_throughput(sandbox: AsyncSandbox, path: str, payload: bytes) -> tuple[float, float]:
    started = time.perf_counter()
    await sandbox.files.write(path, payload)
    wrote = time.perf_counter() - started
    started = time.perf_counter()
    back = await sandbox.files.read(path, format="bytes")
    read = time.perf_counter() - started
    assert bytes(back) == payload
    mib = len(payload) / (1024 * 1024)
    return mib / wrote, mib / read


async def _raw_read_mib_s(url: str, headers: dict[str, str], path: str) -> float:
    """Download throughput with plain httpx, uncompressed (the gateway's own cost).

    httpx (and so the SDK) asks for gzip by default, and sandboxd then compresses on the fly:
    with random data that is CPU-bound and hides the transport.
    """
    import httpx

    identity = {**headers, "Accept-Encoding": "identity"}
    async with httpx.AsyncClient(base_url=url, headers=identity, timeout=60) as client:
        started = time.perf_counter()
        size = 0
        async with client.stream("GET", "/files", params={"path": path}) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_raw():
                size += len(chunk)
        return size / (1024 * 1024) / (time.perf_counter() - started)


async def test_sdk_commands_and_files_through_the_gateway(
    gateway: Gateway, backend: Backend, record_property: Any
) -> None:
    sandbox = await AsyncSandbox.create(
        TEMPLATE,
        timeout=120,
        api_key=gateway.api_key,
        api_url=gateway.url,
        sandbox_url=gateway.url,
        request_timeout=60,
    )
    try:
        out: list[str] = []
        result = await sandbox.commands.run("echo hi; echo err >&2", on_stdout=out.append)
        assert result.stdout == "hi\n"
        assert result.stderr == "err\n"
        assert "".join(out) == "hi\n"
        with pytest.raises(CommandExitException) as failed:
            await sandbox.commands.run("exit 7")
        assert failed.value.exit_code == 7
        path = str(backend.workdir / f"{sandbox.sandbox_id}.txt")
        await sandbox.files.write(path, "through the gateway\n")
        assert await asyncio.to_thread(Path(path).read_text) == "through the gateway\n"
        assert await sandbox.files.read(path) == "through the gateway\n"
        assert await sandbox.files.exists(path)
        assert await sandbox.is_running()

        # The same sandbox, through the gateway and straight to sandboxd: the gateway's cost.
        direct = _direct(sandbox, backend)
        assert (await direct.commands.run("echo direct")).stdout == "direct\n"
        runs = 20
        via_gateway = await _command_round_trip(sandbox, runs)
        straight = await _command_round_trip(direct, runs)
        payload = secrets.token_bytes(16 * 1024 * 1024)
        gw_write, gw_read = await _file_throughput(sandbox, path + ".bin", payload)
        direct_write, direct_read = await _file_throughput(direct, path + ".direct", payload)
        token = str(sandbox._envd_access_token)
        route = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(ENVD_PORT)}
        raw_gw = await _raw_read_mib_s(
            gateway.url, {**route, "X-Access-Token": token}, path + ".bin"
        )
        raw_direct = await _raw_read_mib_s(
            f"http://127.0.0.1:{backend.sandboxd_port}", {"X-Access-Token": token}, path + ".bin"
        )
        numbers = {
            "raw_httpx_read_mib_s_gateway": round(raw_gw, 1),
            "raw_httpx_read_mib_s_direct": round(raw_direct, 1),
            "command_round_trip_ms_gateway": round(via_gateway * 1000, 1),
            "command_round_trip_ms_direct": round(straight * 1000, 1),
            "file_write_mib_s_gateway": round(gw_write, 1),
            "file_write_mib_s_direct": round(direct_write, 1),
            "file_read_mib_s_gateway": round(gw_read, 1),
            "file_read_mib_s_direct": round(direct_read, 1),
        }
        for name, value in numbers.items():
            record_property(name, value)
        logger.warning(
            "data plane numbers (median of %d commands, 16 MiB files): %s", runs, numbers
        )
        assert via_gateway < 5.0
    finally:
        await sandbox.kill()


async def test_wrong_token_and_unknown_ids_through_the_gateway(gateway: Gateway) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        unknown = await client.get(
            "/health",
            headers={"E2b-Sandbox-Id": "nosuchsandbox0000000", "E2b-Sandbox-Port": "49983"},
        )
        assert unknown.status_code == 502
        assert "was not found" in unknown.json()["message"]
        bad = await client.get(
            "/health", headers={"E2b-Sandbox-Id": "Bad!", "E2b-Sandbox-Port": "49983"}
        )
        assert bad.status_code == 400
