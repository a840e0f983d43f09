"""Go `time.ParseDuration` and `Duration.String()`, as the flags and messages use them."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.controller.goduration import (
    DurationError,
    format_go_duration,
    parse_go_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("5m", 300.0),
        ("1m30s", 90.0),
        ("300ms", 0.3),
        ("1.5h", 5400.0),
        ("-2s", -2.0),
        ("+1s", 1.0),
        ("1h2m3s4ms5us6ns", 3723.004005006),
        ("2\u00b5s", 0.000002),
        (".5s", 0.5),
        ("1.s", 1.0),
    ],
)
def test_parse(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds, abs=1e-12)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("-", 'time: invalid duration "-"'),
        ("5", 'time: missing unit in duration "5"'),
        ("1x", 'time: unknown unit "x" in duration "1x"'),
        ("fast", 'time: invalid duration "fast"'),
        (".s", 'time: invalid duration ".s"'),
        ("9999999999h", 'time: invalid duration "9999999999h"'),
    ],
)
def test_parse_refuses_with_gos_message(text: str, message: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_go_duration(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (300, "5m0s"),
        (90, "1m30s"),
        (600, "10m0s"),
        (3600, "1h0m0s"),
        (5400, "1h30m0s"),
        (1.5, "1.5s"),
        (0.3, "300ms"),
        (0.0000015, "1.5\u00b5s"),
        (0.000000001, "1ns"),
        (-2, "-2s"),
    ],
)
def test_format_like_go(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text
