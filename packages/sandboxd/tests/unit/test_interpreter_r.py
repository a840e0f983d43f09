"""R contexts: a real ``Rscript`` driven through the worker (and once over HTTP).

A missing ``Rscript`` skips locally and fails under ``CI=true`` (``scripts/setup.sh`` installs
the Debian package ``r-base-core``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kube_agent_sandbox.sandboxd.interpreter import r_worker
from kube_agent_sandbox.sandboxd.interpreter import worker as worker_module
from kube_agent_sandbox.sandboxd.interpreter.app import build_app
from kube_agent_sandbox.sandboxd.interpreter.config import InterpreterOptions
from kube_agent_sandbox.sandboxd.interpreter.contexts import ContextRegistry, normalize_language
from kube_agent_sandbox.sandboxd.interpreter.events import Event
from kube_agent_sandbox.sandboxd.interpreter.pipes import RunAs
from kube_agent_sandbox.sandboxd.interpreter.r_worker import RMissingError, RWorker
from kube_agent_sandbox.sandboxd.interpreter.worker import WorkerSettings
from kube_agent_sandbox.testing.plugin import unavailable


def _rscript() -> str:
    rscript = shutil.which("Rscript")
    if rscript is None:
        unavailable("R is needed for R contexts (scripts/setup.sh installs r-base-core)")
    return rscript


@pytest.fixture
async def r(tmp_path: Path) -> AsyncIterator[RWorker]:
    """A started R context in a fresh directory."""
    _rscript()
    worker = RWorker(cwd=str(tmp_path))
    await worker.start()
    try:
        yield worker
    finally:
        await worker.close()


async def _run(
    runner: RWorker,
    code: str,
    *,
    env: dict[str, str] | None = None,
    time_limit: float | None = None,
) -> list[Event]:
    return [e async for e in runner.execute(code, env=env, time_limit=time_limit)]


def _plain(found: list[Event]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "timestamp"} for e in found]


def _errors(found: list[Event]) -> list[Event]:
    return [e for e in found if e["type"] == "error"]


def _text(found: list[Event]) -> str | None:
    results = [e for e in found if e["type"] == "result" and e["is_main_result"]]
    return results[-1]["text"] if results else None


def _stream(found: list[Event], name: str) -> str:
    return "".join(e["text"] for e in found if e["type"] == name)


def _merged(found: list[Event]) -> list[tuple[str, str]]:
    """The output as (stream, text) runs: R's cat() writes each argument separately."""
    runs: list[tuple[str, str]] = []
    for event in found:
        if event["type"] not in ("stdout", "stderr"):
            continue
        if runs and runs[-1][0] == event["type"]:
            runs[-1] = (event["type"], runs[-1][1] + event["text"])
        else:
            runs.append((event["type"], event["text"]))
    return runs


def test_r_and_its_aliases_are_a_language() -> None:
    assert normalize_language("r") == "r"
    assert normalize_language("R") == "r"
    assert normalize_language(" Rscript ") == "r"


async def test_output_results_and_state_across_cells(r: RWorker) -> None:
    found = await _run(r, 'x <- 40\ncat("p\\n")\nmessage("e")\nx + 2')
    assert _plain(found) == [
        {"type": "number_of_executions", "execution_count": 1},
        {"type": "stdout", "text": "p\n"},
        {"type": "stderr", "text": "e\n"},
        {"type": "result", "text": "[1] 42", "is_main_result": True},
    ]
    assert _text(await _run(r, "x <- 1+1; x")) == "[1] 2"
    assert _text(await _run(r, "f <- function(n) n * x\nf(21)")) == "[1] 42"
    assert _text(await _run(r, 'paste("a", "string")')) == '[1] "a string"'
    assert _text(await _run(r, "data.frame(a = 1:2, b = c('u', 'v'))")) == "  a b\n1 1 u\n2 2 v"
    # Invisible values (assignments, invisible()) are not results, as in R's console.
    assert [e["type"] for e in await _run(r, "y <- 5")] == ["number_of_executions"]
    assert [e["type"] for e in await _run(r, "invisible(7)")] == ["number_of_executions"]
    # Every visible top-level value is shown; the last expression's is the main result.
    shown = _plain(await _run(r, "1\n2\n3"))[1:]
    assert shown == [
        {"type": "result", "text": "[1] 1", "is_main_result": False},
        {"type": "result", "text": "[1] 2", "is_main_result": False},
        {"type": "result", "text": "[1] 3", "is_main_result": True},
    ]
    assert r.execution_count == 8


