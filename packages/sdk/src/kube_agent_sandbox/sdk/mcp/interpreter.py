"""Read the code interpreter's answer (``POST /execute``: one JSON event per line).

The events are those of E2B's code interpreter, which ``sandboxd-interpreter`` serves: ``stdout``
and ``stderr`` text, ``result`` (plain text and rich formats such as ``png``), ``error``
(name, value, traceback) and ``end_of_execution``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

from kube_agent_sandbox.sdk.mcp.backend import CodeOutput, Image

INTERPRETER_PORT: Final = 49999
IMAGE_FORMATS: Final = {"png": "image/png", "jpeg": "image/jpeg"}
TEXT_FORMATS: Final = ("text", "markdown", "json", "html", "latex")


def execute_body(code: str, language: str, timeout: float) -> dict[str, Any]:
    """The JSON body of ``POST /execute``."""
    return {"code": code, "language": language, "timeout": timeout}


def read_events(lines: Iterable[str]) -> CodeOutput:
    """Fold the event lines into one :class:`CodeOutput` (unknown events are skipped)."""
    out = CodeOutput()
    for line in lines:
        if not line.strip():
            continue
        event = json.loads(line)
        kind = event.get("type")
        if kind == "stdout":
            out.stdout += str(event.get("text", ""))
        elif kind == "stderr":
            out.stderr += str(event.get("text", ""))
        elif kind == "result":
            _add_result(out, event)
        elif kind == "error":
            trace = event.get("traceback") or ""
            out.error = f"{event.get('name', 'Error')}: {event.get('value', '')}\n{trace}".strip()
    return out


def _add_result(out: CodeOutput, event: dict[str, Any]) -> None:
    for key, mime in IMAGE_FORMATS.items():
        if isinstance(event.get(key), str):
            out.images.append(Image(mime_type=mime, data=event[key]))
    for key in TEXT_FORMATS:
        value = event.get(key)
        if isinstance(value, str) and value:
            out.results.append(value)
            return
