"""``mcp``: what an MCP tool call costs on top of the call it wraps (issue 24).

Each tool runs one backend call; the overhead is the MCP client's time for the tool minus the
time of that backend call made directly, both timed on this machine in interleaved rounds:

- **stdio, kubeconfig**: ``agent-sandbox mcp`` as a subprocess, the official Python client's
  ``describe_sandbox`` against ``KubeBackend.describe`` (an SDK ``get``) in-process;
- **stdio, gateway**: ``agent-sandbox mcp --gateway`` and ``run_command`` (``true``) against
  ``E2BBackend.run_command`` over the same gateway (kwok pods run nothing, so commands go to a
  local ``sandboxd`` through the gateway's testing-only address override);
- **Streamable HTTP**: the gateway's ``/mcp`` with the client's ``describe_sandbox`` and
  ``run_command`` against the same E2B calls made directly with httpx.

Targets (p50 overhead): 5 ms over stdio, 15 ms over HTTP. Reported, never asserted.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import httpx
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from benchlib.cli import cli_executable
from benchlib.clusterenv import NAMESPACE
from benchlib.gateway import gateway_stack
from benchlib.harness import Context, ControllerSpec, run_scenario
from benchlib.report import BenchResult, at_most
from benchlib.stats import summarize
from benchlib.workload import add_latency_rows
from kube_agent_sandbox.sdk import AsyncSandboxClient, load_kubeconfig
from kube_agent_sandbox.sdk.mcp.e2b_backend import E2BBackend
from kube_agent_sandbox.sdk.mcp.kube_backend import KubeBackend

TEMPLATE_ID: Final = "bench-mcp"
STDIO_TARGET_MS: Final = 5.0
HTTP_TARGET_MS: Final = 15.0
WARMUP: Final = 3

Call = Callable[[], Awaitable[Any]]


@dataclass(frozen=True)
class McpSizes:
    """Timed calls per pair, and the set-up's timeout."""

    calls: int = 200
    within: float = 300.0


def run(sizes: McpSizes, *, spec: ControllerSpec, keep_workdir: bool = False) -> BenchResult:
    """Run the MCP overhead scenario against our controller."""

    async def body(ctx: Context) -> None:
        await _scenario(ctx, sizes)

    return run_scenario(
        "mcp", params={"calls": sizes.calls}, spec=spec, nodes=1, body=body,
        keep_workdir=keep_workdir,
    )  # fmt: skip


def tool(client: Client, name: str, **arguments: Any) -> Call:
    """A call of tool ``name`` that raises when the tool reports an error."""

    async def call() -> None:
        result = await client.call_tool(name, arguments)
        if not isinstance(result, CallToolResult) or result.is_error:
            raise RuntimeError(f"{name} failed: {result}")

    return call


async def paired(direct: Call, via_mcp: Call, calls: int) -> tuple[list[float], list[float]]:
    """Seconds of ``direct`` and ``via_mcp``, interleaved, after :data:`WARMUP` rounds."""
    times: tuple[list[float], list[float]] = ([], [])
    for round_ in range(WARMUP + calls):
        for call, into in ((direct, times[0]), (via_mcp, times[1])):
            began = time.perf_counter()
            await call()
            if round_ >= WARMUP:
                into.append(time.perf_counter() - began)
    return times


def add_pair(
    result: BenchResult, label: str, pair: tuple[list[float], list[float]], target_ms: float
) -> None:
    """Latency rows of both sides and the p50 overhead against its target."""
    add_latency_rows(result, f"{label} direct", pair[0])
    add_latency_rows(result, f"{label} via MCP", pair[1])
    via_mcp, direct = summarize(pair[1]).p50, summarize(pair[0]).p50
    overhead = None if via_mcp is None or direct is None else (via_mcp - direct) * 1000
    result.add(
        f"{label} overhead p50",
        overhead,
        "ms",
        target=f"<= {target_ms:g} ms",
        check=at_most(target_ms),
    )


async def _scenario(ctx: Context, sizes: McpSizes) -> None:
    async with gateway_stack(
        ctx, template_id=TEMPLATE_ID, replicas=3, within=sizes.within
    ) as stack:
        await _measure(ctx, url=stack.url, key=stack.key, sizes=sizes)


async def _measure(ctx: Context, *, url: str, key: str, sizes: McpSizes) -> None:
    assert ctx.env.access is not None
    kubeconfig = ctx.env.access.kubeconfig
    result, n = ctx.result, sizes.calls
    base_env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    cli = cli_executable()
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as http:
        gateway = E2BBackend(http, key)
        box = (
            await gateway.get_sandbox("pool", TEMPLATE_ID, timeout_seconds=600, env={})
        ).sandbox_id

        async def direct_run() -> None:
            await gateway.run_command(box, "true", time_limit=30, cwd=None, env={})

        async def direct_describe() -> None:
            await gateway.describe(box)

        headers = {"Authorization": f"Bearer {key}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60, trust_env=False) as http2,
            Client(streamable_http_client(f"{url}/mcp", http_client=http2)) as over_http,
        ):
            pair = await paired(
                direct_describe, tool(over_http, "describe_sandbox", sandbox_id=box), n
            )
            add_pair(result, "HTTP describe_sandbox", pair, HTTP_TARGET_MS)
            run = tool(over_http, "run_command", sandbox_id=box, command="true")
            add_pair(result, "HTTP run_command", await paired(direct_run, run, n), HTTP_TARGET_MS)

        params = StdioServerParameters(
            command=cli, args=["mcp", "--gateway", url],
            env={**base_env, "AGENT_SANDBOX_API_KEY": key},
        )  # fmt: skip
        async with Client(params) as over_stdio:
            run = tool(over_stdio, "run_command", sandbox_id=box, command="true")
            pair = await paired(direct_run, run, n)
            add_pair(result, "stdio (gateway) run_command", pair, STDIO_TARGET_MS)
        await gateway.delete(box)

    config = load_kubeconfig(kubeconfig)
    async with AsyncSandboxClient(config, namespace=NAMESPACE) as sdk:
        kube = KubeBackend(sdk)
        name = (await kube.get_sandbox("pool", TEMPLATE_ID, timeout_seconds=600, env={})).sandbox_id

        async def direct_get() -> None:
            await kube.describe(name)

        params = StdioServerParameters(
            command=cli, args=["--kubeconfig", str(kubeconfig), "-n", NAMESPACE, "mcp"],
            env=base_env,
        )  # fmt: skip
        async with Client(params) as over_stdio:
            pair = await paired(
                direct_get, tool(over_stdio, "describe_sandbox", sandbox_id=name), n
            )
            add_pair(result, "stdio (kubeconfig) describe_sandbox", pair, STDIO_TARGET_MS)
    result.notes.append(
        f"{os.cpu_count()} CPUs; {n} calls per pair after {WARMUP} warm-up rounds, interleaved; "
        f"Python {sys.version.split()[0]}; overhead = p50 via MCP - p50 direct"
    )
