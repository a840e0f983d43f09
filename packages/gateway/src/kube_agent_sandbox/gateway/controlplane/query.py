"""Get, list and metrics: answered from the informer caches, no API call.

Metrics are the one exception: the daemon's ``/metrics`` of a running sandbox, one sample.

List pages with an opaque ``nextToken`` (a cursor over the sort key ``(startedAt, id)``), so
pages stay consistent while sandboxes come and go; ``X-Next-Token`` is set only when more
entries follow. Filters: ``metadata`` (every pair must match), ``state``, ``template``,
``startedAfter``.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kube_agent_sandbox.gateway.controlplane.auth import authenticate, tenant_record
from kube_agent_sandbox.gateway.controlplane.models import (
    STATE_RUNNING,
    BadRequest,
    detail_body,
    listed_body,
    parse_metadata_filter,
    parse_states,
    parse_time,
    rfc3339,
    started_at,
    state_of,
    stored_metadata,
    template_id,
)
from kube_agent_sandbox.gateway.daemon_client import ENVD_PORT, daemon_metrics
from kube_agent_sandbox.gateway.errors import bad_request, sandbox_not_found
from kube_agent_sandbox.gateway.index import SandboxRecord
from kube_agent_sandbox.gateway.state import GatewayState

DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 100


def encode_token(key: tuple[str, str]) -> str:
    """The opaque ``nextToken`` of a cursor."""
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def decode_token(token: str) -> tuple[str, str]:
    """The cursor of a ``nextToken``.

    Raises:
        BadRequest: for a token this gateway did not issue.
    """
    try:
        padded = token + "=" * (-len(token) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, binascii.Error):
        raise BadRequest("invalid nextToken") from None
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value):
        raise BadRequest("invalid nextToken")
    return value[0], value[1]


def sort_key(record: SandboxRecord) -> tuple[str, str]:
    """``(startedAt, id)``: the list order and the cursor."""
    return rfc3339(started_at(record)), record.sandbox_id


def _limit(text: str | None) -> int:
    if text is None or text == "":
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}")
    return int(text)


def select(
    records: list[SandboxRecord],
    *,
    metadata: dict[str, str],
    states: set[str],
    template: str | None,
    started_after: datetime | None,
) -> list[SandboxRecord]:
    """The records matching every filter."""
    out = []
    for record in records:
        if state_of(record) not in states:
            continue
        if template and template_id(record) != template:
            continue
        if started_after is not None and started_at(record) < started_after:
            continue
        stored = stored_metadata(record)
        if any(stored.get(k) != v for k, v in metadata.items()):
            continue
        out.append(record)
    return out


async def list_sandboxes(request: Request, state: GatewayState) -> Response:
    """``GET /v2/sandboxes`` (and the deprecated ``GET /sandboxes``)."""
    tenant = authenticate(request, state)
    if isinstance(tenant, Response):
        return tenant
    query = request.query_params
    try:
        metadata = parse_metadata_filter(query.get("metadata", ""))
        states = parse_states(query.get("state"))
        limit = _limit(query.get("limit"))
        cursor = decode_token(query["nextToken"]) if query.get("nextToken") else None
        order = query.get("order") or "asc"
        if order not in ("asc", "desc"):
            raise BadRequest("order must be asc or desc")
        after_text = query.get("startedAfter")
        started_after = parse_time(after_text) if after_text else None
        if after_text and started_after is None:
            raise BadRequest("startedAfter must be an RFC 3339 time")
    except BadRequest as exc:
        return bad_request(str(exc))
    records = state.index.records(tenant.namespace)
    running = sum(1 for r in records if state_of(r) == STATE_RUNNING)
    chosen = select(
        records,
        metadata=metadata,
        states=states,
        template=query.get("template"),
        started_after=started_after,
    )
    descending = order == "desc"
    chosen.sort(key=sort_key, reverse=descending)
    if cursor is not None:
        chosen = [
            r for r in chosen if (sort_key(r) < cursor if descending else sort_key(r) > cursor)
        ]
    page = chosen[:limit]
    headers = {"X-Total-Running": str(running)}
    if len(chosen) > limit:
        headers["X-Next-Token"] = encode_token(sort_key(page[-1]))
    return JSONResponse([listed_body(r) for r in page], headers=headers)


async def get_sandbox(request: Request, state: GatewayState) -> Response:
    """``GET /sandboxes/{id}``: the ``SandboxDetail``."""
    record, error = tenant_record(request, state)
    if record is None:
        return error or sandbox_not_found("")
    return JSONResponse(detail_body(record, tokens=state.tokens, domain=state.options.domain))


def metric_sample(raw: dict[str, Any]) -> dict[str, Any] | None:
    """One ``SandboxMetric`` from the daemon's ``/metrics`` body, or None if it has no time."""
    ts = raw.get("ts")
    if not isinstance(ts, int) or isinstance(ts, bool):
        return None

    def number(key: str) -> int | float:
        value = raw.get(key, 0)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    return {
        "timestamp": rfc3339(datetime.fromtimestamp(ts, UTC)),
        "timestampUnix": ts,
        "cpuCount": int(number("cpu_count")),
        "cpuUsedPct": float(number("cpu_used_pct")),
        "memUsed": int(number("mem_used")),
        "memTotal": int(number("mem_total")),
        "memCache": int(number("mem_cache")),
        "diskUsed": int(number("disk_used")),
        "diskTotal": int(number("disk_total")),
    }


async def get_metrics(request: Request, state: GatewayState) -> Response:
    """``GET /sandboxes/{id}/metrics``: the daemon's current sample, or none.

    A sandbox that is paused, starting or has no daemon (exec fallback) has no samples: ``[]``.
    """
    record, error = tenant_record(request, state)
    if record is None:
        return error or sandbox_not_found("")
    address = state.index.address(record, ENVD_PORT) if record.ready else None
    if address is None or state.http is None:
        return JSONResponse([])
    raw = await daemon_metrics(
        address,
        access_token=state.tokens.envd_access_token(record.claim_uid),
        client=state.http,
    )
    sample = metric_sample(raw) if raw is not None else None
    return JSONResponse([sample] if sample is not None else [])
