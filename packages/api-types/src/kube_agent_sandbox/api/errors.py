"""Readable validation messages: every problem as ``<field path>: <reason>``.

pydantic's :class:`~pydantic.ValidationError` already carries the location of each problem
with wire (camelCase) names; this renders it in the form Kubernetes uses
(``spec.operatingMode: Input should be 'Running' or 'Suspended'``) for logs, events and CLI
output.
"""

from __future__ import annotations

from pydantic import ValidationError


def field_path(location: tuple[int | str, ...]) -> str:
    """Render a pydantic location as a Kubernetes field path (``spec.env[0].name``)."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else part
    return path


def validation_messages(error: ValidationError) -> list[str]:
    """One ``path: reason`` line per problem in ``error``."""
    lines = []
    for item in error.errors(include_url=False):
        path = field_path(tuple(item["loc"]))
        lines.append(f"{path}: {item['msg']}" if path else item["msg"])
    return lines
