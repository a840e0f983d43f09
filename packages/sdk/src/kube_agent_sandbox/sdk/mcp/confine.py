"""Keep tool paths inside the server's file root, and tool output inside its size limit.

Both are checked before anything is sent: a model that asks for ``../../etc/passwd`` or prints
a gigabyte gets a clear answer instead of a leak or a flooded context window.
"""

from __future__ import annotations

import posixpath

from kube_agent_sandbox.sdk.mcp.backend import ToolFailure

TRUNCATION_MARKER = "\n[... output truncated: {omitted} of {total} characters omitted ...]\n"


def confine(path: str, root: str) -> str:
    """The absolute path of ``path`` (relative paths start at ``root``), refused outside it."""
    if not path or "\x00" in path:
        raise ToolFailure("path must be a non-empty string without NUL characters")
    joined = path if path.startswith("/") else posixpath.join(root, path)
    resolved = posixpath.normpath(joined)
    if resolved.startswith("//"):
        resolved = "/" + resolved.lstrip("/")
    base = posixpath.normpath(root)
    if base != "/" and resolved != base and not resolved.startswith(base + "/"):
        raise ToolFailure(
            f"path {path!r} is outside the sandbox's file root {base!r}: "
            f"use a path under {base!r} or one relative to it"
        )
    return resolved


def truncate(text: str, limit: int) -> str:
    """``text``, or its head and tail around a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    marker = TRUNCATION_MARKER.format(omitted=len(text) - limit, total=len(text))
    return text[:head] + marker + (text[-tail:] if tail else "")
