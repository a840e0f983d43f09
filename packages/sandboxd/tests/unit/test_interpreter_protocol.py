"""The worker protocol: frames, sync markers, result formatting, event ordering, NDJSON lines."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import struct
from pathlib import Path

import pytest

from kube_agent_sandbox.sandboxd.interpreter import driver, events, r_worker
from kube_agent_sandbox.sandboxd.interpreter.cli import bind, parse_args
from kube_agent_sandbox.sandboxd.interpreter.contexts import (
    UnsupportedLanguageError,
    normalize_language,
)
from kube_agent_sandbox.sandboxd.interpreter.protocol import (
    FrameError,
    SyncSplitter,
    read_frame,
    sync_prefix,
)
from kube_agent_sandbox.sandboxd.interpreter.worker import _Orderer

# --- frames -----------------------------------------------------------------------------------


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_frames_round_trip_through_the_async_reader() -> None:
    messages = [{"t": "count", "n": 1}, {"t": "result", "text": "é\u2603"}, {}]
    reader = _reader(b"".join(driver.encode_frame(m) for m in messages))
    assert [await read_frame(reader) for _ in messages] == messages
    assert await read_frame(reader) is None


async def test_a_truncated_frame_is_end_of_stream() -> None:
    frame = driver.encode_frame({"t": "done"})
    assert await read_frame(_reader(frame[:-2])) is None
    assert await read_frame(_reader(frame[:2])) is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[1, 2]", "not a JSON object"),
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
    ],
)
async def test_bad_frames_are_errors(body: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        await read_frame(_reader(struct.pack(">I", len(body)) + body))


async def test_an_oversized_frame_is_refused_before_reading_it() -> None:
    with pytest.raises(FrameError, match="exceeds"):
        await read_frame(_reader(struct.pack(">I", driver.MAX_FRAME + 1)))


def test_the_driver_reads_frames_from_a_pipe() -> None:
    read_fd, write_fd = os.pipe()
    try:
        frame = driver.encode_frame({"op": "execute", "code": "x"})
        os.write(write_fd, frame[:3])
        os.write(write_fd, frame[3:])
        os.write(write_fd, struct.pack(">I", 2) + b"[]")
        os.write(write_fd, struct.pack(">I", driver.MAX_FRAME + 1))
        os.close(write_fd)
        write_fd = -1
        assert driver.read_frame(read_fd) == {"op": "execute", "code": "x"}
        with pytest.raises(ValueError, match="JSON object"):
            driver.read_frame(read_fd)
        with pytest.raises(ValueError, match="exceeds"):
            driver.read_frame(read_fd)
        assert driver.read_frame(read_fd) is None
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


# --- sync markers -----------------------------------------------------------------------------


def _marker(token: str, seq: int) -> bytes:
    return sync_prefix(token) + str(seq).encode() + driver.SYNC_END


def _collect(splitter: SyncSplitter, chunks: list[bytes]) -> list[bytes | int]:
    parts: list[bytes | int] = []
    for chunk in chunks:
        parts.extend(splitter.feed(chunk))
    parts.append(splitter.flush())
    merged: list[bytes | int] = []
    for part in parts:
        if isinstance(part, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += part
        elif part != b"":
            merged.append(part)
    return merged


def test_markers_are_found_across_every_split() -> None:
    token = "ab12"
    stream = b"hello\n" + _marker(token, 7) + b"tail \x00\x1f" + _marker(token, 8) + b"\x00"
    expected: list[bytes | int] = [b"hello\n", 7, b"tail \x00\x1f", 8, b"\x00"]
    for cut in range(len(stream) + 1):
        assert _collect(SyncSplitter(token), [stream[:cut], stream[cut:]]) == expected, cut
    rng = random.Random(4)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(stream)), 5))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert _collect(SyncSplitter(token), chunks) == expected


def test_another_workers_marker_and_junk_after_a_prefix_stay_output() -> None:
    token = "ab12"
    foreign = _marker("zz99", 3)
    not_digits = sync_prefix(token) + b"x1" + driver.SYNC_END
    too_long = sync_prefix(token) + b"1" * 30
    stream = foreign + not_digits + too_long
    assert _collect(SyncSplitter(token), [stream]) == [stream]


def test_markers_of_another_shape_are_found_and_the_default_ones_stay_output() -> None:
    # R's driver cannot write NUL, so its markers open and close with other control bytes.
    start, end = r_worker.SYNC_START, r_worker.SYNC_END
    token = "ab12"
    r_marker = sync_prefix(token, start) + b"5" + end
    stream = b"out" + r_marker + _marker(token, 6) + b"\n"
    for cut in range(len(stream) + 1):
        parts = _collect(SyncSplitter(token, start, end), [stream[:cut], stream[cut:]])
        assert parts == [b"out", 5, _marker(token, 6) + b"\n"], cut


def test_a_partial_prefix_at_the_end_is_flushed_as_output() -> None:
    splitter = SyncSplitter("ab12")
    assert splitter.feed(b"x\x00\x1fE2B") == [b"x"]
    assert splitter.flush() == b"\x00\x1fE2B"


# --- ordering ---------------------------------------------------------------------------------


def test_output_and_events_come_out_in_the_order_they_were_produced() -> None:
    order = _Orderer(emitted=4)
    # The event pipe is faster than stdout: event 5 arrives before the text printed before it.
    order.add("event", {"t": "result", "seq": 5, "streams": ["stdout", "stderr"]}, 0.0)
    assert order.ready() == []
    order.add("stdout", (4, "before\n"), 0.0)
    assert order.ready() == [("stdout", "before\n")]
    order.add("stdout", (5, "after\n"), 0.0)  # printed after the event
    order.add("sync", ("stdout", 5), 0.0)
    assert order.ready() == []  # stderr has not shown marker 5 yet
    order.add("sync", ("stderr", 5), 0.0)
    assert order.ready() == [
        {"t": "result", "seq": 5, "streams": ["stdout", "stderr"]},
        ("stdout", "after\n"),
    ]


def test_an_event_without_streams_does_not_wait_and_force_releases() -> None:
    order = _Orderer(emitted=0)
    order.add("event", {"t": "count", "seq": 1, "streams": []}, 0.0)
    assert order.ready() == [{"t": "count", "seq": 1, "streams": []}]
    order.add("event", {"t": "done", "seq": 2, "streams": ["stdout"]}, 1.0)
    assert order.ready() == []
    assert order.stalled_since() == 1.0
    order.force()
    assert order.ready() == [{"t": "done", "seq": 2, "streams": ["stdout"]}]
    assert order.stalled_since() is None


# --- results ----------------------------------------------------------------------------------


class _Rich:
    def __repr__(self) -> str:
        return "Rich()"

    def _repr_html_(self) -> str:
        return "<i>r</i>"

    def _repr_png_(self) -> bytes:
        return b"\x89PNG"

    def _repr_json_(self) -> str:
        return '{"a": 1}'

    def _repr_latex_(self) -> str:
        raise RuntimeError("broken format")


class _BadRepr:
    def __repr__(self) -> str:
        raise ValueError("nope")


def test_format_result() -> None:
    assert driver.format_result("hi", is_main_result=True) == {
        "is_main_result": True,
        "text": "hi",
    }
    assert driver.format_result(2, is_main_result=False)["text"] == "2"
    rich = driver.format_result(_Rich(), is_main_result=True)
    assert rich["text"] == "Rich()"
    assert rich["html"] == "<i>r</i>"
    assert rich["png"] == "iVBORw=="
    assert rich["json"] == {"a": 1}
    assert "latex" not in rich
    assert "failed" in driver.format_result(_BadRepr(), is_main_result=True)["text"]
    assert "html" not in driver.format_result(_Rich, is_main_result=True)  # the class itself


def test_result_event_keeps_only_known_fields() -> None:
    event = events.result_event(
        {"t": "result", "seq": 3, "streams": [], "text": "1", "html": None, "is_main_result": True}
    )
    assert event == {"type": "result", "text": "1", "is_main_result": True}


def test_ndjson_lines_parse_back_one_object_per_line() -> None:
    lines = [
        events.stream_event("stdout", "a\nb\udc80"),
        events.count_event(3),
        events.error_event("E", "v", "tb"),
        events.END_OF_EXECUTION,
    ]
    encoded = b"".join(events.ndjson_line(e) for e in lines)
    decoded = [json.loads(line) for line in encoded.splitlines()]
    assert [d["type"] for d in decoded] == [
        "stdout",
        "number_of_executions",
        "error",
        "end_of_execution",
    ]
    assert decoded[0]["text"] == "a\nb\udc80"
    assert decoded[0]["timestamp"].endswith("+00:00")


# --- languages and CLI ------------------------------------------------------------------------


def test_languages() -> None:
    assert normalize_language(None) == "python"
    assert normalize_language(" Python3 ") == "python"
    assert normalize_language("bash") == "bash"
    assert normalize_language("sh") == "sh"
    assert normalize_language("JS") == "javascript"
    assert normalize_language("ts") == "typescript"
    with pytest.raises(UnsupportedLanguageError, match="'java' is not supported"):
        normalize_language("java")


def test_bind_sets_tcp_and_reports_a_taken_port() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP  # asyncio then sets TCP_NODELAY per connection
        port = sock.getsockname()[1]
        with pytest.raises(SystemExit, match=f"port {port} on 127.0.0.1 is already in use"):
            bind("127.0.0.1", port)
    finally:
        sock.close()


def test_cli_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    options = parse_args(["--access-token-file", str(token_file), "--port", "5000"])
    assert options.access_token == "s3cret"
    assert options.port == 5000
    assert options.envd_url == "http://127.0.0.1:49983"
    assert parse_args(["--envd-url", ""]).envd_url == ""
    assert parse_args(["--user", "root"]).user == "root"
    assert parse_args([]).rscript == "Rscript"
    assert parse_args(["--rscript", "/opt/R/bin/Rscript"]).rscript == "/opt/R/bin/Rscript"
    monkeypatch.setenv("SANDBOXD_INTERPRETER_ACCESS_TOKEN", "from-env")
    assert parse_args([]).access_token == "from-env"
    monkeypatch.delenv("SANDBOXD_INTERPRETER_ACCESS_TOKEN")
    assert parse_args([]).access_token is None
    empty = tmp_path / "empty"
    empty.write_text("")
    for bad in (
        ["--access-token-file", str(empty)],
        ["--access-token-file", str(tmp_path / "missing")],
        ["--cwd", str(tmp_path / "missing")],
        ["--port", "0"],
        ["--envd-url", "ftp://x"],
        ["--max-contexts", "0"],
        ["--user", "no-such-user-here"],
    ):
        with pytest.raises(SystemExit):
            parse_args(bad)
