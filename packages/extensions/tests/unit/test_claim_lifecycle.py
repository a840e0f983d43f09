"""Claim expiry, shutdown policy and the strict RFC 3339 parser (docs/concepts/claims.md)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kube_agent_sandbox.extensions.claim.lifecycle import (
    expire_at,
    finished_at,
    is_expired,
    parse_rfc3339,
    parse_time_or_none,
    shutdown_policy,
    time_left,
)

UTC = dt.UTC
T0 = dt.datetime(2026, 8, 5, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-08-05T12:00:00Z", T0),
        ("2026-08-05T12:00:00.5Z", T0.replace(microsecond=500000)),
        ("2026-08-05T12:00:00.123456789Z", T0.replace(microsecond=123456)),
        ("2026-08-05T12:00:00,25Z", T0.replace(microsecond=250000)),
        ("2026-08-05T12:00:00+00:00", T0),
        ("2026-08-05T12:00:00.123456+00:00", T0.replace(microsecond=123456)),
        ("2026-08-05T14:30:00+02:30", T0),
        ("2026-08-05T04:00:00-08:00", T0),
        ("2024-02-29T00:00:00Z", dt.datetime(2024, 2, 29, tzinfo=UTC)),
    ],
)
def test_parse_rfc3339_accepts(text: str, expected: dt.datetime) -> None:
    parsed = parse_rfc3339(text)
    assert parsed == expected
    assert parsed.tzinfo is not None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2026-08-05",
        "2026-08-05T12:00:00",  # no zone
        "2026-08-05 12:00:00Z",  # space
        "2026-08-05t12:00:00Z",  # lower-case t
        "2026-08-05T12:00:00z",  # lower-case z
        "20260805T120000Z",  # basic format
        "2026-08-05T12:00Z",  # no seconds
        "2026-08-05T12:00:00.Z",  # empty fraction
        "2026-08-05T12:00:00+0000",  # offset without colon
        "2026-08-05T12:00:00+00",
        "2026-08-05T12:00:00+24:00",
        "2026-08-05T12:00:00+01:60",
        "2026-02-30T12:00:00Z",
        "2026-08-05T24:00:00Z",
        "2026-08-05T12:00:60Z",
        "2026-13-05T12:00:00Z",
        " 2026-08-05T12:00:00Z",
        "2026-08-05T12:00:00Z ",
        "\u0662026-08-05T12:00:00Z",  # a non-ASCII digit
        "unknown",
    ],
)
def test_parse_rfc3339_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r".+"):
        parse_rfc3339(text)
    assert parse_time_or_none(text) is None


@pytest.mark.parametrize("value", [None, "", 5, ["2026-08-05T12:00:00Z"]])
def test_parse_time_or_none_of_non_strings(value: Any) -> None:
    assert parse_time_or_none(value) is None


def _claim(
    *,
    lifecycle: dict[str, Any] | None = None,
    finished: tuple[str, str | None] | None = None,
) -> dict[str, Any]:
    claim: dict[str, Any] = {"metadata": {"name": "c", "namespace": "n"}, "spec": {}}
    if lifecycle is not None:
        claim["spec"]["lifecycle"] = lifecycle
    if finished is not None:
        status, ltt = finished
        condition: dict[str, Any] = {"type": "Finished", "status": status, "reason": "PodFailed"}
        if ltt is not None:
            condition["lastTransitionTime"] = ltt
        claim["status"] = {
            "conditions": [{"type": "Ready", "status": "False"}, condition],
        }
    return claim


SHUTDOWN = "2026-08-05T12:10:00Z"
FINISHED = "2026-08-05T12:00:00Z"


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        pytest.param(_claim(), None, id="no-lifecycle"),
        pytest.param(_claim(finished=("True", FINISHED)), None, id="finished-no-lifecycle"),
        pytest.param(_claim(lifecycle={}), None, id="empty-lifecycle"),
        pytest.param(
            _claim(lifecycle={"shutdownTime": SHUTDOWN}),
            T0 + dt.timedelta(minutes=10),
            id="shutdown-only",
        ),
        pytest.param(
            _claim(lifecycle={"ttlSecondsAfterFinished": 60}), None, id="ttl-not-finished"
        ),
        pytest.param(
            _claim(lifecycle={"ttlSecondsAfterFinished": 60}, finished=("False", FINISHED)),
            None,
            id="ttl-finished-false",
        ),
        pytest.param(
            _claim(lifecycle={"ttlSecondsAfterFinished": 60}, finished=("True", None)),
            None,
            id="ttl-finished-without-time",
        ),
        pytest.param(
            _claim(lifecycle={"ttlSecondsAfterFinished": 60}, finished=("True", FINISHED)),
            T0 + dt.timedelta(seconds=60),
            id="ttl",
        ),
        pytest.param(
            _claim(lifecycle={"ttlSecondsAfterFinished": 0}, finished=("True", FINISHED)),
            T0,
            id="ttl-zero",
        ),
        pytest.param(
            _claim(
                lifecycle={"shutdownTime": SHUTDOWN, "ttlSecondsAfterFinished": 60},
                finished=("True", FINISHED),
            ),
            T0 + dt.timedelta(seconds=60),
            id="ttl-earlier-wins",
        ),
        pytest.param(
            _claim(
                lifecycle={"shutdownTime": SHUTDOWN, "ttlSecondsAfterFinished": 3600},
                finished=("True", FINISHED),
            ),
            T0 + dt.timedelta(minutes=10),
            id="shutdown-earlier-wins",
        ),
        pytest.param(
            _claim(
                lifecycle={"shutdownTime": SHUTDOWN, "ttlSecondsAfterFinished": 60},
                finished=("False", FINISHED),
            ),
            T0 + dt.timedelta(minutes=10),
            id="shutdown-when-not-finished",
        ),
        pytest.param(
            _claim(lifecycle={"shutdownTime": "garbage"}), None, id="unparseable-shutdown"
        ),
        pytest.param(
            _claim(
                lifecycle={"shutdownTime": "garbage", "ttlSecondsAfterFinished": 5},
                finished=("True", FINISHED),
            ),
            T0 + dt.timedelta(seconds=5),
            id="unparseable-shutdown-ttl-still-applies",
        ),
        pytest.param(
            _claim(lifecycle={"ttlSecondsAfterFinished": "60"}, finished=("True", FINISHED)),
            None,
            id="non-integer-ttl-ignored",
        ),
    ],
)
def test_expire_at(claim: dict[str, Any], expected: dt.datetime | None) -> None:
    assert expire_at(claim) == expected


def test_finished_at_reads_only_the_finished_condition() -> None:
    assert finished_at(_claim(finished=("True", FINISHED))) == T0
    assert finished_at(_claim(finished=("Unknown", FINISHED))) is None
    assert finished_at(_claim()) is None
    assert finished_at({"status": {"conditions": None}}) is None


def test_is_expired_and_time_left() -> None:
    claim = _claim(lifecycle={"shutdownTime": SHUTDOWN})
    deadline = T0 + dt.timedelta(minutes=10)
    assert not is_expired(claim, deadline - dt.timedelta(microseconds=1))
    assert is_expired(claim, deadline)
    assert is_expired(claim, deadline + dt.timedelta(days=1))
    assert time_left(claim, T0) == 600.0
    assert time_left(claim, deadline) == 0.0
    assert time_left(claim, deadline + dt.timedelta(seconds=5)) == 0.0
    never = _claim()
    assert not is_expired(never, deadline)
    assert time_left(never, deadline) is None


@pytest.mark.parametrize(
    ("lifecycle", "policy"),
    [
        (None, "Retain"),
        ({}, "Retain"),
        ({"shutdownPolicy": "Retain"}, "Retain"),
        ({"shutdownPolicy": "Delete"}, "Delete"),
        ({"shutdownPolicy": "DeleteForeground"}, "DeleteForeground"),
        ({"shutdownPolicy": "delete"}, "Retain"),
        ({"shutdownPolicy": ""}, "Retain"),
    ],
)
def test_shutdown_policy(lifecycle: dict[str, Any] | None, policy: str) -> None:
    assert shutdown_policy(_claim(lifecycle=lifecycle)) == policy
