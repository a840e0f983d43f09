"""Python workers and shell runners, driven directly (no HTTP)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from kube_agent_sandbox.sandboxd.interpreter import worker as worker_module
from kube_agent_sandbox.sandboxd.interpreter.events import Event
from kube_agent_sandbox.sandboxd.interpreter.pipes import RunAs
from kube_agent_sandbox.sandboxd.interpreter.shell import ShellRunner
from kube_agent_sandbox.sandboxd.interpreter.worker import PythonWorker, WorkerError, WorkerSettings


async def _run(
    runner: PythonWorker | ShellRunner,
    code: str,
    *,
    env: dict[str, str] | None = None,
    time_limit: float | None = None,
) -> list[Event]:
    return [e async for e in runner.execute(code, env=env, time_limit=time_limit)]


def _kinds(found: list[Event]) -> list[str]:
    return [e["type"] for e in found]


def _stdout(found: list[Event], name: str = "stdout") -> str:
    return "".join(e["text"] for e in found if e["type"] == name)


def _errors(found: list[Event]) -> list[Event]:
    return [e for e in found if e["type"] == "error"]


async def test_events_and_globals(python: PythonWorker) -> None:
    found = await _run(python, "a = 40\nprint('p')\na + 2")
    assert found == [
        {"type": "number_of_executions", "execution_count": 1},
        {"type": "stdout", "text": "p\n", "timestamp": found[1]["timestamp"]},
        {"type": "result", "text": "42", "is_main_result": True},
    ]
    again = await _run(python, "_ + a")  # `_` holds the last result, as in IPython
    assert again[-1]["text"] == "82"
    assert again[0]["execution_count"] == 2


async def test_statements_only_and_none_give_no_result(python: PythonWorker) -> None:
    assert _kinds(await _run(python, "x = 1")) == ["number_of_executions"]
    assert _kinds(await _run(python, "None")) == ["number_of_executions"]
    assert _kinds(await _run(python, "")) == ["number_of_executions"]


async def test_top_level_await(python: PythonWorker) -> None:
    found = await _run(
        python, "import asyncio\nawait asyncio.sleep(0.01)\nawait asyncio.sleep(0, 7)"
    )
    assert found[-1]["text"] == "7"


async def test_exceptions_and_system_exit_keep_the_worker(python: PythonWorker) -> None:
    pid = python.pid
    (error,) = _errors(await _run(python, "raise KeyError('k')"))
    assert error["name"] == "KeyError"
    assert error["value"] == "'k'"
    assert 'File "<cell-1>", line 1' in error["traceback"]
    broken = "class Odd(Exception):\n    def __str__(self):\n        raise ValueError\nraise Odd()"
    (odd,) = _errors(await _run(python, broken))
    assert odd == {**odd, "name": "Odd", "value": "<Odd: str() failed>"}
    replaced = await _run(python, "import sys\nsaved = sys.stdout\nsys.stdout = None\n8")
    assert replaced[-1]["text"] == "8"
    await _run(python, "sys.stdout = saved")
    (exit_error,) = _errors(await _run(python, "import sys\nsys.exit(3)"))
    assert exit_error["name"] == "SystemExit"
    (syntax,) = _errors(await _run(python, "1 +"))
    assert syntax["name"] == "SyntaxError"
    for source, name in (
        ("(" * 100_000 + ")" * 100_000, "SyntaxError"),
        ("x" + ".a" * 100_000, "RecursionError"),
        ("-" * 100_000 + "1", "MemoryError"),
    ):
        (nested,) = _errors(await _run(python, source))
        assert nested["name"] == name
    (null_byte,) = _errors(await _run(python, "x = '\x00'"))
    assert null_byte["name"] in {"SyntaxError", "ValueError"}
    assert python.pid == pid


async def test_env_vars_are_set_for_one_execution_and_restored(python: PythonWorker) -> None:
    await _run(python, "import os\nos.environ['KEEP'] = 'old'")
    found = await _run(
        python, "os.environ['KEEP'] + os.environ['NEW']", env={"KEEP": "a", "NEW": "b"}
    )
    assert found[-1]["text"] == "ab"
    after = await _run(python, "os.environ['KEEP'], os.environ.get('NEW')")
    assert after[-1]["text"] == "('old', None)"


async def test_stdin_is_empty_and_does_not_reach_the_protocol(python: PythonWorker) -> None:
    (error,) = _errors(await _run(python, "input()"))
    assert error["name"] == "EOFError"
    assert (await _run(python, "import sys\nsys.stdin.read()"))[-1]["text"] == ""


async def test_output_without_newline_and_unicode(python: PythonWorker) -> None:
    found = await _run(python, "print('é☃', end='')\nimport sys\nsys.stderr.write('w')")
    assert _stdout(found) == "é☃"
    assert _stdout(found, "stderr") == "w"
    assert found[-1]["text"] == "1"


async def test_large_output_arrives_whole(python: PythonWorker) -> None:
    found = await _run(python, "print('x' * 1_000_000)")
    assert _stdout(found) == "x" * 1_000_000 + "\n"


async def test_user_closing_stdout_does_not_hang_the_execution(python: PythonWorker) -> None:
    found = await asyncio.wait_for(_run(python, "import os\nos.close(1)\n5"), 10)
    assert found[-1]["text"] == "5"
    assert (await asyncio.wait_for(_run(python, "6"), 10))[-1]["text"] == "6"


async def test_background_output_between_cells_is_not_attributed(python: PythonWorker) -> None:
    await _run(
        python,
        "import threading, time\n"
        "def later():\n    time.sleep(0.3)\n    print('late')\n"
        "threading.Thread(target=later).start()",
    )
    await asyncio.sleep(0.6)
    found = await _run(python, "print('mine')")
    assert _stdout(found) == "mine\n"


async def test_exit_kills_the_worker_which_restarts(python: PythonWorker) -> None:
    await _run(python, "gone = 1")
    old_pid = python.pid
    found = await _run(python, "print('bye', flush=True)\nimport os\nos._exit(9)")
    assert _stdout(found) == "bye\n"
    (error,) = _errors(found)
    assert error["name"] == "ContextRestarting"
    assert "code 9" in error["value"]
    assert python.pid != old_pid
    after = await _run(python, "'gone' in globals()")
    assert after == [
        {"type": "number_of_executions", "execution_count": 1},
        {"type": "result", "text": "False", "is_main_result": True},
    ]


@pytest.mark.parametrize("pause", [0.0, 0.01, 0.2])
async def test_a_worker_killed_between_cells_is_restarted_on_use(
    python: PythonWorker, pause: float
) -> None:
    for _ in range(3):
        assert python.pid is not None
        os.kill(python.pid, signal.SIGKILL)
        await asyncio.sleep(pause)
        found = await asyncio.wait_for(_run(python, "3"), 15)
        # Either the death was noticed first (a new worker runs the cell) or the cell met it.
        texts = [e.get("text") for e in found if e["type"] == "result"]
        names = [e["name"] for e in _errors(found)]
        assert (texts, names) in ((["3"], []), ([], ["ContextRestarting"])), found
    assert (await _run(python, "4"))[-1]["text"] == "4"


async def test_time_limit_interrupts_and_keeps_globals(python: PythonWorker) -> None:
    await _run(python, "kept = 'yes'")
    started = time.monotonic()
    found = await _run(python, "import time\nprint('start')\ntime.sleep(30)", time_limit=0.5)
    assert time.monotonic() - started < 5
    assert _stdout(found) == "start\n"
    (error,) = _errors(found)
    assert error["name"] == "TimeoutError"
    assert "interrupted" in error["value"]
    assert (await _run(python, "kept"))[-1]["text"] == "yes"


async def test_time_limit_restarts_a_worker_that_ignores_interrupts(
    python: PythonWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "INTERRUPT_GRACE_SECONDS", 0.5)
    code = (
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "lost = 1\ntime.sleep(30)"
    )
    found = await _run(python, code, time_limit=0.3)
    (error,) = _errors(found)
    assert error["name"] == "TimeoutError"
    assert "restarted" in error["value"]
    assert (await _run(python, "'lost' in globals()"))[-1]["text"] == "False"


async def test_an_abandoned_execution_is_interrupted_in_the_background(
    python: PythonWorker,
) -> None:
    await _run(python, "kept = 'still'")
    stream = python.execute("import time\nprint('go', flush=True)\ntime.sleep(30)")
    async for event in stream:
        if event["type"] == "stdout":
            break
    await stream.aclose()  # type: ignore[attr-defined]
    started = time.monotonic()
    found = await asyncio.wait_for(_run(python, "kept"), 10)
    assert found[-1]["text"] == "still"
    assert time.monotonic() - started < 5


async def test_restart_during_an_execution_ends_it_with_an_error(python: PythonWorker) -> None:
    await _run(python, "lost = 1")

    async def slow() -> list[Event]:
        return await _run(python, "import time\ntime.sleep(30)")

    task = asyncio.create_task(slow())
    await asyncio.sleep(0.3)
    await python.restart()
    found = await asyncio.wait_for(task, 10)
    assert _errors(found)[0]["name"] == "ContextRestarting"
    assert (await _run(python, "'lost' in globals()"))[-1]["text"] == "False"
    assert python.execution_count == 1


async def test_close_during_an_execution(tmp_path: Path) -> None:
    worker = PythonWorker(cwd=str(tmp_path))
    await worker.start()
    task = asyncio.create_task(_run(worker, "import time\ntime.sleep(30)"))
    await asyncio.sleep(0.3)
    await asyncio.wait_for(worker.close(), 10)
    found = await asyncio.wait_for(task, 10)
    assert _errors(found)[0]["name"] == "ContextRemoved"


async def test_a_missing_python_is_a_worker_error(tmp_path: Path) -> None:
    worker = PythonWorker(cwd=str(tmp_path), settings=WorkerSettings(python="/nonexistent/py"))
    with pytest.raises(WorkerError, match="cannot start"):
        await worker.start()


async def test_a_python_that_exits_at_once_is_a_worker_error(tmp_path: Path) -> None:
    fake = tmp_path / "fakepython"
    fake.write_text("#!/bin/sh\necho broken >&2\nexit 2\n")
    fake.chmod(0o755)
    worker = PythonWorker(cwd=str(tmp_path), settings=WorkerSettings(python=str(fake)))
    with pytest.raises(WorkerError, match="code 2 before it was ready: broken"):
        await worker.start()


async def test_executions_in_one_context_run_one_at_a_time(python: PythonWorker) -> None:
    first = asyncio.create_task(_run(python, "import time\ntime.sleep(0.3)\n'first'"))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(_run(python, "'second'"))
    results = await asyncio.gather(first, second)
    assert [r[-1]["text"] for r in results] == ["first", "second"]
    assert [r[0]["execution_count"] for r in results] == [1, 2]


# --- shell ------------------------------------------------------------------------------------


async def test_shell_streams_and_reports_exit_status(tmp_path: Path) -> None:
    shell = ShellRunner(shell="bash", cwd=str(tmp_path))
    found = await _run(shell, 'echo "$GREETING"; pwd; echo e >&2; exit 3', env={"GREETING": "hi"})
    assert _stdout(found) == f"hi\n{tmp_path}\n"
    assert _stdout(found, "stderr") == "e\n"
    (error,) = _errors(found)
    assert error["name"] == "ExitCodeError"
    assert "status 3" in error["value"]
    assert _errors(await _run(shell, "true")) == []
    assert shell.execution_count == 2
    await shell.restart()
    assert (await _run(shell, "true"))[0]["execution_count"] == 1


async def test_shell_time_limit_kills_the_group(tmp_path: Path) -> None:
    shell = ShellRunner(shell="sh", cwd=str(tmp_path))
    started = time.monotonic()
    found = await _run(shell, "sleep 30 & sleep 30", time_limit=0.5)
    assert time.monotonic() - started < 5
    assert _errors(found)[0]["name"] == "TimeoutError"


async def test_shell_background_child_does_not_hold_the_execution(tmp_path: Path) -> None:
    shell = ShellRunner(shell="sh", cwd=str(tmp_path))
    started = time.monotonic()
    found = await asyncio.wait_for(_run(shell, "echo now; sleep 30 &"), 10)
    assert time.monotonic() - started < 5
    assert _stdout(found) == "now\n"


async def test_a_missing_shell_is_an_error_event(tmp_path: Path) -> None:
    shell = ShellRunner(shell="/nonexistent/sh", cwd=str(tmp_path))
    (error,) = _errors(await _run(shell, "true"))
    assert error["name"] == "ShellError"


async def test_the_package_folder_is_not_on_the_users_path(python: PythonWorker) -> None:
    found = await _run(python, "import sys\nsys.path[0], sys.argv")
    assert found[-1]["text"] == "('', [''])"
    (error,) = _errors(await _run(python, "import protocol"))  # a module next to driver.py
    assert error["name"] == "ModuleNotFoundError"


async def test_a_huge_result_is_cut_not_fatal(python: PythonWorker) -> None:
    found = await _run(python, "'x' * (70 * 1024 * 1024)")
    (result,) = [e for e in found if e["type"] == "result"]
    assert result["text"].endswith("characters cut]")
    assert len(result["text"]) < 5 * 1024 * 1024
    assert (await _run(python, "1"))[-1]["text"] == "1"


async def test_junk_on_the_event_pipe_kills_and_restarts_the_worker(python: PythonWorker) -> None:
    code = (
        "import gc, os, time\n"
        "driver = next(o for o in gc.get_objects() if type(o).__name__ == 'Driver')\n"
        "os.write(driver.event_fd, b'\\xff\\xff\\xff\\xff')\n"
        "time.sleep(30)"
    )
    found = await asyncio.wait_for(_run(python, code), 15)
    assert _errors(found)[-1]["name"] == "ContextRestarting"
    assert (await _run(python, "2"))[-1]["text"] == "2"


SYSTEM_PYTHON = "/usr/bin/python3"  # readable by other users, unlike a venv under /root


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="needs a system python3")
async def test_code_runs_as_the_configured_user() -> None:
    nobody = RunAs.lookup("nobody")
    worker = PythonWorker(cwd="/", settings=WorkerSettings(python=SYSTEM_PYTHON, run_as=nobody))
    await worker.start()
    try:
        found = await _run(worker, "import os\nos.getuid(), os.getgid(), os.environ['HOME']")
        assert found[-1]["text"] == f"({nobody.uid}, {nobody.gid}, {nobody.home!r})"
    finally:
        await worker.close()
    shell = ShellRunner(shell="sh", cwd="/", run_as=nobody)
    assert _stdout(await _run(shell, "id -u; echo $USER")) == f"{nobody.uid}\nnobody\n"


async def test_a_slow_reader_slows_the_worker_instead_of_filling_memory(
    python: PythonWorker,
) -> None:
    code = (
        "import sys\nchunk = 'y' * 65535 + '\\n'\n"
        "for _ in range(3000):\n    sys.stdout.write(chunk)"
    )
    stream = python.execute(code)
    received = 0
    try:
        async for event in stream:
            if event["type"] == "stdout":
                received += len(event["text"])
                break
        await asyncio.sleep(1.5)  # the client stops reading
        process = python._process
        assert process is not None
        assert process.queue.qsize() <= worker_module.QUEUE_ITEMS
        assert process.alive
        async for event in stream:  # reading again lets the cell finish
            if event["type"] == "stdout":
                received += len(event["text"])
        assert received == 3000 * 65536
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def test_close_does_not_wait_forever_for_an_unclosed_execution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "CLOSE_WAIT_SECONDS", 0.5)
    worker = PythonWorker(cwd=str(tmp_path))
    await worker.start()
    stream = worker.execute("import time\nprint('x', flush=True)\ntime.sleep(30)")
    async for _ in stream:  # started, then neither read nor closed
        break
    await asyncio.wait_for(worker.close(), 10)
    assert worker._process is not None
    assert not worker._process.alive
