"""The heartbeat Lease of an idle-managed Sandbox: one body shape for every writer.

Three writers renew it (the gateway on traffic, the gateway on sandboxd's behalf, the SDK's
``keepalive()``) and the idle reconciler reads it, so its name, label, owner reference and time
format are defined once here, next to the annotation names, with no dependency beyond the
standard library.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Final

from kube_agent_sandbox.api import constants as c

__all__ = [
    "LEASE_API_VERSION",
    "LEASE_GROUP",
    "LEASE_PLURAL",
    "duration_seconds",
    "format_micro_time",
    "lease_body",
    "parse_micro_time",
    "renew_patch",
]

LEASE_GROUP: Final = "coordination.k8s.io"
LEASE_API_VERSION: Final = f"{LEASE_GROUP}/v1"
LEASE_PLURAL: Final = "leases"

_DURATION_PART: Final = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|\u00b5s|ms|s|m|h)")
_UNIT_SECONDS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def duration_seconds(text: str | None) -> float | None:
    """A positive Go duration (``15m``, ``1h30m``, ``90s``) in seconds; None for anything else.

    For writers that only need the number (``leaseDurationSeconds``); the idle reconciler
    validates the annotation with the full Go parser and reports bad values.
    """
    value = (text or "").strip()
    if not value or _DURATION_PART.sub("", value):
        return None
    total = sum(
        float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(value)
    )
    return total if total > 0 else None


def format_micro_time(moment: dt.datetime) -> str:
    """Render a time as ``metav1.MicroTime``: RFC 3339 in UTC with six fractional digits."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str | None) -> dt.datetime | None:
    """Parse a ``MicroTime`` (or any RFC 3339 time); None for an absent or malformed value."""
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def lease_body(
    sandbox: dict[str, Any],
    *,
    holder: str,
    duration_seconds: int,
    now: dt.datetime,
) -> dict[str, Any]:
    """A new heartbeat Lease for ``sandbox``: same name and namespace, owned by it.

    The owner reference is not a controller reference and does not block the owner's
    deletion; it only lets the garbage collector remove the Lease with its Sandbox.

    Args:
        sandbox: The Sandbox (needs ``metadata.name``, ``namespace`` and ``uid``).
        holder: Who reports the activity (``spec.holderIdentity``).
        duration_seconds: The sandbox's idle timeout (``spec.leaseDurationSeconds``).
        now: The activity time (``spec.renewTime``).
    """
    meta = sandbox.get("metadata") or {}
    return {
        "apiVersion": LEASE_API_VERSION,
        "kind": "Lease",
        "metadata": {
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "labels": {c.LABEL_HEARTBEAT: "true"},
            "ownerReferences": [
                {
                    "apiVersion": c.SANDBOX_API_VERSION,
                    "kind": c.KIND_SANDBOX,
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                }
            ],
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": max(1, int(duration_seconds)),
            "renewTime": format_micro_time(now),
        },
    }


def renew_patch(
    *, holder: str, duration_seconds: int, now: dt.datetime, resource_version: str | None = None
) -> dict[str, Any]:
    """A merge patch that renews an existing heartbeat Lease (and restores its label).

    Args:
        holder: Who reports the activity.
        duration_seconds: The sandbox's idle timeout.
        now: The activity time.
        resource_version: Guard the write with this resourceVersion (None: last writer wins,
            which is right for a heartbeat: every writer only moves the time forward).
    """
    metadata: dict[str, Any] = {"labels": {c.LABEL_HEARTBEAT: "true"}}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "metadata": metadata,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": max(1, int(duration_seconds)),
            "renewTime": format_micro_time(now),
        },
    }
