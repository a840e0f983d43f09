"""Log layout chosen by the ``--zap-*`` flags: JSON and console lines, levels, stack traces."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from kube_agent_sandbox.controller.goflag import ValueError_
from kube_agent_sandbox.controller.logsetup import (
    LogOptions,
    configure_logging,
    parse_log_level,
    parse_time_encoding,
)


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


def _capture(options: LogOptions) -> io.StringIO:
    stream = io.StringIO()
    configure_logging(options, stream=stream)
    return stream


@pytest.mark.usefixtures("restore_root_logger")
def test_json_line_fields() -> None:
    stream = _capture(LogOptions())
    logging.getLogger("setup").info("starting manager", extra={"workers": 3, "sandbox": "x"})
    line = json.loads(stream.getvalue())
    assert list(line)[:4] == ["level", "ts", "logger", "msg"]
    assert line["level"] == "info"
    assert line["logger"] == "setup"
    assert line["msg"] == "starting manager"
    assert line["workers"] == 3
    assert line["sandbox"] == "x"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)", line["ts"])
    assert "stacktrace" not in line


@pytest.mark.usefixtures("restore_root_logger")
def test_json_error_carries_error_and_stacktrace() -> None:
    stream = _capture(LogOptions())
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("setup").exception("unable to start")
    line = json.loads(stream.getvalue())
    assert line["level"] == "error"
    assert line["error"] == "boom"
    assert "RuntimeError: boom" in line["stacktrace"]


@pytest.mark.usefixtures("restore_root_logger")
def test_error_without_exception_gets_call_site_stack() -> None:
    stream = _capture(LogOptions())
    logging.getLogger("x").error("plain")
    line = json.loads(stream.getvalue())
    assert "test_error_without_exception_gets_call_site_stack" in line["stacktrace"]
    assert "logging/__init__.py" not in line["stacktrace"]


@pytest.mark.usefixtures("restore_root_logger")
def test_levels_filtered_and_named() -> None:
    stream = _capture(LogOptions())
    log = logging.getLogger("x")
    log.debug("hidden")
    log.warning("w")
    log.critical("c")
    levels = [json.loads(line)["level"] for line in stream.getvalue().splitlines()]
    assert levels == ["warn", "panic"]


@pytest.mark.usefixtures("restore_root_logger")
def test_stacktrace_level_panic_drops_error_traces() -> None:
    stream = _capture(LogOptions(stacktrace_level=logging.CRITICAL))
    logging.getLogger("x").error("e")
    assert "stacktrace" not in json.loads(stream.getvalue())


@pytest.mark.usefixtures("restore_root_logger")
def test_console_layout_in_development() -> None:
    stream = _capture(LogOptions(development=True))
    logging.getLogger("setup").debug("hello", extra={"k": "v"})
    ts, level, name, msg, fields = stream.getvalue().rstrip("\n").split("\t")
    assert (level, name, msg) == ("DEBUG", "setup", "hello")
    assert json.loads(fields) == {"k": "v"}
    assert ts[:4].isdigit()


@pytest.mark.usefixtures("restore_root_logger")
def test_console_warning_has_stack_in_development() -> None:
    stream = _capture(LogOptions(development=True))
    logging.getLogger("setup").warning("careful")
    first, *rest = stream.getvalue().splitlines()
    assert first.split("\t")[1] == "WARN"
    assert any("test_console_warning_has_stack_in_development" in line for line in rest)


@pytest.mark.usefixtures("restore_root_logger")
def test_configure_twice_does_not_duplicate() -> None:
    configure_logging(LogOptions(), stream=io.StringIO())
    stream = _capture(LogOptions())
    logging.getLogger("x").info("once")
    assert len(stream.getvalue().splitlines()) == 1


@pytest.mark.usefixtures("restore_root_logger")
@pytest.mark.parametrize(
    ("encoding", "pattern"),
    [
        ("epoch", r"\d{10}\.\d+"),
        ("millis", r"\d{13}\.?\d*"),
        ("nanos", r"\d{19}"),
        ("iso8601", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d{4}"),
        ("rfc3339", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)"),
        ("rfc3339nano", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)"),
    ],
)
def test_time_encodings(encoding: str, pattern: str) -> None:
    stream = _capture(LogOptions(time_encoding=parse_time_encoding(encoding)))
    logging.getLogger("x").info("t")
    assert re.fullmatch(pattern, str(json.loads(stream.getvalue())["ts"]))


@pytest.mark.usefixtures("restore_root_logger")
def test_verbosity_levels_open_below_debug() -> None:
    stream = _capture(LogOptions(level=parse_log_level("3")))
    log = logging.getLogger("x")
    log.log(logging.DEBUG - 2, "v3")
    log.log(logging.DEBUG - 3, "v4")
    assert [json.loads(x)["msg"] for x in stream.getvalue().splitlines()] == ["v3"]


def test_parse_log_level_values() -> None:
    assert parse_log_level("DEBUG") == logging.DEBUG
    assert parse_log_level("info") == logging.INFO
    assert parse_log_level("error") == logging.ERROR
    assert parse_log_level("panic") == logging.CRITICAL
    assert parse_log_level("1") == logging.DEBUG
    assert parse_log_level("100") == 1
    for bad in ("0", "-2", "warn", "1.5", ""):
        with pytest.raises(ValueError_, match="invalid log level"):
            parse_log_level(bad)


@pytest.mark.usefixtures("restore_root_logger")
def test_unserializable_fields_become_text() -> None:
    stream = _capture(LogOptions())
    logging.getLogger("x").info("obj", extra={"thing": object(), "n": {1: "a"}})
    line = json.loads(stream.getvalue())
    assert line["thing"].startswith("<object object")
    assert line["n"] == {"1": "a"}
