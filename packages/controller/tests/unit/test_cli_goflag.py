"""Go ``flag`` package syntax: every accepted form and every error message, as Go prints them."""

from __future__ import annotations

import math

import pytest

from kube_agent_sandbox.controller.goflag import (
    Flag,
    FlagError,
    FlagSet,
    HelpRequested,
    ValueError_,
    parse_go_bool,
    parse_go_float,
    parse_go_int,
)


def _flagset() -> FlagSet:
    flags = FlagSet("prog")
    flags.add(Flag("verbose", "bool", False, "be loud"))
    flags.add(Flag("on", "bool", True, "default on"))
    flags.add(Flag("count", "int", 7, "how many"))
    flags.add(Flag("rate", "float", -1.0, "how fast"))
    flags.add(Flag("name", "string", "x", "a name"))
    return flags


@pytest.mark.parametrize(
    ("argv", "name", "expected"),
    [
        (["--count=3"], "count", 3),
        (["-count=3"], "count", 3),
        (["--count", "3"], "count", 3),
        (["-count", "3"], "count", 3),
        (["--count=-3"], "count", -3),
        (["--count", "-3"], "count", -3),
        (["--rate=2.5"], "rate", 2.5),
        (["--rate", "1e3"], "rate", 1000.0),
        (["--name="], "name", ""),
        (["--name", ""], "name", ""),
        (["--name=a=b"], "name", "a=b"),
        (["--name", "--verbose"], "name", "--verbose"),
        (["--verbose"], "verbose", True),
        (["-verbose"], "verbose", True),
        (["--verbose=true"], "verbose", True),
        (["--verbose=1"], "verbose", True),
        (["--verbose=T"], "verbose", True),
        (["--on=false"], "on", False),
        (["-on=0"], "on", False),
        (["--on=F"], "on", False),
        (["--on=False"], "on", False),
        (["--count=1", "--count=2"], "count", 2),
    ],
)
def test_accepted_forms(argv: list[str], name: str, expected: object) -> None:
    result = _flagset().parse(argv)
    assert result.values[name] == expected
    assert name in result.explicit


def test_defaults_when_not_given() -> None:
    result = _flagset().parse([])
    assert result.values == {"verbose": False, "on": True, "count": 7, "rate": -1.0, "name": "x"}
    assert result.explicit == frozenset()
    assert result.args == ()


def test_bool_does_not_consume_the_next_argument() -> None:
    """``--on false`` is ``--on`` followed by the positional ``false`` (Go semantics)."""
    result = _flagset().parse(["--on", "false", "--count=1"])
    assert result.values["on"] is True
    assert result.values["count"] == 7  # parsing stopped at "false"
    assert result.args == ("false", "--count=1")


@pytest.mark.parametrize(
    ("argv", "rest"),
    [
        (["positional", "--verbose"], ("positional", "--verbose")),
        (["--", "--verbose"], ("--verbose",)),
        (["-", "--verbose"], ("-", "--verbose")),
        (["--count=1", "x"], ("x",)),
    ],
)
def test_parsing_stops_at_first_non_flag(argv: list[str], rest: tuple[str, ...]) -> None:
    result = _flagset().parse(argv)
    assert result.args == rest
    assert result.values["verbose"] is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nope"], "flag provided but not defined: -nope"),
        (["-nope=1"], "flag provided but not defined: -nope"),
        (["---count=1"], "bad flag syntax: ---count=1"),
        (["-=1"], "bad flag syntax: -=1"),
        (["--=1"], "bad flag syntax: --=1"),
        (["--count"], "flag needs an argument: -count"),
        (["--count=abc"], 'invalid value "abc" for flag -count: parse error'),
        (["--count", "1.5"], 'invalid value "1.5" for flag -count: parse error'),
        (["--count="], 'invalid value "" for flag -count: parse error'),
        (
            ["--count=9223372036854775808"],
            'invalid value "9223372036854775808" for flag -count: value out of range',
        ),
        (["--rate=fast"], 'invalid value "fast" for flag -rate: parse error'),
        (["--rate=1e999"], 'invalid value "1e999" for flag -rate: value out of range'),
        (["--rate= 1"], 'invalid value " 1" for flag -rate: parse error'),
        (["--verbose=yes"], 'invalid boolean value "yes" for -verbose: parse error'),
        (["--verbose="], 'invalid boolean value "" for -verbose: parse error'),
    ],
)
def test_errors_use_go_messages(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as caught:
        _flagset().parse(argv)
    assert str(caught.value) == message


@pytest.mark.parametrize("argv", [["-h"], ["--help"], ["-help"], ["--count=1", "-h"]])
def test_help(argv: list[str]) -> None:
    with pytest.raises(HelpRequested):
        _flagset().parse(argv)


def test_help_after_positional_is_not_help() -> None:
    assert _flagset().parse(["x", "-h"]).args == ("x", "-h")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("-42", -42),
        ("+42", 42),
        ("0x1F", 31),
        ("0X1f", 31),
        ("0o17", 15),
        ("017", 15),
        ("-010", -8),
        ("0b101", 5),
        ("1_000", 1000),
        ("0x_ff", 255),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
    ],
)
def test_go_int(text: str, value: int) -> None:
    assert parse_go_int(text) == value


