"""Shared pieces of the idle reconciler's unit tests: a fake clock, objects, a wired reconciler.

Not a test module (the unit ``conftest.py`` puts this directory on ``sys.path``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.heartbeat import format_micro_time, lease_body
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from kube_agent_sandbox.api.rest import LEASES
from kube_agent_sandbox.controller.runtime import FakeApi, Obj
from kube_agent_sandbox.extensions.idle.reconciler import IdleReconciler

NS = "team"
T0 = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.UTC)


class Clock:
    """A settable clock."""

    def __init__(self, now: dt.datetime = T0) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def at(self, seconds: float) -> None:
        """Move to ``T0 + seconds``."""
        self.now = T0 + dt.timedelta(seconds=seconds)


class Recorder:
    """Collects events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append(
            {
                "name": obj.get("metadata", {}).get("name"),
                "type": type_,
                "reason": reason,
                "action": action,
                "note": note,
            }
        )

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.events]


def _stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def sandbox(
    name: str = "sb",
    *,
    annotations: dict[str, str] | None = None,
    ready_at: dt.datetime | None = T0,
    mode: str | None = None,
    owner_claim: Obj | None = None,
) -> Obj:
    """A Sandbox created at T0, Ready since ``ready_at`` (None: not Ready)."""
    obj: Obj = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "creationTimestamp": _stamp(T0),
            "annotations": dict(annotations or {}),
        },
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {
            "conditions": [
                {
                    "type": c.CONDITION_READY,
                    "status": "True" if ready_at else "False",
                    "reason": "DependenciesReady" if ready_at else "DependenciesNotReady",
                    "message": "",
                    "lastTransitionTime": _stamp(ready_at or T0),
                },
                {
                    "type": c.CONDITION_SUSPENDED,
                    "status": "False",
                    "reason": c.REASON_NOT_SUSPENDED,
                    "message": "Sandbox is not suspended",
                    "lastTransitionTime": _stamp(T0),
                },
            ]
        },
    }
    if mode:
        obj["spec"]["operatingMode"] = mode
    if owner_claim is not None:
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": c.EXTENSIONS_API_VERSION,
                "kind": c.KIND_SANDBOX_CLAIM,
                "name": owner_claim["metadata"]["name"],
                "uid": owner_claim["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return obj


def idle_annotations(timeout: str = "15m", **extra: str) -> dict[str, str]:
    """The idle timeout plus any other policy annotations."""
    return {c.ANNOTATION_IDLE_TIMEOUT: timeout, **extra}


def renew(api: FakeApi, stored: Obj, at: dt.datetime, *, duration: int = 900) -> None:
    """Create or renew the Lease of ``stored`` as the gateway would."""
    existing = api.obj(LEASES, stored["metadata"]["name"], NS)
    if existing is None:
        api.add(LEASES, lease_body(stored, holder="gw-0", duration_seconds=duration, now=at))
        return

    def change(lease: Obj) -> None:
        lease["spec"]["renewTime"] = format_micro_time(at)

    api.mutate(LEASES, stored["metadata"]["name"], change, NS)


def wired(clock: Clock, *, minimum: float = 60.0) -> tuple[FakeApi, IdleReconciler, Recorder]:
    """A FakeApi and a reconciler reading it through always-synced readers."""
    api = FakeApi(clock=clock, default_namespace=NS)
    recorder = Recorder()
    reconciler = IdleReconciler(
        api,
        sandboxes=api.reader(SANDBOXES),
        leases=api.reader(LEASES),
        claims=api.reader(SANDBOX_CLAIMS),
        templates=api.reader(SANDBOX_TEMPLATES),
        recorder=recorder,
        clock=clock,
        min_idle_timeout=minimum,
    )
    return api, reconciler, recorder


def sandbox_writes(api: FakeApi) -> list[Any]:
    """Write requests to Sandboxes."""
    return api.writes(SANDBOXES)
