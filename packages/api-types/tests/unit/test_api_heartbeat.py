"""The heartbeat Lease body every writer shares, and the time and duration helpers."""

from __future__ import annotations

import datetime as dt

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.heartbeat import (
    duration_seconds,
    format_micro_time,
    lease_body,
    parse_micro_time,
    renew_patch,
)

T = dt.datetime(2026, 12, 1, 12, 30, 5, 123456, tzinfo=dt.UTC)


def test_micro_time_round_trips() -> None:
    assert format_micro_time(T) == "2026-12-01T12:30:05.123456Z"
    assert parse_micro_time(format_micro_time(T)) == T
    assert parse_micro_time("2026-12-01T13:30:05.123456+01:00") == T


@pytest.mark.parametrize("bad", [None, "", "yesterday", "2026-13-01T00:00:00Z"])
def test_bad_micro_times_are_none(bad: str | None) -> None:
    assert parse_micro_time(bad) is None


def test_the_lease_body() -> None:
    sandbox = {"metadata": {"name": "sb", "namespace": "ns", "uid": "u-1"}}
    lease = lease_body(sandbox, holder="gw-0", duration_seconds=900, now=T)
    assert lease == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "sb",
            "namespace": "ns",
            "labels": {c.LABEL_HEARTBEAT: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "agents.x-k8s.io/v1beta1",
                    "kind": "Sandbox",
                    "name": "sb",
                    "uid": "u-1",
                }
            ],
        },
        "spec": {
            "holderIdentity": "gw-0",
            "leaseDurationSeconds": 900,
            "renewTime": "2026-12-01T12:30:05.123456Z",
        },
    }
    assert c.LABEL_HEARTBEAT == "kube-agent-sandbox.io/heartbeat"


def test_the_renew_patch() -> None:
    patch = renew_patch(holder="h", duration_seconds=0, now=T, resource_version="7")
    assert patch["metadata"] == {"labels": {c.LABEL_HEARTBEAT: "true"}, "resourceVersion": "7"}
    assert patch["spec"]["leaseDurationSeconds"] == 1  # the API server refuses 0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900.0), ("1h30m", 5400.0), ("90s", 90.0), ("1.5m", 90.0), ("500ms", 0.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [None, "", "0", "15", "-5m", "5 minutes", "5m3", "m"])
def test_bad_or_empty_durations_are_none(text: str | None) -> None:
    assert duration_seconds(text) is None