async def test_output_streams_in_order_while_the_cell_runs(r: RWorker) -> None:
    started = time.monotonic()
    arrivals: list[tuple[float, Event]] = []
    code = 'for (i in 1:3) {\n  cat(i, "\\n")\n  message("e", i)\n  Sys.sleep(0.3)\n}\n"done"'
    async for event in r.execute(code):
        arrivals.append((time.monotonic() - started, event))
    finished = time.monotonic() - started
    merged = _merged([e for _, e in arrivals])
    # stdout and stderr are two pipes: what one iteration writes to both at once may arrive in
    # either order; iterations, 0.3 s apart, arrive in order
    assert [set(merged[i : i + 2]) for i in (0, 2, 4)] == [
        {("stdout", f"{i} \n"), ("stderr", f"e{i}\n")} for i in (1, 2, 3)
    ], merged
    first = next(at for at, e in arrivals if e["type"] == "stdout")
    assert first < finished - 0.4  # streamed, not held until the end
    assert arrivals[-1][1]["text"] == '[1] "done"'
    child = await _run(r, 'system("echo from child; echo child err >&2"); 1')
    assert (_stream(child, "stdout"), _stream(child, "stderr")) == ("from child\n", "child err\n")


async def test_errors_have_the_irkernel_shape_and_keep_the_context(r: RWorker) -> None:
    await _run(r, 'kept <- "yes"')
    code = 'f <- function() stop("boom")\ng <- function() f()\ncat("before\\n")\ng()'
    found = await _run(r, code)
    assert _stream(found, "stdout") == "before\n"
    (error,) = _errors(found)
    assert error["name"] == "ERROR"
    assert error["value"] == "Error in f(): boom\n"
    assert error["traceback"] == (
        'Error in f(): boom\nTraceback:\n\n1. g()\n2. f()\n3. stop("boom")'
    )
    assert "driver" not in error["traceback"]
    (top,) = _errors(await _run(r, 'stop("at top level")'))
    assert top["value"] == "Error: at top level\n"
    (builtin,) = _errors(await _run(r, '1 + "a"'))
    assert builtin["value"] == 'Error in 1 + "a": non-numeric argument to binary operator\n'
    # A cell stops at its first error: later expressions do not run.
    stopped = await _run(r, 'stop("first")\ncat("never\\n")')
    assert _stream(stopped, "stdout") == ""
    assert _text(await _run(r, 'tryCatch(stop("x"), error = function(e) "caught")')) == (
        '[1] "caught"'
    )
    assert _text(await _run(r, "kept")) == '[1] "yes"'


async def test_bad_input_is_an_error_result_not_a_crash(r: RWorker) -> None:
    await _run(r, "kept <- 1")
    (syntax,) = _errors(await _run(r, "let 3x"))
    assert syntax["name"] == "ERROR"
    assert syntax["value"].startswith("Error: <cell-2>:1:5: unexpected numeric constant")
    (unfinished,) = _errors(await _run(r, "x <- (1"))
    assert "unexpected end of input" in unfinished["value"]
    # Escapes and characters outside ASCII survive the JSON both ways.
    text = 's <- "\\u00e9\\U0001F600\\t\\"q\\"\\\\ \u00fc"; cat(s, "\\n"); nchar(s)'
    found = await _run(r, text)
    assert _stream(found, "stdout") == 'é😀\t"q"\\ ü \n'
    assert _text(found) == "[1] 9"
    big = await _run(r, "v <- '" + "x" * 500_000 + "'; nchar(v)")
    assert _text(big) == "[1] 500000"
    # User code that wipes or shadows the global environment leaves the driver working.
    assert _text(await _run(r, "rm(list = ls()); send <- 1; print <- 2; cat <- 3; 4")) == "[1] 4"
    assert _text(await _run(r, "exists('kept')")) == "[1] FALSE"
    assert [e["type"] for e in await _run(r, "")] == ["number_of_executions"]
    # Console input is empty (not the driver's command pipe), so reading it cannot hang a cell.
    assert _text(await _run(r, 'readline("q? ")')) == '[1] ""'
    assert _text(await _run(r, "length(readLines(stdin()))")) == "[1] 0"


