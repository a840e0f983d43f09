"""``agent-sandbox mcp``: the MCP server over stdio, for an agent on this machine.

With a kubeconfig the tools act through the SDK in the client's namespace; with ``--gateway``
they act through a gateway with an API key (for a machine without cluster credentials).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import httpx

from kube_agent_sandbox.sdk import AsyncSandboxClient
from kube_agent_sandbox.sdk.config import ClusterConfig
from kube_agent_sandbox.sdk.mcp.backend import SandboxBackend
from kube_agent_sandbox.sdk.mcp.e2b_backend import E2BBackend
from kube_agent_sandbox.sdk.mcp.kube_backend import KubeBackend
from kube_agent_sandbox.sdk.mcp.tools import build_server


@dataclass(frozen=True)
class StdioOptions:
    """Where the tools act and the limits they keep."""

    config: ClusterConfig | None = None
    namespace: str | None = None
    context: str | None = None
    gateway_url: str | None = None
    api_key: str | None = None
    file_root: str = "/"
    output_limit: int = 20_000


@contextlib.asynccontextmanager
async def open_backend(options: StdioOptions) -> AsyncIterator[SandboxBackend]:
    """The backend ``options`` select, closed on exit (sandboxes are left running)."""
    if options.gateway_url:
        if not options.api_key:
            raise ValueError("--gateway needs an API key (--api-key or $AGENT_SANDBOX_API_KEY)")
        async with httpx.AsyncClient(
            base_url=options.gateway_url, timeout=httpx.Timeout(None)
        ) as http:
            yield E2BBackend(http, options.api_key)
        return
    client = AsyncSandboxClient(
        options.config, namespace=options.namespace, context=options.context
    )
    try:
        yield KubeBackend(client)
    finally:
        await client.close()


async def serve(options: StdioOptions) -> None:
    """Serve until the client closes stdin."""
    async with open_backend(options) as backend:
        server = build_server(
            lambda _ctx: backend, file_root=options.file_root, output_limit=options.output_limit
        )
        await server.run_stdio_async()


def run(options: StdioOptions) -> None:
    """Blocking entry point of the CLI command."""
    anyio.run(serve, options)
