"""The MCP tools and resources over a :class:`SandboxBackend`, on the official SDK's MCPServer.

Schemas come from the typed signatures (pydantic ``Field`` descriptions), so the published
JSON schema and the code cannot disagree. Every failure becomes a tool result with ``isError``
(never a protocol error or a crashed server), and arguments a tool does not declare are
refused rather than silently ignored, so a model learns its mistake.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated, Any, Final

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent, ToolAnnotations
from pydantic import Field

from kube_agent_sandbox.sdk.mcp.backend import SandboxBackend, Source, ToolFailure
from kube_agent_sandbox.sdk.mcp.confine import confine, truncate

logger = logging.getLogger(__name__)

BackendResolver = Callable[[Context], SandboxBackend]
"""The backend acting for the caller of this request (the tenant of its API key, say)."""

DEFAULT_OUTPUT_LIMIT: Final = 20_000
SERVER_INSTRUCTIONS: Final = (
    "Isolated sandboxes on Kubernetes. Call get_sandbox first (a warm pool answers fastest), "
    "then pass its sandbox_id to the other tools. Delete sandboxes you no longer need."
)

SandboxId = Annotated[str, Field(description="The sandbox_id returned by get_sandbox.")]
FilePath = Annotated[
    str, Field(description="Path in the sandbox; relative paths start at the file root.")
]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
"""A POSIX environment variable name: checked before the call, since the kubeconfig backend
exports the variables in the shell that runs the command."""
Environment = dict[EnvName, str]


class SandboxMCPServer(MCPServer[Any]):
    """MCPServer that refuses undeclared arguments and reports every failure as a tool error."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        """Check the argument names, then call; failures become ``isError`` results."""
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            allowed = set(tool.parameters.get("properties", {}))
            unknown = sorted(set(arguments) - allowed)
            if unknown:
                raise ToolError(
                    f"{name} takes no argument {', '.join(map(repr, unknown))}; "
                    f"its arguments are: {', '.join(sorted(allowed)) or 'none'}"
                )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ToolFailure):
                raise ToolError(str(cause)) from cause
            if cause is not None and not isinstance(cause, ToolFailure | ValueError):
                logger.exception("tool %s failed", name, exc_info=cause)
                raise ToolError(f"{name} failed: {type(cause).__name__}: {cause}") from cause
            raise


def _text(value: Any) -> str:
    return json.dumps(value, indent=1, default=str)


def build_server(
    resolve: BackendResolver,
    *,
    file_root: str = "/",
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    name: str = "agent-sandbox",
) -> SandboxMCPServer:
    """The MCP server: tools and the ``sandbox://`` file resources over ``resolve``'s backend."""
    server = SandboxMCPServer(name=name, instructions=SERVER_INSTRUCTIONS)
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False)
    destructive = ToolAnnotations(read_only_hint=False, destructive_hint=True)

    def path_of(path: str) -> str:
        return confine(path, file_root)

    @server.tool(structured_output=False)
    async def get_sandbox(
        ctx: Context,
        name: Annotated[
            str, Field(description="Warm pool or template name (ask the operator which exist).")
        ],
        source: Annotated[
            Source,
            Field(
                description="'pool': claim a prepared sandbox from the warm pool `name` "
                "(fastest); 'template': a new sandbox from the SandboxTemplate `name` (a cold "
                "start; servers that act through the gateway serve pools only)."
            ),
        ] = "pool",
        timeout_seconds: Annotated[
            int, Field(ge=1, le=86_400, description="Lifetime in seconds before it expires.")
        ] = 3600,
        env: Annotated[
            Environment | None, Field(description="Environment variables of the sandbox.")
        ] = None,
    ) -> str:
        """Get a sandbox to run commands and code in; returns its sandbox_id."""
        info = await resolve(ctx).get_sandbox(
            source, name, timeout_seconds=timeout_seconds, env=env or {}
        )
        return _text(asdict(info))

    @server.tool(structured_output=False, annotations=read_only)
    async def list_sandboxes(ctx: Context) -> str:
        """List my sandboxes with their state and expiry."""
        return _text([asdict(info) for info in await resolve(ctx).list_sandboxes()])

    @server.tool(structured_output=False, annotations=read_only)
    async def describe_sandbox(ctx: Context, sandbox_id: SandboxId) -> str:
        """Describe one sandbox: state, template, expiry."""
        return _text(asdict(await resolve(ctx).describe(sandbox_id)))

    @server.tool(structured_output=False)
    async def run_command(
        ctx: Context,
        sandbox_id: SandboxId,
        command: Annotated[str, Field(description="Shell command line (run with sh -c).")],
        timeout_seconds: Annotated[
            float, Field(gt=0, le=3600, description="Kill the command after this long.")
        ] = 60,
        cwd: Annotated[str | None, Field(description="Working directory.")] = None,
        env: Annotated[Environment | None, Field(description="Extra environment.")] = None,
    ) -> str:
        """Run a shell command in a sandbox; returns exit code, stdout and stderr."""
        out = await resolve(ctx).run_command(
            sandbox_id,
            command,
            time_limit=timeout_seconds,
            cwd=path_of(cwd) if cwd else None,
            env=env or {},
        )
        if out.timed_out:
            raise ToolFailure(
                f"command timed out after {timeout_seconds} s and was killed; output so far:\n"
                + truncate(out.stdout + out.stderr, output_limit)
            )
        body = {
            "exit_code": out.exit_code,
            "stdout": truncate(out.stdout, output_limit),
            "stderr": truncate(out.stderr, output_limit),
        }
        return _text(body)

    @server.tool(structured_output=False)
    async def run_code(
        ctx: Context,
        sandbox_id: SandboxId,
        code: Annotated[str, Field(description="Code to execute; state persists across calls.")],
        language: Annotated[
            str, Field(description="Interpreter language, e.g. python, javascript, bash.")
        ] = "python",
        timeout_seconds: Annotated[
            float, Field(gt=0, le=3600, description="Stop waiting for the code after this long.")
        ] = 120,
    ) -> CallToolResult:
        """Run code in the sandbox's code interpreter (Jupyter-like); returns output and images.

        The last expression's value is a result; plots (e.g. matplotlib) come back as images.
        """
        out = await resolve(ctx).run_code(
            sandbox_id, code, language=language, time_limit=timeout_seconds
        )
        body = {
            "stdout": truncate(out.stdout, output_limit),
            "stderr": truncate(out.stderr, output_limit),
            "results": [truncate(r, output_limit) for r in out.results],
            "error": out.error,
            "images": len(out.images),
        }
        blocks: list[ContentBlock] = [TextContent(type="text", text=_text(body))]
        blocks += [
            ImageContent(type="image", data=i.data, mime_type=i.mime_type) for i in out.images
        ]
        return CallToolResult(content=blocks, is_error=out.error is not None)

    @server.tool(structured_output=False, annotations=read_only)
    async def read_file(ctx: Context, sandbox_id: SandboxId, path: FilePath) -> str:
        """Read a text file from a sandbox (binary content is reported, not returned)."""
        data = await resolve(ctx).read_file(sandbox_id, path_of(path))
        try:
            return truncate(data.decode(), output_limit)
        except UnicodeDecodeError:
            return f"{path} is binary ({len(data)} bytes); read it with run_code or run_command"

    @server.tool(structured_output=False)
    async def write_file(
        ctx: Context,
        sandbox_id: SandboxId,
        path: FilePath,
        content: Annotated[str, Field(description="Text to write (UTF-8); replaces the file.")],
    ) -> str:
        """Write a text file in a sandbox, creating parent directories."""
        target = path_of(path)
        await resolve(ctx).write_file(sandbox_id, target, content.encode())
        return f"wrote {len(content.encode())} bytes to {target}"

    @server.tool(structured_output=False, annotations=read_only)
    async def list_files(ctx: Context, sandbox_id: SandboxId, path: FilePath = ".") -> str:
        """List a directory in a sandbox."""
        entries = await resolve(ctx).list_files(sandbox_id, path_of(path))
        return _text([asdict(e) for e in entries])

    @server.tool(structured_output=False, annotations=destructive)
    async def delete_file(ctx: Context, sandbox_id: SandboxId, path: FilePath) -> str:
        """Delete a file or a directory (recursively) in a sandbox."""
        target = path_of(path)
        await resolve(ctx).delete_file(sandbox_id, target)
        return f"deleted {target}"

    @server.tool(structured_output=False)
    async def suspend_sandbox(ctx: Context, sandbox_id: SandboxId) -> str:
        """Suspend a sandbox to save resources; resume_sandbox brings it back."""
        await resolve(ctx).suspend(sandbox_id)
        return f"sandbox {sandbox_id} suspended"

    @server.tool(structured_output=False)
    async def resume_sandbox(ctx: Context, sandbox_id: SandboxId) -> str:
        """Resume a suspended sandbox and wait until it is ready."""
        await resolve(ctx).resume(sandbox_id)
        return f"sandbox {sandbox_id} resumed"

    @server.tool(structured_output=False, annotations=destructive)
    async def delete_sandbox(ctx: Context, sandbox_id: SandboxId) -> str:
        """Delete a sandbox and everything in it."""
        await resolve(ctx).delete(sandbox_id)
        return f"sandbox {sandbox_id} deleted"

    @server.resource(
        "sandbox://{sandbox_id}/{+path}",
        name="sandbox-file",
        description="A file in a sandbox: sandbox://<sandbox_id>/<path under the file root>",
        mime_type="application/octet-stream",
    )
    async def sandbox_file(sandbox_id: str, path: str, ctx: Context) -> bytes:
        return await resolve(ctx).read_file(sandbox_id, path_of(path))

    return server