async def test_warnings_go_to_stderr_when_they_happen(r: RWorker) -> None:
    # Not deferred to the end as Rscript does: each warning is written when it is raised.
    code = (
        'f <- function() warning("in f")\nf()\nSys.sleep(0.3)\n'
        'cat("after\\n")\nSys.sleep(0.3)\nlog(-1)'
    )
    found = await _run(r, code)
    assert _merged(found) == [
        ("stderr", "Warning message:\nIn f(): in f\n"),
        ("stdout", "after\n"),
        ("stderr", "Warning message:\nIn log(-1): NaNs produced\n"),
    ]
    assert _text(found) == "[1] NaN"
    (top,) = _merged(await _run(r, 'warning("plain")'))
    assert top == ("stderr", "Warning message:\nplain\n")


async def test_a_sink_left_open_does_not_stall_the_cells(r: RWorker) -> None:
    started = time.monotonic()
    await _run(r, "sink(tempfile())")
    hidden = await _run(r, 'cat("hidden\\n"); 1')
    shown = await _run(r, 'sink(); cat("shown\\n"); 2')
    # Each event would wait SYNC_GRACE_SECONDS for a marker that went into the sink.
    assert time.monotonic() - started < worker_module.SYNC_GRACE_SECONDS
    assert (_stream(hidden, "stdout"), _text(hidden)) == ("", "[1] 1")
    assert (_stream(shown, "stdout"), _text(shown)) == ("shown\n", "[1] 2")


async def test_env_vars_are_set_for_one_execution(r: RWorker) -> None:
    os.environ.pop("ONLY_ONCE", None)
    assert _text(await _run(r, 'Sys.getenv("ONLY_ONCE")', env={"ONLY_ONCE": "v"})) == '[1] "v"'
    assert _text(await _run(r, 'Sys.getenv("ONLY_ONCE", unset = "gone")')) == '[1] "gone"'
    r.base_env = {"GLOBAL_ONE": "g"}
    await r.restart()  # base_env reaches a process on its first execution
    assert _text(await _run(r, 'Sys.getenv("GLOBAL_ONE")')) == '[1] "g"'
    assert _text(await _run(r, 'Sys.getenv("GLOBAL_ONE")', env={"GLOBAL_ONE": "o"})) == '[1] "o"'
    assert _text(await _run(r, 'Sys.getenv("GLOBAL_ONE")')) == '[1] "g"'


@pytest.mark.parametrize("loop", ["while (TRUE) {}", "Sys.sleep(30)"])
async def test_time_limit_interrupts_and_keeps_state(r: RWorker, loop: str) -> None:
    await _run(r, 'kept <- "yes"')
    started = time.monotonic()
    found = await _run(r, f'cat("start\\n")\n{loop}', time_limit=0.5)
    assert time.monotonic() - started < 5
    assert _stream(found, "stdout") == "start\n"
    (error,) = _errors(found)
    assert error["name"] == "TimeoutError"
    assert "interrupted" in error["value"]
    assert _text(await _run(r, "kept")) == '[1] "yes"'


async def test_an_interrupt_between_cells_does_not_hit_the_next_one(r: RWorker) -> None:
    await _run(r, "kept <- 3")
    assert r.pid is not None
    os.killpg(r.pid, signal.SIGINT)  # what a time limit that came just too late sends
    await asyncio.sleep(0.3)
    found = await _run(r, "Sys.sleep(0.2); kept")
    assert _errors(found) == []
    assert _text(found) == "[1] 3"


async def test_a_worker_that_ignores_the_interrupt_is_restarted(
    r: RWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "INTERRUPT_GRACE_SECONDS", 0.5)
    code = "lost <- 1\nrepeat tryCatch(Sys.sleep(10), interrupt = function(e) NULL)"
    (error,) = _errors(await _run(r, code, time_limit=0.3))
    assert error["name"] == "TimeoutError"
    assert "restarted" in error["value"]
    assert _text(await _run(r, "exists('lost')")) == "[1] FALSE"


async def test_an_abandoned_execution_is_interrupted_in_the_background(r: RWorker) -> None:
    await _run(r, 'kept <- "still"')
    stream = r.execute('cat("go\\n")\nwhile (TRUE) {}')
    async for event in stream:
        if event["type"] == "stdout":
            break
    await stream.aclose()  # type: ignore[attr-defined]
    found = await asyncio.wait_for(_run(r, "kept"), 10)
    assert _text(found) == '[1] "still"'


