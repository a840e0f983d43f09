"""The NDJSON lines of ``POST /execute``, as ``e2b-code-interpreter`` parses them.

One JSON object per line with a ``type``: ``stdout``/``stderr`` (``text``, ``timestamp``),
``result`` (``text`` and rich formats, ``is_main_result``), ``error`` (``name``, ``value``,
``traceback``), ``number_of_executions`` (``execution_count``); then ``end_of_execution``. Lines of
other types (``keepalive``, sent while a cell runs silently) are ignored by the SDK.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

Event = dict[str, Any]

RESULT_FIELDS = frozenset(
    {
        "text",
        "html",
        "markdown",
        "svg",
        "png",
        "jpeg",
        "pdf",
        "latex",
        "json",
        "javascript",
        "data",
        "chart",
        "extra",
        "is_main_result",
    }
)


def timestamp() -> str:
    """Returns the current time as ISO-8601 UTC (the upstream server's format).

    Returns:
        The timestamp.
    """
    return datetime.datetime.now(datetime.UTC).isoformat()


def stream_event(name: str, text: str) -> Event:
    """Builds a ``stdout`` or ``stderr`` event.

    Args:
        name: ``"stdout"`` or ``"stderr"``.
        text: The output text.

    Returns:
        The event.
    """
    return {"type": name, "text": text, "timestamp": timestamp()}


def result_event(fields: dict[str, Any]) -> Event:
    """Builds a ``result`` event from the worker's result fields (unknown keys dropped).

    Args:
        fields: ``text``, rich formats and ``is_main_result``.

    Returns:
        The event.
    """
    event: Event = {"type": "result"}
    event.update({k: v for k, v in fields.items() if k in RESULT_FIELDS and v is not None})
    event["is_main_result"] = bool(fields.get("is_main_result", False))
    return event


def error_event(name: str, value: str, traceback: str = "") -> Event:
    """Builds an ``error`` event.

    Args:
        name: The exception class name.
        value: The exception message.
        traceback: The formatted traceback.

    Returns:
        The event.
    """
    return {"type": "error", "name": name, "value": value, "traceback": traceback}


def count_event(count: int) -> Event:
    """Builds a ``number_of_executions`` event.

    Args:
        count: The context's execution count, this execution included.

    Returns:
        The event.
    """
    return {"type": "number_of_executions", "execution_count": count}


END_OF_EXECUTION: Event = {"type": "end_of_execution"}
KEEPALIVE: Event = {"type": "keepalive"}


def ndjson_line(event: Event) -> bytes:
    """Encodes one event as a line of NDJSON.

    Args:
        event: The event.

    Returns:
        The UTF-8 line, newline included.
    """
    return json.dumps(event, separators=(",", ":")).encode("utf-8") + b"\n"
