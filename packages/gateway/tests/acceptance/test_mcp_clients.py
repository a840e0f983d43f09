"""Issue 24: real MCP clients against the tools, on the local cluster and the gateway stack.

The official Python client over Streamable HTTP (the gateway's ``/mcp``, with a tenant's API
key) and over stdio (``agent-sandbox mcp`` as a subprocess, through the gateway and with a
kubeconfig), and the TypeScript SDK's client from npm (``test_mcp_typescript.py``). Each runs
:mod:`mcp_scenario`: claim from a warm pool, write a file, run Python that reads it, get an
image, delete; and the bad inputs, after which the server must still answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).parent))
import mcp_scenario

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

POOL = "code-interpreter-v1"
CLI = Path(sys.executable).with_name("agent-sandbox")


def http_client(stack: Any, key: str) -> Client:
    """The official client over Streamable HTTP with ``key`` as a bearer token."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120)
    return Client(streamable_http_client(f"{stack.url}/mcp", http_client=http))


def stdio_client(*args: str, env: dict[str, str] | None = None) -> Client:
    """The official client over stdio, running ``agent-sandbox [args]``."""
    base = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    params = StdioServerParameters(command=str(CLI), args=list(args), env={**base, **(env or {})})
    return Client(params, read_timeout_seconds=120)


async def kill_behind_the_servers_back(stack: Any, box: str) -> None:
    """Delete the sandbox with the E2B API (as an expiry would) and wait until it is gone."""
    headers = {"X-API-KEY": stack.api_key}
    async with httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=30) as http:
        killed = await http.delete(f"/sandboxes/{box}")
        assert killed.status_code == 204, killed.text
        for _ in range(300):
            if (await http.get(f"/sandboxes/{box}")).status_code == 404:
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"the gateway still serves {box} 30 s after its kill")


def test_mcp_without_a_key_is_refused(gateway_stack: Any) -> None:
    response = httpx.post(f"{gateway_stack.url}/mcp", json={}, timeout=10)
    assert response.status_code == 401
    assert "API key" in response.json()["error"]


async def test_python_client_over_streamable_http(gateway_stack: Any) -> None:
    root = str(gateway_stack.workdir)
    async with http_client(gateway_stack, gateway_stack.api_key) as client:
        seen = await mcp_scenario.run(client, pool=POOL, root=root)
        assert "list_sandboxes" in seen["after_delete"], seen["after_delete"]
        (content,) = seen["resource"].contents
        assert content.blob or content.text


async def test_another_tenant_cannot_reach_the_sandbox(gateway_stack: Any) -> None:
    async with http_client(gateway_stack, gateway_stack.api_key) as owner:
        got = json.loads(await mcp_scenario.call(owner, "get_sandbox", name=POOL))
        box = got["sandbox_id"]
        try:
            async with http_client(gateway_stack, gateway_stack.other_tenant_key) as other:
                for tool, extra in (
                    ("describe_sandbox", {}),
                    ("run_command", {"command": "true"}),
                    ("read_file", {"path": "x"}),
                    ("delete_sandbox", {}),
                ):
                    message = await mcp_scenario.call_error(other, tool, sandbox_id=box, **extra)
                    assert f"no sandbox {box!r} of yours" in message, message
                listed = json.loads(await mcp_scenario.call(other, "list_sandboxes"))
                assert box not in {item["sandbox_id"] for item in listed}
        finally:
            await mcp_scenario.call(owner, "delete_sandbox", sandbox_id=box)


async def test_python_client_over_stdio_through_the_gateway(gateway_stack: Any) -> None:
    root = str(gateway_stack.workdir)
    args = ["mcp", "--gateway", gateway_stack.url, "--file-root", root]
    env = {"AGENT_SANDBOX_API_KEY": gateway_stack.api_key, "NO_PROXY": "127.0.0.1"}
    async with stdio_client(*args, env=env) as client:
        await mcp_scenario.run(client, pool=POOL, root=root)


async def test_python_client_over_stdio_with_a_kubeconfig(gateway_stack: Any, cluster: Any) -> None:
    """The SDK backend: lifecycle on kwok; commands fail cleanly (kwok pods run nothing)."""
    args = ["--kubeconfig", str(cluster.kubeconfig), "-n", gateway_stack.namespace, "mcp"]
    async with stdio_client(*args) as client:
        await mcp_scenario.check_tools(client)
        got = json.loads(await mcp_scenario.call(client, "get_sandbox", name=POOL))
        box = got["sandbox_id"]
        described = json.loads(await mcp_scenario.call(client, "describe_sandbox", sandbox_id=box))
        assert described["state"] == "ready", described
        assert described["details"]["claim"], described
        message = await mcp_scenario.call_error(
            client, "run_command", sandbox_id=box, command="true"
        )
        assert "could not run" in message, message
        await mcp_scenario.call(client, "delete_sandbox", sandbox_id=box)
        message = await mcp_scenario.call_error(client, "describe_sandbox", sandbox_id="gone-box")
        assert "list_sandboxes" in message, message


async def test_a_timeout_and_an_expiry_are_tool_errors_that_say_so(gateway_stack: Any) -> None:
    """A command past its timeout is killed; a sandbox removed behind the agent's back (as an
    expiry does) says it no longer exists, not a bare 404 or a crash."""
    async with http_client(gateway_stack, gateway_stack.api_key) as client:
        box = json.loads(await mcp_scenario.call(client, "get_sandbox", name=POOL))["sandbox_id"]
        message = await mcp_scenario.call_error(
            client, "run_command", sandbox_id=box, command="echo started; sleep 3017",
            timeout_seconds=1,
        )  # fmt: skip
        assert "timed out after 1.0 s and was killed" in message, message
        assert "started" in message, message
        left = await mcp_scenario.call(
            client, "run_command", sandbox_id=box, command="ps -eo args | grep '[s]leep 3017'"
        )
        assert json.loads(left)["stdout"] == "", left
        await kill_behind_the_servers_back(gateway_stack, box)
        message = await mcp_scenario.call_error(
            client, "run_command", sandbox_id=box, command="true"
        )
        assert "no longer exists: it expired or was deleted" in message, message
        assert "get_sandbox" in message, message
        await mcp_scenario.call(client, "list_sandboxes")
