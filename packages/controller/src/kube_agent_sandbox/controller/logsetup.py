"""Logging for the controller process, configured by upstream's ``--zap-*`` flags.

Upstream logs through controller-runtime's zap logger: JSON lines by default, a console layout
in development mode. Operators grep and ship those lines, so the process keeps the same flags
and a record layout close to zap's (``level``, ``ts``, ``logger``, ``msg``, then the record's
fields, ``error`` and ``stacktrace``) on top of the standard :mod:`logging` module. Library code
keeps using ``logging.getLogger(__name__)``; structured fields travel in ``extra={...}``.

Mapping of zap's levels: ``debug``/``info``/``error``/``panic`` are ``DEBUG``/``INFO``/
``ERROR``/``CRITICAL``; a verbosity ``N > 0`` (logr's ``V(N)``) is the Python level
``11 - N`` (``1`` = ``DEBUG``, higher numbers let more through).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, Final, Literal

import orjson

from kube_agent_sandbox.controller.goflag import ValueError_

__all__ = [
    "ConsoleFormatter",
    "JsonFormatter",
    "LogOptions",
    "TimeEncoding",
    "configure_logging",
    "parse_encoder",
    "parse_log_level",
    "parse_stacktrace_level",
    "parse_time_encoding",
]

Encoder = Literal["json", "console"]
TimeEncoding = Literal["epoch", "millis", "nanos", "iso8601", "rfc3339", "rfc3339nano"]

_LEVEL_NAMES: Final = {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}
_LEVEL_NAMES_WITH_PANIC: Final = {**_LEVEL_NAMES, "panic": logging.CRITICAL}
_STACKTRACE_LEVELS: Final = {
    "info": logging.INFO,
    "error": logging.ERROR,
    "panic": logging.CRITICAL,
}
_TIME_ENCODINGS: Final[dict[str, TimeEncoding]] = {
    "epoch": "epoch",
    "millis": "millis",
    "nano": "nanos",
    "nanos": "nanos",
    "iso8601": "iso8601",
    "rfc3339": "rfc3339",
    "rfc3339nano": "rfc3339nano",
}
# Attributes every LogRecord has; anything else on a record came from ``extra``.
_RECORD_ATTRS: Final = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
_LOGGING_DIR: Final = os.path.dirname(logging.__file__)


def parse_encoder(text: str) -> Encoder:
    """Value of ``--zap-encoder``: ``json`` or ``console`` (any case)."""
    lowered = text.lower()
    if lowered == "json":
        return "json"
    if lowered == "console":
        return "console"
    raise ValueError_(f'invalid encoder value "{text}"')


def parse_log_level(text: str) -> int:
    """Value of ``--zap-log-level`` as a Python logging level.

    Args:
        text: ``debug``, ``info``, ``error``, ``panic`` or an integer verbosity ``> 0``.

    Returns:
        The Python level.

    Raises:
        ValueError_: with controller-runtime's message for anything else.
    """
    level = _LEVEL_NAMES_WITH_PANIC.get(text.lower())
    if level is not None:
        return level
    try:
        verbosity = int(text, 10)
    except ValueError:
        raise ValueError_(f'invalid log level "{text}"') from None
    if verbosity <= 0:
        raise ValueError_(f'invalid log level "{text}"')
    return max(1, logging.DEBUG + 1 - verbosity)


def parse_stacktrace_level(text: str) -> int:
    """Value of ``--zap-stacktrace-level``: ``info``, ``error`` or ``panic``."""
    level = _STACKTRACE_LEVELS.get(text.lower())
    if level is None:
        raise ValueError_(f'invalid stacktrace level "{text}"')
    return level


def parse_time_encoding(text: str) -> TimeEncoding:
    """Value of ``--zap-time-encoding`` (``nano`` and ``nanos`` are the same)."""
    encoding = _TIME_ENCODINGS.get(text.lower())
    if encoding is None:
        raise ValueError_(f'invalid time-encoding value "{text}"')
    return encoding


@dataclass(frozen=True, slots=True)
class LogOptions:
    """What the ``--zap-*`` flags asked for; ``None`` means "the mode's default".

    Production mode (the default): JSON, ``info``, stack traces from ``error``.
    Development mode (``--zap-devel``): console layout, ``debug``, stack traces from warnings.
    """

    development: bool = False
    encoder: Encoder | None = None
    level: int | None = None
    stacktrace_level: int | None = None
    time_encoding: TimeEncoding | None = None

    @property
    def effective_encoder(self) -> Encoder:
        """The layout in use."""
        return self.encoder or ("console" if self.development else "json")

    @property
    def effective_level(self) -> int:
        """The lowest level that is written."""
        if self.level is not None:
            return self.level
        return logging.DEBUG if self.development else logging.INFO

    @property
    def effective_stacktrace_level(self) -> int:
        """Records at or above this level carry a stack trace."""
        if self.stacktrace_level is not None:
            return self.stacktrace_level
        return logging.WARNING if self.development else logging.ERROR

    @property
    def effective_time_encoding(self) -> TimeEncoding:
        """How ``ts`` is written."""
        return self.time_encoding or "rfc3339"


def configure_logging(options: LogOptions, *, stream: IO[str] | None = None) -> logging.Handler:
    """Send every log record of the process to ``stream`` (stderr) in the requested layout.

    Replaces the root logger's handlers, so calling it twice does not duplicate lines.

    Args:
        options: parsed ``--zap-*`` flags.
        stream: where lines go; standard error when omitted (as zap does).

    Returns:
        The installed handler.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    formatter_cls = JsonFormatter if options.effective_encoder == "json" else ConsoleFormatter
    handler.setFormatter(
        formatter_cls(
            time_encoding=options.effective_time_encoding,
            stacktrace_level=options.effective_stacktrace_level,
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(options.effective_level)
    logging.captureWarnings(True)
    return handler


class _ZapLikeFormatter(logging.Formatter):
    """Shared parts of the two layouts: timestamps, level names, fields, stack traces."""

    def __init__(self, *, time_encoding: TimeEncoding, stacktrace_level: int) -> None:
        super().__init__()
        self.time_encoding = time_encoding
        self.stacktrace_level = stacktrace_level

    def timestamp(self, record: logging.LogRecord) -> float | int | str:
        """``ts`` of a record in the configured encoding."""
        created = record.created
        if self.time_encoding == "epoch":
            return created
        if self.time_encoding == "millis":
            return created * 1000.0
        if self.time_encoding == "nanos":
            return int(created * 1_000_000_000)
        moment = datetime.fromtimestamp(created).astimezone()
        if self.time_encoding == "iso8601":
            text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
            return text + moment.strftime("%z")
        if self.time_encoding == "rfc3339":
            return _rfc3339_zone(moment.strftime("%Y-%m-%dT%H:%M:%S%z"))
        fraction = f"{moment.microsecond:06d}".rstrip("0")
        stamp = moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "")
        return _rfc3339_zone(stamp + moment.strftime("%z"))

    @staticmethod
    def level_name(record: logging.LogRecord) -> str:
        """zap's lowercase level names."""
        if record.levelno >= logging.CRITICAL:
            return "panic"
        if record.levelno >= logging.ERROR:
            return "error"
        if record.levelno >= logging.WARNING:
            return "warn"
        if record.levelno >= logging.INFO:
            return "info"
        return "debug"

    @staticmethod
    def fields(record: logging.LogRecord) -> dict[str, Any]:
        """The structured fields a caller passed through ``extra``."""
        return {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS}

    def stacktrace(self, record: logging.LogRecord) -> str | None:
        """A traceback for records at or above the stack-trace level."""
        if record.exc_info and record.exc_info[1] is not None:
            if record.levelno >= self.stacktrace_level:
                return "".join(traceback.format_exception(*record.exc_info)).rstrip()
            return None
        if record.stack_info:
            return record.stack_info
        if record.levelno < self.stacktrace_level:
            return None
        frames = [
            frame
            for frame in traceback.extract_stack()
            if not frame.filename.startswith(_LOGGING_DIR) and frame.filename != __file__
        ]
        return "".join(traceback.format_list(frames)).rstrip() or None

    @staticmethod
    def error_text(record: logging.LogRecord) -> str | None:
        """The message of the exception attached to the record (zap's ``error`` key)."""
        if record.exc_info and record.exc_info[1] is not None:
            return str(record.exc_info[1]) or type(record.exc_info[1]).__name__
        return None


class JsonFormatter(_ZapLikeFormatter):
    """One JSON object per line, keys in zap's production order."""

    def format(self, record: logging.LogRecord) -> str:
        """Render a record as a JSON line."""
        line: dict[str, Any] = {
            "level": self.level_name(record),
            "ts": self.timestamp(record),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in self.fields(record).items():
            line.setdefault(key, value)
        error = self.error_text(record)
        if error is not None:
            line["error"] = error
        stack = self.stacktrace(record)
        if stack is not None:
            line["stacktrace"] = stack
        return orjson.dumps(line, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class ConsoleFormatter(_ZapLikeFormatter):
    """Tab-separated ``ts level logger msg {fields}`` lines, stack trace below (zap console)."""

    def format(self, record: logging.LogRecord) -> str:
        """Render a record as a console line."""
        parts = [
            str(self.timestamp(record)),
            self.level_name(record).upper(),
            record.name,
            record.getMessage(),
        ]
        fields = self.fields(record)
        error = self.error_text(record)
        if error is not None:
            fields["error"] = error
        if fields:
            parts.append(orjson.dumps(fields, default=str, option=orjson.OPT_NON_STR_KEYS).decode())
        text = "\t".join(parts)
        stack = self.stacktrace(record)
        return f"{text}\n{stack}" if stack else text


def _rfc3339_zone(stamp: str) -> str:
    """Turn a ``+hhmm`` suffix into RFC 3339's ``+hh:mm`` (``Z`` for UTC)."""
    body, zone = stamp[:-5], stamp[-5:]
    if zone in ("+0000", "-0000"):
        return body + "Z"
    return f"{body}{zone[:3]}:{zone[3:]}"
