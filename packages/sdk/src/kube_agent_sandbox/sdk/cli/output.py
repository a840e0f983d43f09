"""Rendering objects for the CLI: kubectl-like tables, JSON, YAML or names (pure)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

from kube_agent_sandbox.sdk import readiness

Obj = dict[str, Any]
FORMATS = ("table", "json", "yaml", "name", "wide")


def age(timestamp: str | None, *, now: datetime.datetime | None = None) -> str:
    """kubectl's short age (``45s``, ``12m``, ``3h``, ``2d``) of an RFC 3339 time."""
    if not timestamp:
        return "<unknown>"
    created = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = int(((now or datetime.datetime.now(datetime.UTC)) - created).total_seconds())
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def sandbox_row(obj: Obj, *, wide: bool = False, now: datetime.datetime | None = None) -> list[str]:
    """NAME, READY, REASON, MODE, AGE (+ POD, NODE, IP when wide) of a Sandbox."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    state = readiness.sandbox_readiness(obj)
    row = [
        str(meta.get("name") or ""),
        state.status or "Unknown",
        state.reason or "",
        str((obj.get("spec") or {}).get("operatingMode") or "Running"),
        age(meta.get("creationTimestamp"), now=now),
    ]
    if wide:
        row += [
            readiness.pod_name(obj),
            str(status.get("nodeName") or "<none>"),
            ",".join(status.get("podIPs") or []) or "<none>",
        ]
    return row


def claim_row(obj: Obj, *, wide: bool = False, now: datetime.datetime | None = None) -> list[str]:
    """NAME, READY, REASON, SANDBOX, POOL, AGE of a SandboxClaim."""
    meta = obj.get("metadata") or {}
    state = readiness.claim_readiness(obj)
    del wide
    return [
        str(meta.get("name") or ""),
        state.status or "Unknown",
        state.reason or "",
        readiness.bound_sandbox_name(obj) or "<none>",
        str(((obj.get("spec") or {}).get("warmPoolRef") or {}).get("name") or ""),
        age(meta.get("creationTimestamp"), now=now),
    ]


SANDBOX_COLUMNS = ["NAME", "READY", "REASON", "MODE", "AGE"]
SANDBOX_WIDE = ["POD", "NODE", "IP"]
CLAIM_COLUMNS = ["NAME", "READY", "REASON", "SANDBOX", "POOL", "AGE"]
COLUMN_GAP = "   "
"""kubectl's space between table columns."""


def snapshot_row(obj: Obj, *, now: datetime.datetime | None = None) -> list[str]:
    """NAME, PHASE, REASON, SOURCE, SIZE, AGE (+ IMAGE when wide) of a SandboxSnapshot."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    ready = readiness.condition(obj, "Ready") or {}
    size = status.get("size")
    return [
        str(meta.get("name") or ""),
        str(status.get("phase") or "Pending"),
        str(ready.get("reason") or ""),
        str((obj.get("spec") or {}).get("sandboxName") or ""),
        str(size) if isinstance(size, int) else "",
        age(meta.get("creationTimestamp"), now=now),
        str(status.get("image") or "<none>"),
    ]


SNAPSHOT_COLUMNS = ["NAME", "PHASE", "REASON", "SOURCE", "SIZE", "AGE"]


def snapshot_table(objs: Sequence[Obj], *, wide: bool = False) -> str:
    """SandboxSnapshots as a ``kubectl get`` table (the pinned image too when ``wide``)."""
    columns = SNAPSHOT_COLUMNS + (["IMAGE"] if wide else [])
    return _render(columns, [snapshot_row(o)[: len(columns)] for o in objs])


def table(objs: Sequence[Obj], *, claims: bool = False, wide: bool = False) -> str:
    """A plain-text table like ``kubectl get``: left-aligned columns three spaces apart."""
    columns = CLAIM_COLUMNS if claims else SANDBOX_COLUMNS + (SANDBOX_WIDE if wide else [])
    return _render(
        columns, [claim_row(obj) if claims else sandbox_row(obj, wide=wide) for obj in objs]
    )


def _render(columns: Sequence[str], body: Sequence[list[str]]) -> str:
    rows = [list(columns), *body]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join(
        COLUMN_GAP.join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _clean(obj: Obj) -> Obj:
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    return {**obj, "metadata": meta}


def serialize(objs: Obj | Sequence[Obj], fmt: str, *, list_kind: str = "List") -> str:
    """JSON, YAML or names of one object or a list (lists wrapped like kubectl's ``List``).

    Raises:
        ValueError: an unknown format.
    """
    single = isinstance(objs, dict)
    items = [_clean(objs)] if isinstance(objs, dict) else [_clean(o) for o in objs]
    if fmt == "name":
        return "\n".join(str(o["metadata"].get("name")) for o in items)
    doc: Obj = items[0] if single else {"apiVersion": "v1", "kind": list_kind, "items": items}
    if fmt == "json":
        return json.dumps(doc, indent=2, sort_keys=False)
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(doc, sort_keys=False).rstrip("\n")
    raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(FORMATS)}")


def parse_pairs(values: Sequence[str], *, what: str) -> dict[str, str]:
    """``KEY=VALUE`` options into a dict.

    Raises:
        ValueError: on an item without ``=``.
    """
    result = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} must look like KEY=VALUE, got {item!r}")
        result[key] = value
    return result


def split_remote(spec: str) -> tuple[str | None, str]:
    """``sandbox:/path`` into ``(sandbox, path)``; a local path gives ``(None, path)``.

    A leading ``./`` or ``/`` marks a local path even when it contains ``:``.
    """
    if spec.startswith(("/", "./", "../")):
        return None, spec
    name, sep, path = spec.partition(":")
    if not sep or not name:
        return None, spec
    return name, path