async def test_quit_and_restart_lose_state(r: RWorker) -> None:
    await _run(r, "lost <- 1")
    (error,) = _errors(await _run(r, "quit(status = 3)"))
    assert error["name"] == "ContextRestarting"
    assert "R process exited (code 3)" in error["value"]
    assert _text(await _run(r, "exists('lost')")) == "[1] FALSE"
    await _run(r, "again <- 1")
    await r.restart()
    assert _text(await _run(r, "exists('again')")) == "[1] FALSE"
    assert r.execution_count == 1


async def test_plots_become_png_results(r: RWorker) -> None:
    found = _plain(await _run(r, "hist(c(1, 2, 2, 3))\nplot(1:10)\n'drawn'"))
    assert [e["type"] for e in found] == ["number_of_executions", "result", "result", "result"]
    assert found[1]["text"] == '[1] "drawn"'
    figures = found[2:]
    for figure in figures:
        assert figure["is_main_result"] is False
        assert base64.b64decode(figure["png"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert figures[0]["png"] != figures[1]["png"]
    # Each cell's figures are sent and closed with it; a cell without plots sends none.
    assert [e["type"] for e in await _run(r, "1")] == ["number_of_executions", "result"]
    # A device the user opened is left alone.
    own = await _run(r, "pdf(file.path(tempdir(), 'own.pdf')); plot(1); invisible(dev.off())")
    assert [e["type"] for e in own] == ["number_of_executions"]


@pytest.fixture
def public_driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of driver.R any user can read (pytest's and the worktree's folders are private)."""
    with tempfile.TemporaryDirectory(prefix="r-driver-") as shared:
        Path(shared).chmod(0o755)
        driver = Path(shared) / "driver.R"
        driver.write_bytes(r_worker.DRIVER.read_bytes())
        driver.chmod(0o644)
        monkeypatch.setattr(r_worker, "DRIVER", driver)
        yield driver


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
async def test_r_runs_as_the_configured_user(public_driver: Path) -> None:
    _rscript()
    nobody = RunAs.lookup("nobody")
    worker = RWorker(cwd="/", settings=WorkerSettings(run_as=nobody))
    await worker.start()
    try:
        code = 'cat("out\\n")\npaste(system("id -u", intern = TRUE), Sys.getenv("USER"))'
        found = await _run(worker, code)
    finally:
        await worker.close()
    # The event pipe and fds 1 and 2 belong to root; the driver must still reach them.
    assert _stream(found, "stdout") == "out\n"
    assert _text(found) == f'[1] "{nobody.uid} nobody"'


async def test_a_missing_r_is_a_clear_400(tmp_path: Path) -> None:
    settings = WorkerSettings(rscript=str(tmp_path / "no-Rscript"))
    registry = ContextRegistry(default_cwd=str(tmp_path), settings=settings)
    with pytest.raises(RMissingError, match=r"R contexts need R, and .*no-Rscript"):
        await registry.create("r")
    assert registry.contexts == {}
    options = InterpreterOptions(default_cwd=str(tmp_path), envd_url="", rscript=settings.rscript)
    app = build_app(options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://interp") as client:
            created = await client.post("/contexts", json={"language": "r"})
            assert created.status_code == 400
            assert "need R" in created.text
            assert "--rscript" in created.text
            executed = await client.post("/execute", json={"code": "1", "language": "R"})
            assert executed.status_code == 400
            python = await client.post("/execute", json={"code": "1 + 1"})
            assert python.status_code == 200


async def test_r_contexts_over_http(tmp_path: Path) -> None:
    _rscript()
    options = InterpreterOptions(default_cwd=str(tmp_path), envd_url="")
    app = build_app(options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://interp") as client:
            created = (await client.post("/contexts", json={"language": "R"})).json()
            assert created["language"] == "r"
            first = await client.post(
                "/execute", json={"code": "n <- 41", "context_id": created["id"]}
            )
            assert first.status_code == 200
            second = await client.post(
                "/execute", json={"code": "n + 1", "context_id": created["id"]}
            )
            lines = [json.loads(line) for line in second.text.splitlines()]
            assert {"type": "result", "text": "[1] 42", "is_main_result": True} in lines
            default = await client.post("/execute", json={"code": "x <- 1+1; x", "language": "R"})
            lines = [json.loads(line) for line in default.text.splitlines()]
            assert {"type": "result", "text": "[1] 2", "is_main_result": True} in lines
            languages = sorted(c["language"] for c in (await client.get("/contexts")).json())
            assert languages == ["python", "r", "r"]
            restarted = await client.post(f"/contexts/{created['id']}/restart")
            assert restarted.status_code == 200
            assert (await client.delete(f"/contexts/{created['id']}")).status_code == 200
