"""Typing tests: each async call and its generated sync twin return the same types.

Checked by mypy (``nox -s typecheck``; this folder is in the mypy ``files``), never run: a
drift between ``AsyncSandboxClient`` and the generated ``SandboxClient`` fails type checking.
"""

from __future__ import annotations

from typing import Any, assert_type

from kube_agent_sandbox.sdk import (
    AsyncSandbox,
    AsyncSandboxClient,
    ExecResult,
    FileEntry,
    Readiness,
    Sandbox,
    SandboxClient,
)

Obj = dict[str, Any]


async def async_calls(client: AsyncSandboxClient, manifest: Obj) -> None:
    """The async surface."""
    box = await client.create_sandbox(manifest)
    assert_type(box, AsyncSandbox)
    assert_type(await client.claim_sandbox("pool"), AsyncSandbox)
    assert_type(await client.get("x"), Obj)
    assert_type(await client.list_sandboxes(), list[Obj])
    assert_type(await client.wait_ready("x"), Obj)
    assert_type(await client.suspend("x"), Obj)
    assert_type(await client.resume("x"), Obj)
    assert_type(await client.extend_shutdown("x", 60), Obj)
    assert_type(await client.delete("x", wait=True), None)
    assert_type(await client.get_claim("c"), Obj)
    assert_type(await client.wait_claim_ready("c"), Obj)
    assert_type(await client.exec("x", ["true"]), ExecResult)
    assert_type(await client.read_file("x", "/f"), bytes)
    assert_type(await client.list_files("x", "/"), list[FileEntry])
    assert_type(await box.status(), Readiness)
    assert_type(await box.commands.run("echo hi"), ExecResult)
    assert_type(await box.files.read("/f"), bytes)
    async for kind, obj in client.watch():
        assert_type(kind, str)
        assert_type(obj, Obj)
    async with client.exec_session("x", ["sh"]) as session:
        assert_type(await session.read(1.0), tuple[int, bytes] | None)


def sync_calls(client: SandboxClient, manifest: Obj) -> None:
    """The generated sync surface: same calls, same types, no await."""
    box = client.create_sandbox(manifest)
    assert_type(box, Sandbox)
    assert_type(client.claim_sandbox("pool"), Sandbox)
    assert_type(client.get("x"), Obj)
    assert_type(client.list_sandboxes(), list[Obj])
    assert_type(client.wait_ready("x"), Obj)
    assert_type(client.suspend("x"), Obj)
    assert_type(client.resume("x"), Obj)
    assert_type(client.extend_shutdown("x", 60), Obj)
    assert_type(client.delete("x", wait=True), None)
    assert_type(client.get_claim("c"), Obj)
    assert_type(client.wait_claim_ready("c"), Obj)
    assert_type(client.exec("x", ["true"]), ExecResult)
    assert_type(client.read_file("x", "/f"), bytes)
    assert_type(client.list_files("x", "/"), list[FileEntry])
    assert_type(box.status(), Readiness)
    assert_type(box.commands.run("echo hi"), ExecResult)
    assert_type(box.files.read("/f"), bytes)
    for kind, obj in client.watch():
        assert_type(kind, str)
        assert_type(obj, Obj)
    with client.exec_session("x", ["sh"]) as session:
        assert_type(session.read(1.0), tuple[int, bytes] | None)
