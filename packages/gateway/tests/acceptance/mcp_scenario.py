"""The MCP scenario every client runs: claim, write, run Python that reads it, an image, delete.

Shared by the Python client's tests over Streamable HTTP and stdio; the TypeScript client runs
the same steps in ``mcp_ts_client.mjs``.
"""

from __future__ import annotations

import json
from typing import Any

from mcp import Client
from mcp.types import CallToolResult, ImageContent, TextContent

TOOLS = {
    "get_sandbox",
    "list_sandboxes",
    "describe_sandbox",
    "run_command",
    "run_code",
    "read_file",
    "write_file",
    "list_files",
    "delete_file",
    "suspend_sandbox",
    "resume_sandbox",
    "delete_sandbox",
}
PNG_CODE = """
import struct, zlib
def _chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
class Square:
    def _repr_png_(self):
        rows = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * 4 for _ in range(4))
        header = struct.pack('>IIBBBBB', 4, 4, 8, 2, 0, 0, 0)
        return (b'\\x89PNG\\r\\n\\x1a\\n' + _chunk(b'IHDR', header)
                + _chunk(b'IDAT', zlib.compress(rows)) + _chunk(b'IEND', b''))
Square()
"""


def text_of(result: CallToolResult) -> str:
    """The text blocks of a result, joined."""
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


async def call(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must succeed; its text."""
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    assert not result.is_error, f"{tool} failed: {text_of(result)}"
    return text_of(result)


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail as a tool error; its message."""
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    assert result.is_error, f"{tool} should have failed: {text_of(result)}"
    return text_of(result)


async def check_tools(client: Client) -> None:
    """Every tool is listed with a description and an object schema."""
    tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    for tool in tools:
        assert tool.description, tool.name
        assert tool.input_schema["type"] == "object", tool.name


async def run(client: Client, *, pool: str, root: str) -> dict[str, Any]:
    """The whole scenario on one connected client; what it saw, for the caller's checks."""
    await check_tools(client)
    got = json.loads(await call(client, "get_sandbox", name=pool, source="pool"))
    box = got["sandbox_id"]
    seen: dict[str, Any] = {"sandbox_id": box}
    listed = json.loads(await call(client, "list_sandboxes"))
    assert box in {item["sandbox_id"] for item in listed}
    await call(client, "write_file", sandbox_id=box, path="mcp/data.txt", content="hello from mcp")
    ran = json.loads(
        await call(
            client,
            "run_code",
            sandbox_id=box,
            code=f"print(open({root + '/mcp/data.txt'!r}).read().upper())",
        )
    )
    assert "HELLO FROM MCP" in ran["stdout"], ran
    image = await client.call_tool("run_code", {"sandbox_id": box, "code": PNG_CODE})
    assert isinstance(image, CallToolResult)
    assert not image.is_error, text_of(image)
    pngs = [b.mime_type for b in image.content if isinstance(b, ImageContent)]
    assert pngs == ["image/png"], image.content
    cat = await call(client, "run_command", sandbox_id=box, command="cat mcp/data.txt", cwd=".")
    command = json.loads(cat)
    assert command == {"exit_code": 0, "stdout": "hello from mcp", "stderr": ""}
    assert await call(client, "read_file", sandbox_id=box, path="mcp/data.txt") == "hello from mcp"
    entries = json.loads(await call(client, "list_files", sandbox_id=box, path="mcp"))
    assert [e["name"] for e in entries] == ["data.txt"]
    resource = await client.read_resource(f"sandbox://{box}/mcp/data.txt")
    seen["resource"] = resource
    await bad_input(client, box)
    await call(client, "delete_file", sandbox_id=box, path="mcp")
    await call(client, "delete_sandbox", sandbox_id=box)
    seen["after_delete"] = await call_error(client, "run_command", sandbox_id=box, command="true")
    return seen


async def bad_input(client: Client, box: str) -> None:
    """Each mistake is a tool error the model can act on, and the server keeps serving."""
    message = await call_error(client, "run_command", sandbox_id=box, command="true", shell="bash")
    assert "no argument 'shell'" in message, message
    assert "command" in message, message
    message = await call_error(client, "read_file", sandbox_id=box, path="../../etc/passwd")
    assert "outside the sandbox's file root" in message, message
    huge = json.loads(
        await call(
            client,
            "run_command",
            sandbox_id=box,
            command="python3 -c \"print('x' * 1000000)\"",
        )
    )
    assert "output truncated" in huge["stdout"]
    assert len(huge["stdout"]) < 30_000
    message = await call_error(client, "describe_sandbox", sandbox_id="nosuchsandbox0000000")
    assert "list_sandboxes" in message, message
    await call(client, "list_sandboxes")
