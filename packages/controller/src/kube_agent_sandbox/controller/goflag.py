"""Command-line parsing with the syntax of Go's ``flag`` package.

Upstream's controller is a Go binary whose flags are parsed by ``flag.CommandLine``. Users,
Helm charts and the upstream e2e suite pass arguments in that syntax, so ours accepts exactly
the same forms, with the same error messages and exit codes:

* ``-name`` and ``--name`` are the same flag;
* ``--name=value`` and ``--name value`` for non-boolean flags;
* boolean flags: bare ``--name`` means true, ``--name=false`` (never ``--name false``);
* parsing stops at the first argument that is not a flag, or after ``--``;
* ``-h``/``-help`` print the usage and exit 0; any other error prints the error and the usage
  and exits 2.

``argparse`` cannot express these rules (single-dash long names, booleans with ``=value``,
stop-at-first-positional), hence this small parser.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

__all__ = [
    "EXIT_USAGE",
    "Flag",
    "FlagError",
    "FlagSet",
    "HelpRequested",
    "ParseResult",
    "ValueError_",
    "parse_go_bool",
    "parse_go_float",
    "parse_go_int",
]

EXIT_USAGE = 2
"""Exit status of a Go program whose ``flag.Parse`` failed (``flag.ExitOnError``)."""

FlagKind = Literal["bool", "int", "float", "string", "value"]
T = TypeVar("T")


class ValueError_(Exception):
    """A flag value that does not parse; the message is Go's (``parse error``, ...)."""


class FlagError(Exception):
    """The command line is malformed; ``str(error)`` is the line Go's flag package prints."""


class HelpRequested(Exception):
    """``-h`` or ``-help`` was given (Go's ``flag.ErrHelp``): print usage, exit 0."""


_GO_BOOL_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_BOOL_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_LEGACY_OCTAL = re.compile(r"[+-]?0[0-7_]+")
_GO_INT = re.compile(
    r"[+-]?(?:0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|0(?:_?[0-7])*|[1-9](?:_?[0-9])*)"
)
_DIGITS = r"[0-9](?:_?[0-9])*"
_GO_DECIMAL_FLOAT = re.compile(
    rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?"
)
_GO_SPECIAL_FLOAT = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE)
_GO_HEX_FLOAT = re.compile(
    r"([+-]?)0[xX]((?:_?[0-9a-fA-F])*)(?:\.([0-9a-fA-F]*))?[pP]([+-]?[0-9]+)", re.IGNORECASE
)


def parse_go_bool(text: str) -> bool:
    """Parse like Go's ``strconv.ParseBool``.

    Args:
        text: ``1 t T TRUE true True`` or ``0 f F FALSE false False``.

    Returns:
        The boolean.

    Raises:
        ValueError_: for anything else (``parse error``).
    """
    if text in _GO_BOOL_TRUE:
        return True
    if text in _GO_BOOL_FALSE:
        return False
    raise ValueError_("parse error")


def parse_go_int(text: str) -> int:
    """Parse like Go's ``strconv.ParseInt(text, 0, 64)`` (what ``flag.IntVar`` does).

    Base prefixes ``0x``, ``0o``, ``0b``, a leading ``0`` for octal, and underscores between
    digits (Go's literal syntax) are accepted.

    Args:
        text: the flag value.

    Returns:
        The integer.

    Raises:
        ValueError_: ``parse error`` or ``value out of range`` (outside int64).
    """
    if not _GO_INT.fullmatch(text):
        raise ValueError_("parse error")
    value = int(text.replace("_", ""), 8) if _LEGACY_OCTAL.fullmatch(text) else int(text, 0)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError_("value out of range")
    return value


def parse_go_float(text: str) -> float:
    """Parse like Go's ``strconv.ParseFloat(text, 64)``.

    Args:
        text: decimal, hexadecimal (``0x1p-2``) or ``inf``/``infinity``/``nan`` with a sign.

    Returns:
        The float.

    Raises:
        ValueError_: ``parse error``, or ``value out of range`` when a finite literal
            overflows float64.
    """
    if _GO_SPECIAL_FLOAT.fullmatch(text):
        return float(text)
    hex_match = _GO_HEX_FLOAT.fullmatch(text)
    if hex_match:
        sign, whole, frac, exp = hex_match.groups()
        if not (whole or frac):
            raise ValueError_("parse error")
        try:
            value = float.fromhex(f"{sign}0x{whole.replace('_', '') or '0'}.{frac or '0'}p{exp}")
        except OverflowError:
            raise ValueError_("value out of range") from None
        return value
    if not _GO_DECIMAL_FLOAT.fullmatch(text):
        raise ValueError_("parse error")
    value = float(text)
    if math.isinf(value):
        raise ValueError_("value out of range")
    return value