@pytest.mark.parametrize(
    "text", ["", " 1", "1 ", "08", "1__0", "_1", "1_", "0x", "1.0", "1e3", "--1"]
)
def test_go_int_rejects(text: str) -> None:
    with pytest.raises(ValueError_, match="parse error"):
        parse_go_int(text)


def test_go_int_range() -> None:
    with pytest.raises(ValueError_, match="value out of range"):
        parse_go_int("-9223372036854775809")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1.0),
        ("-1.0", -1.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("1e-3", 0.001),
        ("1_000.5", 1000.5),
        ("0x1p-2", 0.25),
        ("+Inf", math.inf),
        ("-infinity", -math.inf),
    ],
)
def test_go_float(text: str, value: float) -> None:
    assert parse_go_float(text) == value


def test_go_float_nan() -> None:
    assert math.isnan(parse_go_float("NaN"))


@pytest.mark.parametrize("text", ["", "abc", "1e", "1..0", "1 ", "0x1", "_1"])
def test_go_float_rejects(text: str) -> None:
    with pytest.raises(ValueError_, match="parse error"):
        parse_go_float(text)


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_bool_true(text: str) -> None:
    assert parse_go_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_go_bool_false(text: str) -> None:
    assert parse_go_bool(text) is False


@pytest.mark.parametrize("text", ["", "yes", "no", "tRuE", "2", "on"])
def test_go_bool_rejects(text: str) -> None:
    with pytest.raises(ValueError_):
        parse_go_bool(text)


def test_value_flag_uses_its_parser() -> None:
    def parse_color(text: str) -> str:
        if text not in ("red", "blue"):
            raise ValueError_(f'invalid color "{text}"')
        return text

    flags = FlagSet("prog")
    flags.add(Flag("color", "value", None, "a color", parse=parse_color))
    assert flags.parse(["--color", "red"]).values["color"] == "red"
    with pytest.raises(FlagError, match=r'^invalid value "green" for flag -color: invalid color'):
        flags.parse(["--color=green"])


def test_redefinition_and_bad_names_are_refused() -> None:
    flags = _flagset()
    with pytest.raises(ValueError, match="redefined"):
        flags.add(Flag("count", "int", 1, "again"))
    for bad in ("", "-x", "a=b"):
        with pytest.raises(ValueError, match="begins with"):
            flags.add(Flag(bad, "bool", False, "bad"))


def test_usage_lists_flags_sorted_with_non_zero_defaults() -> None:
    usage = _flagset().usage()
    lines = usage.splitlines()
    assert lines[0] == "Usage of prog:"
    heads = [line for line in lines if line.startswith("  -")]
    assert heads == ["  -count int", "  -name string", "  -on", "  -rate float", "  -verbose"]
    assert "\tdefault on (default true)" in usage
    assert "\thow many (default 7)" in usage
    assert "\thow fast (default -1)" in usage
    assert '\ta name (default "x")' in usage
    assert "\tbe loud\n" in usage  # false bools print no default
