"""The MCP server's pure parts: path confinement, truncation, the interpreter's events, Connect
framing, and the published tool schemas (through the official client, in-process)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from kube_agent_sandbox.sdk.mcp.backend import ToolFailure
from kube_agent_sandbox.sdk.mcp.confine import confine, truncate
from kube_agent_sandbox.sdk.mcp.e2b_backend import envelope, read_envelopes
from kube_agent_sandbox.sdk.mcp.interpreter import read_events
from kube_agent_sandbox.sdk.mcp.tools import build_server


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a/b.txt", "/work/a/b.txt"),
        ("/work/x", "/work/x"),
        ("/work", "/work"),
        ("./a/../b", "/work/b"),
    ],
)
def test_paths_resolve_under_the_root(path: str, expected: str) -> None:
    assert confine(path, "/work") == expected


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "/workshop/x", "a/../../x", ""])
def test_paths_outside_the_root_are_refused(path: str) -> None:
    with pytest.raises(ToolFailure):
        confine(path, "/work")


def test_the_root_slash_allows_every_path() -> None:
    assert confine("../../etc/passwd", "/") == "/etc/passwd"


def test_truncation_keeps_head_and_tail_around_a_marker() -> None:
    text = "a" * 1000 + "z" * 1000
    cut = truncate(text, 100)
    assert cut.startswith("a" * 75)
    assert cut.endswith("z" * 25)
    assert "output truncated: 1900 of 2000 characters omitted" in cut
    assert truncate("short", 100) == "short"


def test_interpreter_events_fold_into_one_output() -> None:
    lines = [
        json.dumps({"type": "stdout", "text": "hi\n"}),
        json.dumps({"type": "result", "text": "<Figure>", "png": "iVBOR", "is_main_result": True}),
        json.dumps({"type": "error", "name": "ValueError", "value": "bad", "traceback": "tb"}),
        json.dumps({"type": "end_of_execution"}),
    ]
    out = read_events(lines)
    assert out.stdout == "hi\n"
    assert out.results == ["<Figure>"]
    assert [(i.mime_type, i.data) for i in out.images] == [("image/png", "iVBOR")]
    assert out.error == "ValueError: bad\ntb"


async def test_connect_frames_survive_any_chunking() -> None:
    data = envelope({"a": 1}) + envelope({"b": "x" * 50})

    async def chunks() -> Any:
        for i in range(0, len(data), 7):
            yield data[i : i + 7]

    frames = [json.loads(p) async for _, p in read_envelopes(chunks())]
    assert frames == [{"a": 1}, {"b": "x" * 50}]


def _unused(_ctx: Any) -> Any:
    raise AssertionError("no backend call expected")


async def test_unknown_arguments_are_a_tool_error_naming_the_right_ones() -> None:
    async with Client(build_server(_unused)) as client:
        result = await client.call_tool("list_sandboxes", {"all": True})
    assert isinstance(result, CallToolResult)
    assert result.is_error
    (block,) = result.content
    assert isinstance(block, TextContent)
    assert block.text == "list_sandboxes takes no argument 'all'; its arguments are: none"


async def test_every_tool_documents_every_argument() -> None:
    async with Client(build_server(_unused)) as client:
        tools = (await client.list_tools()).tools
    for tool in tools:
        assert tool.description, tool.name
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"


@pytest.mark.parametrize("name", ["A B", "X;touch /tmp/pwned", "1ST", "", "A=B"])
@pytest.mark.parametrize("tool", ["run_command", "get_sandbox"])
async def test_an_invalid_environment_name_is_refused_before_any_backend_call(
    tool: str, name: str
) -> None:
    arguments: dict[str, Any] = {"env": {name: "v"}}
    arguments.update(
        {"sandbox_id": "s", "command": "true"} if tool == "run_command" else {"name": "pool"}
    )
    async with Client(build_server(_unused)) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    (block,) = result.content
    assert isinstance(block, TextContent)
    assert "should match pattern" in block.text, block.text


async def test_the_environment_schema_publishes_the_name_pattern() -> None:
    async with Client(build_server(_unused)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    env = tools["run_command"].input_schema["properties"]["env"]
    shapes = env.get("anyOf", [env])
    [mapping] = [s for s in shapes if s.get("type") == "object"]
    assert list(mapping["patternProperties"]) == ["^[A-Za-z_][A-Za-z0-9_]*$"]
