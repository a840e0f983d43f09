"""``agent-sandbox mcp``: registered on the CLI's app without importing ``mcp`` at start-up.

The command's body imports the MCP server only when it runs, so ``agent-sandbox --help`` and
every other command start as fast as before (``test_sdk_startup.py`` checks it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from kube_agent_sandbox.sdk.cli.app import State

INSTALL_HINT = "the MCP server needs its extra: pip install 'kube-agent-sandbox-sdk[mcp]'"


def register(app: typer.Typer, state: State) -> None:
    """Add the ``mcp`` command to ``app``."""

    @app.command("mcp")
    def mcp_command(
        gateway: Annotated[
            str | None,
            typer.Option(help="Gateway URL: act through it with an API key, not a kubeconfig."),
        ] = None,
        api_key: Annotated[
            str | None,
            typer.Option(help="Gateway API key (default: $AGENT_SANDBOX_API_KEY)."),
        ] = None,
        file_root: Annotated[
            str, typer.Option(help="File tools refuse paths outside this folder.")
        ] = "/",
        output_limit: Annotated[
            int, typer.Option(help="Characters of command output kept (then truncated).")
        ] = 20_000,
    ) -> None:
        """Serve the sandbox tools to an MCP client (Claude, Cursor...) over stdio."""
        try:
            from kube_agent_sandbox.sdk.mcp import stdio
        except ImportError as exc:
            raise typer.BadParameter(INSTALL_HINT) from exc
        from kube_agent_sandbox.sdk.config import load_kubeconfig

        config = None
        if state.kubeconfig is not None and gateway is None:
            config = load_kubeconfig(state.kubeconfig, context=state.context)
        options = stdio.StdioOptions(
            config=config,
            namespace=state.namespace,
            context=state.context,
            gateway_url=gateway,
            api_key=api_key or os.environ.get("AGENT_SANDBOX_API_KEY"),
            file_root=file_root,
            output_limit=output_limit,
        )
        stdio.run(options)