def _go_quote(text: str) -> str:
    """Quote like Go's ``%q`` for the common (printable) case."""
    return json.dumps(text, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: name (no dashes), kind, default and help text.

    ``kind`` decides the syntax: only ``bool`` flags may stand alone. ``value`` flags use
    ``parse`` (which raises :class:`ValueError_` with Go's message) and print ``value`` as their
    type in the usage text.
    """

    name: str
    kind: FlagKind
    default: object
    usage: str
    parse: Callable[[str], object] | None = None
    default_text: str | None = None

    def convert(self, text: str) -> object:
        """Turn the text of this flag's value into its Python value (Go's ``Value.Set``)."""
        if self.kind == "bool":
            return parse_go_bool(text)
        if self.kind == "int":
            return parse_go_int(text)
        if self.kind == "float":
            return parse_go_float(text)
        if self.kind == "string":
            return text
        assert self.parse is not None, f"flag {self.name} of kind 'value' needs a parser"
        return self.parse(text)


@dataclass(frozen=True, slots=True)
class ParseResult:
    """What :meth:`FlagSet.parse` found."""

    values: dict[str, object]
    """Every flag's value by name: the given one, else the default."""
    explicit: frozenset[str]
    """Names of the flags that appeared on the command line (Go's ``flag.Visit``)."""
    args: tuple[str, ...]
    """Arguments left after the flags (Go's ``flag.Args()``)."""


@dataclass
class FlagSet:
    """A set of flags parsed the way Go's ``flag.FlagSet`` parses them.

    Args:
        program: the program name shown in ``Usage of <program>:``.
    """

    program: str
    flags: dict[str, Flag] = field(default_factory=dict)

    def add(self, flag: Flag) -> None:
        """Register a flag; a name may be defined once."""
        if flag.name in self.flags:
            raise ValueError(f"flag redefined: {flag.name}")
        if not flag.name or flag.name.startswith("-") or "=" in flag.name:
            raise ValueError(f"flag {flag.name!r} begins with -, contains = or is empty")
        self.flags[flag.name] = flag

    def add_all(self, flags: Iterable[Flag]) -> None:
        """Register several flags."""
        for flag in flags:
            self.add(flag)

    def parse(self, argv: Sequence[str]) -> ParseResult:
        """Parse ``argv`` (without the program name).

        Args:
            argv: the command-line arguments.

        Returns:
            Every flag's value, which flags were given, and the remaining arguments.

        Raises:
            HelpRequested: for ``-h``/``-help`` (unless defined as flags).
            FlagError: for malformed input, with Go's message.
        """
        values: dict[str, object] = {name: flag.default for name, flag in self.flags.items()}
        explicit: set[str] = set()
        args = list(argv)
        while args:
            arg = args[0]
            if len(arg) < 2 or arg[0] != "-":
                break  # first non-flag argument ends the flags
            dashes = 2 if arg[1] == "-" else 1
            if arg == "--":
                args.pop(0)
                break
            name = arg[dashes:]
            if not name or name[0] in "-=":
                raise FlagError(f"bad flag syntax: {arg}")
            args.pop(0)
            name, eq, inline_value = name.partition("=")
            has_value = bool(eq)
            flag = self.flags.get(name)
            if flag is None:
                if name in ("help", "h"):
                    raise HelpRequested
                raise FlagError(f"flag provided but not defined: -{name}")
            if flag.kind == "bool":
                text = inline_value if has_value else "true"
                try:
                    values[name] = flag.convert(text)
                except ValueError_ as err:
                    if has_value:
                        raise FlagError(
                            f"invalid boolean value {_go_quote(text)} for -{name}: {err}"
                        ) from None
                    raise FlagError(f"invalid boolean flag {name}: {err}") from None
            else:
                if not has_value:
                    if not args:
                        raise FlagError(f"flag needs an argument: -{name}")
                    inline_value = args.pop(0)
                try:
                    values[name] = flag.convert(inline_value)
                except ValueError_ as err:
                    raise FlagError(
                        f"invalid value {_go_quote(inline_value)} for flag -{name}: {err}"
                    ) from None
            explicit.add(name)
        return ParseResult(values=values, explicit=frozenset(explicit), args=tuple(args))

    def usage(self) -> str:
        """The usage text, laid out like Go's ``flag.PrintDefaults``."""
        lines = [f"Usage of {self.program}:"]
        for name in sorted(self.flags):
            flag = self.flags[name]
            head = f"  -{name}"
            type_name = {"bool": "", "int": "int", "float": "float", "string": "string"}.get(
                flag.kind, "value"
            )
            if type_name:
                head += f" {type_name}"
            lines.append(head)
            text = flag.usage.replace("\n", "\n    \t")
            default = flag.default_text if flag.default_text is not None else _default_text(flag)
            if default:  # None or "": the zero value, which Go does not print
                text += f" (default {default})"
            lines.append(f"    \t{text}")
        return "\n".join(lines) + "\n"


def _default_text(flag: Flag) -> str | None:
    """Go prints a default unless it is the zero value of the flag's type."""
    default = flag.default
    if flag.kind == "bool":
        return "true" if default else None
    if flag.kind == "string":
        return _go_quote(str(default)) if default else None
    if flag.kind in ("int", "float"):
        if default == 0:
            return None
        if isinstance(default, float) and default.is_integer():
            return str(int(default))
        return str(default)
    return None if default in (None, "") else str(default)
