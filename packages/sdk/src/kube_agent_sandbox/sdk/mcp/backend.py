"""What the MCP tools need from a way of reaching sandboxes, and the errors they report.

Backends raise :class:`ToolFailure` with a message a model can act on (what went wrong and
what to do next); the server turns it into a tool result with ``isError`` set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

Source = Literal["pool", "template"]


class ToolFailure(Exception):
    """A tool call that failed in a way the caller can fix or should know about."""


class SandboxGone(ToolFailure):
    """The sandbox expired or was deleted (during the call or before it)."""

    def __init__(self, sandbox_id: str, detail: str = "") -> None:
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"sandbox {sandbox_id!r} no longer exists: it expired or was deleted{extra}. "
            "Call get_sandbox for a new one; files in the old sandbox are lost."
        )


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    """One sandbox as the tools report it."""

    sandbox_id: str
    state: str
    template: str | None = None
    expires_at: str | None = None
    details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CommandOutput:
    """A finished command (``timed_out``: killed at the timeout, output so far)."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class Image:
    """An image the code produced (base64, as the interpreter sends it)."""

    mime_type: str
    data: str


@dataclass(slots=True)
class CodeOutput:
    """What a code-interpreter execution produced."""

    stdout: str = ""
    stderr: str = ""
    results: list[str] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One entry of a directory listing."""

    name: str
    path: str
    type: str
    size: int | None = None


class SandboxBackend(Protocol):
    """Sandbox operations, each scoped to whoever the backend acts for."""

    async def get_sandbox(
        self, source: Source, name: str, *, timeout_seconds: int, env: dict[str, str]
    ) -> SandboxInfo:
        """Claim from the warm pool ``name`` or create from the template ``name``; wait."""
        ...

    async def list_sandboxes(self) -> list[SandboxInfo]:
        """The caller's sandboxes."""
        ...

    async def describe(self, sandbox_id: str) -> SandboxInfo:
        """One sandbox of the caller's."""
        ...

    async def run_command(
        self,
        sandbox_id: str,
        command: str,
        *,
        time_limit: float,
        cwd: str | None,
        env: dict[str, str],
    ) -> CommandOutput:
        """Run ``command`` with ``sh -c`` semantics."""
        ...

    async def run_code(
        self, sandbox_id: str, code: str, *, language: str, time_limit: float
    ) -> CodeOutput:
        """Execute code in the sandbox's code interpreter."""
        ...

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        """A file's content."""
        ...

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> None:
        """Write a file, creating its parents."""
        ...

    async def list_files(self, sandbox_id: str, path: str) -> list[FileEntry]:
        """A directory's entries."""
        ...

    async def delete_file(self, sandbox_id: str, path: str) -> None:
        """Remove a file or a directory tree."""
        ...

    async def suspend(self, sandbox_id: str) -> None:
        """Suspend (the pod goes away; files on volumes stay)."""
        ...

    async def resume(self, sandbox_id: str) -> None:
        """Resume a suspended sandbox and wait until it is ready."""
        ...

    async def delete(self, sandbox_id: str) -> None:
        """Delete the sandbox."""
        ...
